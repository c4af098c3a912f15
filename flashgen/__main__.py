"""`python -m flashgen ...`: the `flashgen` command, for environments whose scripts directory is
not on PATH (the same parser and exit status as the installed script)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
