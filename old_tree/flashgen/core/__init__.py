"""Value types every room shares: KernelSpec, TileConfig, implementation names, paths, env.

The bottom layer: imports nothing else from flashgen (the template hash is computed here, in
`env`, from the files `paths` finds) and no torch or database at import time.
"""
