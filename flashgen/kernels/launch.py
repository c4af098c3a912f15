"""Launch a compiled Triton kernel without `JITFunction.run`'s per-call work.

`kernel[grid](*args)` binds the arguments, builds a specialisation key (pointer alignment,
integer divisibility), reads several knobs, looks the key up, builds launch metadata and calls
the launch hooks (Python no-ops unless a profiler is attached) at every call; then Triton's
launcher encodes every host TMA descriptor again (`cuTensorMapEncodeTiled`). On the H200 that
was most of an attention call's host time on a short sequence (benchmarks/RESULTS.md). A launch
plan (`flashgen.kernels.fwd`, `flashgen.kernels.bwd`) fixes everything a specialisation depends on in its cache
key, so after the first call through the JIT (which compiles, launches, and returns the
compiled kernel) `Launch` calls the compiled kernel directly, in one of two ways:

- `RawLaunch` (Triton 3.6's CUDA launcher, recognised by its structure): the C launch function
  itself, with the descriptor arguments expanded as Triton's wrapper expands them, except that
  each encoded descriptor is remembered per (plan slot, base address): the encoding is a pure
  function of the address and the slot's fixed shape, strides, block and layout, so a tensor at
  an address seen before (the caching allocator hands addresses out again) costs a dict lookup.
- `FastLaunch` (any Triton whose `CompiledKernel.run` takes what `JITFunction.run` passes it,
  3.6 and 3.9 here): the compiled kernel's launcher with the JIT's argument list: grid, stream,
  function handle, packed metadata, then every parameter in signature order (constexprs too).

Where neither holds (the CPU interpreter returns no compiled kernel; a kernel whose parameters
are not the positional args followed by the constexprs) every call goes through the JIT. So do
calls while a Triton launch hook is attached (a profiler sees every launch), and every call
when FLASHGEN_DIRECT_LAUNCH=0 (read when a plan is built; `=compiled` stops at FastLaunch).

Arguments at a `Launch`'s descriptor positions are tensors; the Launch turns them into host
TMA descriptors (`flashgen.kernels.tma`) on the paths that need objects.
"""

from __future__ import annotations

import itertools
import logging
import operator
import os
from typing import Any

import torch

from .tma import descriptor_factory, gluon_descriptor_factory

log = logging.getLogger(__name__)

# What Triton's CUDA driver itself uses for the current stream (absent from CPU-only builds,
# which never take the direct path).
# (device index -> its current stream's handle, what launches take)
raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_UNSET = object()
_MAX_ENCODED = 8192
MAX_PREFIXES = 256
_data_ptr = operator.methodcaller("data_ptr")
_encoded: dict[tuple[int, int], list] = {}  # (slot id, base address) -> descriptor arguments
_slot_ids = itertools.count()


def _runtime_knobs():
    try:
        from triton import knobs
    except ImportError:  # a Triton without knobs has no launch hooks to honour
        return None
    return knobs.runtime


_KNOBS = _runtime_knobs()


def hooks_active() -> bool:
    """Whether a Triton launch hook is attached (then launches go through the JIT)."""
    if _KNOBS is None:
        return False
    for hook in (_KNOBS.launch_enter_hook, _KNOBS.launch_exit_hook):
        # 3.6+: a HookChain (never None) that is a no-op while its `calls` list is empty.
        if hook is not None and getattr(hook, "calls", True):
            return True
    return False


def capturing(t) -> bool:
    """Whether a CUDA graph is being captured on the current stream for `t`'s calls (then a
    launch plan takes its config without the database and is not kept)."""
    return t.is_cuda and torch.cuda.is_current_stream_capturing()


def direct_device(t, aligned: bool):
    """The `device` argument of `Launch` for a plan built from tensor `t`: its CUDA device index
    when every pointer the plan launches with is 16-byte aligned (Triton specialises each
    pointer on that alignment, and the plan key records only "all aligned"), else None. Also
    None when `t` is not on the current device (the JIT compiles and launches for the current
    device, and the direct path must launch exactly what the JIT did) or direct launches are
    switched off (FLASHGEN_DIRECT_LAUNCH=0)."""
    if not (aligned and t.is_cuda) or os.environ.get("FLASHGEN_DIRECT_LAUNCH") == "0":
        return None
    if t.device.index != torch.cuda.current_device():
        return None
    return t.device.index


