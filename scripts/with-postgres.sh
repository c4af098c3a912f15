#!/usr/bin/env bash
# Run a command with a throw-away PostgreSQL server: `scripts/with-postgres.sh CMD ARGS...`.
#
# Starts the server (scripts/pg.sh), exports FLASHGEN_TEST_PG_URL for the command, always stops
# the server afterwards (also on failure or Ctrl-C) and exits with the command's status. Without
# PostgreSQL binaries it warns and runs the command alone: the `postgres` tests then skip.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)

if [ $# -eq 0 ]; then
    echo "usage: $0 CMD [ARGS...]" >&2
    exit 2
fi

if ! exports=$("$here/pg.sh" start); then
    echo "with-postgres.sh: WARNING: could not start PostgreSQL; postgres tests will skip" >&2
    exec "$@"
fi
eval "$exports"
trap '"$here/pg.sh" stop "$FLASHGEN_PG_DIR"' EXIT
trap 'exit 130' INT TERM
"$@"
status=$?
exit $status
