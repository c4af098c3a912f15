"""The torch.compile backend (`backend`) and the graph pattern recognisers (`patterns`).

Imports `flashgen.ops` (the op it rewrites to) and the rooms below.
"""