def keep(cache: dict, key, value):
    """`value`, stored in `cache` under `key`, for a small helper kernel's launches kept per
    call signature (a key-padding mask's key range, a dense mask's block lists): the cache is
    emptied first when it holds MAX_KEPT entries, as `plans.PlanCache` starts over. Unlike a
    plan, a Launch holds no config and no device memory, so it is kept during a capture too.
    Called on a miss only (the callers' hits are one dict `get`, with nothing imported)."""
    if len(cache) >= MAX_KEPT:
        cache.clear()
    cache[key] = value
    return value


MAX_KEPT = 256


def value_classes(*values) -> tuple:
    """What Triton specialises a compiled kernel on, for arguments a launch plan's key does not
    fix otherwise: per int, (== 1, % 16 == 0) (an int equal to 1 is compiled in as a
    constant, a multiple of 16 gets a divisibility hint); per tensor, whether its address is
    16-byte aligned; tuples are walked; None (an absent argument) stays None.

    A plan launches the kernel the JIT compiled for its first call, directly, for every later
    call with that key; the kernel is right only for arguments of the classes it was compiled
    for (a window of 1 key on the first call would otherwise stay 1 for every later window
    size, and a mask view at an odd address would be read with aligned vector loads). So
    launchers put these classes of their run-time ints and extra tensors into the key."""
    out = []
    for value in values:
        if value is None:
            out.append(None)
        elif isinstance(value, tuple | list):
            out.append(value_classes(*value))
        elif isinstance(value, torch.Tensor):
            out.append(not value.data_ptr() & 15)
        elif isinstance(value, int):
            out.append((value == 1, value % 16 == 0))
        else:
            raise TypeError(f"no specialisation class for {type(value).__name__}")
    return tuple(out)


class _Descriptors:
    """Which arguments of a launch travel as TMA descriptors, and their fixed layout.

    A template is (shape, strides, block shape) for a Triton kernel, or (shape, strides, block
    shape, shared layout) for a Gluon kernel, whose descriptors carry their NVMMA layout (the
    first launch through the JIT needs that type; the encoded form the direct launchers pass
    depends only on the address, shape, strides and the compiled kernel's metadata)."""

    __slots__ = ("positions", "templates", "makers")

    def __init__(self, descs):
        self.positions = tuple(pos for pos, _ in descs)
        self.templates = tuple(template for _, template in descs)
        # each slot's constructor, chosen once (FastLaunch builds descriptors at every call)
        self.makers = tuple(
            gluon_descriptor_factory() if len(t) == 4 else descriptor_factory()
            for t in self.templates
        )

    def objects(self, args: tuple) -> tuple:
        """`args` with the tensors at descriptor positions replaced by host descriptors."""
        if not self.positions:
            return args
        out = list(args)
        for pos, template, make in zip(self.positions, self.templates, self.makers, strict=True):
            out[pos] = make(args[pos], *template)
        return tuple(out)


class Launch:
    """One kernel launch of a launch plan: the JIT kernel, its grid and fixed keyword values.

    `launch(*args)` launches through the JIT the first time (compiling if needed), then
    directly (`RawLaunch` or `FastLaunch`). `device`: the CUDA device index whose current
    stream to launch on, or None to always go through the JIT (`direct_device`). `descs`:
    (position, (shape, strides, block_shape)) for each argument passed as a tensor that the
    kernel takes as a TMA descriptor.
    """

    __slots__ = ("kernel", "grid", "constexprs", "options", "device", "fast", "descs")

    def __init__(self, kernel, grid: tuple, constexprs: dict, options: dict, device, descs=()):
        self.kernel = kernel
        self.grid = grid
        self.constexprs = constexprs
        self.options = options
        self.device = device
        self.fast = None if device is None else _UNSET
        self.descs = _Descriptors(descs)

    def __call__(self, *args: Any) -> None:
        try:
            self._launch(args)
        except RuntimeError as exc:
            if not self.descs.positions or NO_CONTEXT not in str(exc):
                raise
            bind_context()
            self._launch(args)  # once more: an error now is raised

    def _launch(self, args: tuple) -> None:
        fast = self.fast
        if fast is not None and fast is not _UNSET and not hooks_active():
            fast(raw_stream(self.device), args)
            return
        objects = self.descs.objects(args)
        if fast is _UNSET:
            self.fast = _first(self, objects)
        else:
            self.kernel[self.grid](*objects, **self.constexprs, **self.options)


