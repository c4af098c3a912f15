"""A dispatch mode that records every aten/flashgen op a block runs (tests of the eager paths
that skip the dispatcher's hops: a user's TorchDispatchMode must still see flashgen's ops).
A helper module, imported by tests/runtime/test_eager.py and test_plain.py."""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode


class SeeOps(TorchDispatchMode):
    """`seen`: the ops run inside the mode, as strings, in order."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))
