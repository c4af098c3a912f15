"""Value types every room shares: KernelSpec, TileConfig, implementation names, paths, env.

The bottom layer: imports nothing else from flashgen (one lazy exception: `env.template_hash_or_none`
asks `kernels.codegen` for the template hash) and no torch or database at import time.
"""