# What Triton's TMA descriptor encoding raises on a thread without a current CUDA context.
NO_CONTEXT = "invalid device context"


def bind_context() -> None:
    """Make the current device's primary CUDA context current on this thread.

    Encoding a host TMA descriptor is a CUDA driver call, which needs a current context and,
    unlike the runtime API that PyTorch's own launches go through, does not bind the device's
    primary context to a thread that has none. A thread whose first CUDA work is a launch with
    descriptors (autograd's device thread when flashgen's backward is the first node it runs,
    or any new thread) then gets "invalid device context" from Triton. Asking the current
    stream whether it is idle is a runtime call: it binds the context (and changes nothing:
    `Launch` calls this only after such an error, then launches again)."""
    torch.cuda.current_stream().query()


def _first(run: Launch, objects: tuple):
    """Launch through the JIT and return the direct launcher for later calls (or None)."""
    compiled = run.kernel[run.grid](*objects, **run.constexprs, **run.options)
    names = getattr(run.kernel, "arg_names", None)
    if compiled is None or names is None or list(names[len(objects) :]) != list(run.constexprs):
        return None
    constexprs = tuple(run.constexprs.values())
    try:
        if os.environ.get("FLASHGEN_DIRECT_LAUNCH") != "compiled":
            parts = raw_parts(compiled)
            if parts is not None:
                return RawLaunch(compiled, parts, run.grid, constexprs, run.descs)
        return FastLaunch(compiled, run.grid, constexprs, run.descs)
    except Exception as exc:  # the launch above happened; only the shortcut is lost
        log.debug("flashgen: no direct launch for %s: %r", getattr(run.kernel, "fn", None), exc)
        return None


def _grid3(grid: tuple) -> tuple:
    return tuple(grid) + (1,) * (3 - len(grid))


class FastLaunch:
    """A compiled kernel called through its launcher with `JITFunction.run`'s argument list."""

    __slots__ = ("_run", "_function", "_metadata", "_grid", "_constexprs", "_descs")

    def __init__(self, compiled: Any, grid: tuple, constexprs: tuple, descs: _Descriptors):
        self._run = compiled.run  # loads the module and builds the launcher on first access
        self._function = compiled.function
        self._metadata = compiled.packed_metadata
        self._grid = _grid3(grid)
        self._constexprs = constexprs
        self._descs = descs

    def __call__(self, stream: int, args: tuple) -> None:
        gx, gy, gz = self._grid
        self._run(
            gx, gy, gz, stream, self._function, self._metadata, None, None, None,
            *self._descs.objects(args), *self._constexprs,
        )  # fmt: skip


def raw_parts(compiled: Any):
    """(C launch function, launcher, {argument index: descriptor metadata}, encode) of a
    Triton 3.6 CUDA launcher, or None for anything else.

    3.6's `CudaLauncher.launch` is either the C function itself (no descriptor arguments) or
    `wrap_handle_tensordesc`'s inner function, which expands each descriptor argument with
    `make_tensordesc_arg(arg, metadata)` and calls the C function held in its closure. Only
    that exact code object is accepted (so a Triton that changes it falls back to FastLaunch),
    and only kernels without global or profile scratch memory (which the launcher would have
    to allocate per call).
    """
    try:
        from triton.backends.nvidia import driver as nv
    except ImportError:
        return None
    launcher = compiled.run
    make_arg = getattr(nv, "make_tensordesc_arg", None)
    wrap = getattr(nv, "wrap_handle_tensordesc", None)
    if (
        type(launcher).__name__ != "CudaLauncher"
        or make_arg is None
        or wrap is None
        or make_arg.__code__.co_argcount != 2
        or getattr(nv, "_BASE_ARGS_FORMAT", None) != "iiiKKppOOOOOO"
        or getattr(launcher, "global_scratch_size", 1) != 0
        or getattr(launcher, "profile_scratch_size", 1) != 0
    ):
        return None
    launch = launcher.launch
    code = getattr(launch, "__code__", None)
    if code is None:  # the C function: no descriptor arguments
        return launch, launcher, {}, make_arg
    if code not in wrap.__code__.co_consts or launch.__closure__ is None:
        return None
    cells = dict(zip(code.co_freevars, (c.cell_contents for c in launch.__closure__), strict=True))
    if not {"launcher", "tensordesc_indices", "tensordesc_meta"} <= cells.keys():
        return None
    indices = sorted(cells["tensordesc_indices"])
    metas = list(cells["tensordesc_meta"])
    if len(indices) != len(metas):
        return None
    return cells["launcher"], launcher, dict(zip(indices, metas, strict=True)), make_arg


