"""The kernels: codegen (top-level templates/ -> hashed file -> import), the forward and backward
launchers, the Hopper Gluon family, TMA, input validation, the float64 reference, `flashgen kernel`.

Imports `flashgen.core` and `flashgen.hardware`.
"""
