"""A TMA reduce-add from shared memory to global memory for Gluon kernels on Triton 3.6.

Why: the Hopper backward adds each step's dQ partial into an fp32 buffer that every key block
of the head adds to. Element atomics (one `red` per value pair from the compute warpgroups)
are what held that kernel back (benchmarks/RESULTS.md, "Hopper backward in Gluon"); the TMA
unit can add a whole shared-memory tile in one bulk operation (`cp.reduce.async.bulk.tensor`
... `.add`), which is how FlashAttention-3 reduces dQ. Newer Gluon exposes it as
`tma.async_atomic_add`; Triton 3.6's Gluon does not, though its compiler has the operation
(`ttng.async_tma_reduce`, what a Triton-language descriptor `atomic_add` lowers to) and its IR
builder the call that creates it. `tma_reduce_add` is that call as a Gluon builtin, with the
signature of `tma.async_copy_shared_to_global` (descriptor, coordinates, shared source); like
a TMA store it joins the thread's bulk group, so `tma.store_wait` waits for it.

`reduce_name()` says which name a template should call, or None where neither exists (the
template then keeps element atomics). Imported by the rendered kernels and the Hopper backward
launcher only, never by `import flashgen` (it imports Triton).
"""

from __future__ import annotations

import functools


@functools.cache
def reduce_name() -> str | None:
    """ "tma.async_atomic_add" (Gluon has it), "tma_reduce_add" (this module's builtin: Triton's
    IR builder has the operation), or None."""
    try:
        from triton._C.libtriton import gluon_ir, ir
        from triton.experimental.gluon.language.nvidia.hopper import tma
    except ImportError:
        return None
    if hasattr(tma, "async_atomic_add"):
        return "tma.async_atomic_add"
    builder = getattr(gluon_ir, "GluonOpBuilder", None)
    if hasattr(ir, "DESCRIPTOR_REDUCE_KIND") and hasattr(builder, "create_async_tma_reduce"):
        return "tma_reduce_add"
    return None


def _make_builtin():
    from triton._C.libtriton import ir
    from triton.experimental.gluon.language._core import builtin

    @builtin
    def tma_reduce_add(tensor_desc, coord, src, _semantic=None):
        """Add shared-memory tile `src` into the global tile of `tensor_desc` at `coord`
        (TMA reduce-add; out-of-bounds rows and columns are clipped)."""
        coord = _semantic._convert_to_ir_values(coord, require_i64=False)
        _semantic.builder.create_async_tma_reduce(
            ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord, src.handle
        )

    return tma_reduce_add


if reduce_name() == "tma_reduce_add":
    tma_reduce_add = _make_builtin()
