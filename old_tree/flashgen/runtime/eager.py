"""Call a library op's Python kernel directly when the dispatcher would do nothing else.

`flashgen.runtime.primitives` registers its primitives (`flashgen::attention_fwd`, `flashgen::attention_bwd`)
as `torch.library` ops so that torch.compile, fake tensors, opcheck and dispatch modes see one
opaque node. In a plain eager call none of that is active, and the dispatcher hop only boxes the
arguments and calls back into the same Python function: measured on the H200 it was about 4 µs of
a 28 µs forward call (benchmarks/RESULTS.md, host time), paid again by the backward.

`direct(op, kernel)` returns a callable with the op's positional signature that calls `kernel`
itself when the call is plain eager, else `op`. Plain eager means all of:

- not traced by Dynamo (`torch.compiler.is_compiling()`);
- the first tensor argument is exactly a `torch.Tensor` (fake, functional and other subclass
  tensors of AOTAutograd, `make_fx` and opcheck go through the op);
- no `TorchDispatchMode` on the stack (FlopCounterMode, debug modes, `FakeTensorMode` as a mode);
- no functorch transform active (vmap/grad wrap tensors in plain-looking `torch.Tensor`s);
- the autograd profiler off (a profile should show the op by name).

FLASHGEN_DIRECT_OP=0 (read once, at import) makes every call go through the op: the reference
the tests and `benchmarks/host_time.py` compare against.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

ENV = "FLASHGEN_DIRECT_OP"


def _checks() -> tuple[Callable[[], bool], ...] | None:
    """The cheap predicates that must all be false for a direct call (None: never direct,
    because this torch lacks one of the probes; the op path is always right)."""
    c = torch._C
    try:
        stack_len = c._len_torch_dispatch_stack
        level = c._functorch.maybe_current_level
        profiling = torch.autograd._profiler_enabled
    except AttributeError:
        return None
    return (torch.compiler.is_compiling, stack_len, level, profiling)


def plain_eager(t) -> bool:
    """Whether a call with first tensor `t` may skip the dispatcher (module docstring)."""
    checks = _CHECKS
    if checks is None or type(t) is not torch.Tensor:
        return False
    compiling, stack_len, level, profiling = checks
    return not compiling() and not stack_len() and level() is None and not profiling()


_CHECKS = None if os.environ.get(ENV) == "0" else _checks()  # "0": plain_eager is always False


def direct(op, kernel) -> Callable:
    """`op`'s positional calls, through `kernel` itself when `plain_eager(first argument)`."""
    if _CHECKS is None or os.environ.get(ENV) == "0":
        return op
    tensor = torch.Tensor
    compiling, stack_len, level, profiling = _CHECKS

    def call(first, *args):
        if (
            type(first) is tensor
            and not compiling()
            and not stack_len()
            and level() is None
            and not profiling()
        ):
            return kernel(first, *args)
        return op(first, *args)

    call.__doc__ = f"{op} (direct in plain eager calls: flashgen.runtime.eager)"
    return call


def function_apply(cls, tensor_positions: tuple[int, ...]) -> Callable:
    """`cls.apply` (a `torch.autograd.Function` without `setup_context`) minus the Python
    layer of `Function.apply`, where that layer does nothing but cost: with no functorch
    transform active it only unwraps dead functorch wrappers among the arguments and calls the
    C++ apply. Here the same happens for the arguments at `tensor_positions` (the only ones that
    can be tensors); with a transform active, and under Dynamo (which knows `Function.apply`,
    not this function), `cls.apply` runs as usual. Measured on the CPU the Python layer was
    about 3 µs of an 8 µs apply."""
    from torch.autograd.function import Function, _is_setup_context_defined

    functorch = torch._C._functorch
    active = getattr(torch._C, "_are_functorch_transforms_active", None)
    unwrap = getattr(functorch, "unwrap_if_dead", None)
    if active is None or unwrap is None or _is_setup_context_defined(cls.setup_context):
        return cls.apply
    c_apply = super(Function, cls).apply
    tensor = torch.Tensor
    slow = cls.apply

    compiling = torch.compiler.is_compiling

    def apply(*args):
        if active() or compiling():
            return slow(*args)
        args = list(args)
        for i in tensor_positions:
            a = args[i]
            if isinstance(a, tensor):
                args[i] = unwrap(a)
        return c_apply(*args)

    return apply
