"""The package's version, in one place: `flashgen.__version__` and the environment fingerprint
(`flashgen.core.env`) both read it, so neither imports the package above it."""

VERSION = "0.1.0"