class RawLaunch:
    """Triton 3.6's C launch function called directly, descriptors encoded once per address.

    When the descriptor arguments come first (the forward's and the split backward's q, k, v,
    out/do), the whole expanded prefix is remembered per tuple of their base addresses
    (`MAX_PREFIXES` per launch), so a repeated call costs one dict lookup there instead of one
    per descriptor and the list splicing around them.

    Tensors among the other arguments are passed as their addresses (ints). Given a tensor, the
    C function calls its `data_ptr` method and then `cuPointerGetAttribute` to check that the
    device can reach it; given an int it takes the address as it is. A plan launches directly
    only tensors on the current CUDA device (`direct_device`), which that check would accept.
    Which positions hold tensors is fixed by the plan (its key decides the argument list), so
    it is read from the first call."""

    __slots__ = (
        "_raw", "_grid", "_rest", "_constexprs", "_slots", "_count", "_prefixes", "_ptrs",
    )  # fmt: skip

    def __init__(self, compiled, parts, grid: tuple, constexprs: tuple, descs: _Descriptors):
        raw, launcher, metas, self_make = parts
        if sorted(metas) != sorted(descs.positions) or any(m is None for m in metas.values()):
            # (without metadata Triton passes the tensor itself along: nothing to remember)
            raise ValueError("the kernel's descriptor arguments are not the plan's")
        self._raw = raw
        self._grid = _grid3(grid)
        coop, pdl = launcher.launch_cooperative_grid, launcher.launch_pdl
        function, metadata = compiled.function, compiled.packed_metadata
        # the stream goes between the grid and the function: filled in per call
        self._rest = (function, coop, pdl, None, None, metadata, None, None, None)
        self._constexprs = constexprs
        self._slots = tuple(
            (pos, next(_slot_ids), template, metas[pos], self_make)
            for pos, template in zip(descs.positions, descs.templates, strict=True)
        )
        leading = descs.positions == tuple(range(len(descs.positions)))
        self._count = len(descs.positions) if leading else 0
        self._prefixes: dict[tuple, tuple] = {}
        self._ptrs: tuple[int, ...] | None = None  # tensor positions after the prefix

    def __call__(self, stream: int, args: tuple) -> None:
        gx, gy, gz = self._grid
        count = self._count
        if count or not self._slots:
            tail = args[count:] if count else args
            ptrs = self._ptrs
            if ptrs is None:
                ptrs = self._ptrs = tuple(
                    i for i, a in enumerate(tail) if isinstance(a, torch.Tensor)
                )
            if ptrs:
                tail = list(tail)
                for i in ptrs:
                    tail[i] = tail[i].data_ptr()
            if not count:
                self._raw(gx, gy, gz, stream, *self._rest, *tail, *self._constexprs)
                return
            key = tuple(map(_data_ptr, args[:count]))
            prefix = self._prefixes.get(key)
            if prefix is None:
                prefix = self._expand(args[:count])
                if len(self._prefixes) >= MAX_PREFIXES:
                    self._prefixes.clear()
                self._prefixes[key] = prefix
            self._raw(gx, gy, gz, stream, *self._rest, *prefix, *tail, *self._constexprs)
            return
        self._raw(gx, gy, gz, stream, *self._rest, *self._expand(args), *self._constexprs)

    def _expand(self, args: tuple) -> tuple:
        """`args` with each descriptor argument expanded (encoded once per slot and address)."""
        expanded: list = []
        start = 0
        for pos, slot, template, meta, make_arg in self._slots:
            expanded += args[start:pos]
            base = args[pos]
            key = (slot, base.data_ptr())
            encoded = _encoded.get(key)
            if encoded is None:
                encoded = _encode(base, template, meta, make_arg, key)
            expanded += encoded
            start = pos + 1
        expanded += args[start:]
        return tuple(expanded)


def _encode(base, template, meta, make_arg, key) -> list:
    shape, strides, block = template[:3]  # a Gluon template's layout is in `meta` already
    encoded = make_arg(descriptor_factory()(base, shape, strides, block), meta)
    if len(_encoded) >= _MAX_ENCODED:
        _encoded.clear()
    _encoded[key] = encoded
    return encoded
