"""When the TMA-descriptor kernels may run: shared by the forward and backward launchers.

Host tensor descriptors (Hopper's tensor memory accelerator) need compute capability 9 or newer,
a Triton that ships `TensorDescriptor`, a 16-byte aligned base and non-zero outer strides that
are multiples of 16 bytes, for EVERY tensor a descriptor is made of (outputs too: a fresh
contiguous output of head dim 20 in fp16 has 40-byte rows). Anything else takes the pointer-load
kernels.
"""

from __future__ import annotations

import functools
import os


@functools.cache
def device_has_tma(device_index: int) -> bool:
    import torch

    try:
        from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.get_device_capability(device_index)[0] >= 9


def tma_compatible(t) -> bool:
    """16-byte aligned base and non-zero, 16-byte multiple outer strides (the last is 1)."""
    size = t.element_size()
    return t.data_ptr() % 16 == 0 and all(s > 0 and (s * size) % 16 == 0 for s in t.stride()[:3])


def env_reader(name: str):
    """A function returning the current value of environment variable `name` (None if unset).

    The launchers key their launch plans on FLASHGEN_FWD_TMA / FLASHGEN_BWD_TMA at every call
    (benchmarks switch them between calls), and `os.environ.get` costs over a microsecond
    (it encodes the key each time). CPython's `os.environ` keeps its values in `_data` under
    keys encoded once here; the reader returns that raw value (bytes on POSIX), which is only
    compared and passed to `use_tma`. Without `_data`, it falls back to `os.environ.get`.
    """
    data = getattr(os.environ, "_data", None)
    encode = getattr(os.environ, "encodekey", None)
    if isinstance(data, dict) and encode is not None:
        key = encode(name)
        return lambda: data.get(key)
    return lambda: os.environ.get(name)


def use_tma(env_var: str, tensors, *, eligible: bool = True, forced=None) -> bool:
    """Whether a launcher takes its descriptor kernels for `tensors` (every tensor it would make
    a descriptor of). `env_var` set to "0" / "1" forces the choice (also in the interpreter,
    which is how the tests cover that path); otherwise CUDA on a TMA device, the launcher's own
    `eligible` rule, and every tensor `tma_compatible`. `forced`: the variable's value when the
    caller has read it already (`env_reader`; str or bytes)."""
    if forced is None:
        forced = os.environ.get(env_var)
    if forced:
        return forced not in ("0", b"0")
    if not (eligible and _on_tma_device(tensors[0])):
        return False
    return all(tma_compatible(t) for t in tensors)


def _on_tma_device(t) -> bool:
    return t.is_cuda and device_has_tma(t.device.index or 0)


def descriptor_template(t, rows: int, block_d: int) -> tuple[list, list, list]:
    """(shape, strides, block shape) of the descriptor of a [B, H, S, D] tensor like `t` read
    `rows` rows at a time: what a launch plan fixes per descriptor argument."""
    return list(t.shape), list(t.stride()), [1, 1, rows, block_d]


def _unchecked(cls, given: tuple):
    """A constructor of dataclass `cls` from the `given` fields in order, without its
    `__post_init__` checks, other fields at their defaults; `cls` itself (checked) if a field
    outside `given` has no plain default."""
    import dataclasses

    if not dataclasses.is_dataclass(cls) or "__slots__" in vars(cls):
        return cls
    defaults = {f.name: f.default for f in dataclasses.fields(cls) if f.name not in given}
    if any(value is dataclasses.MISSING for value in defaults.values()):
        return cls

    def make(*values):
        desc = cls.__new__(cls)
        desc.__dict__.update(defaults, **dict(zip(given, values, strict=True)))
        return desc

    return make


@functools.cache
def gluon_descriptor_factory():
    """`descriptor_factory` for Gluon's Hopper TensorDescriptor: (base, shape, strides, block
    shape, NVMMA shared layout). Its checks (alignment, strides, the layout against the block)
    repeat what the Hopper family's `choose` and a launch plan fixed once."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    return _unchecked(TensorDescriptor, ("base", "shape", "strides", "block_shape", "layout"))


@functools.cache
def descriptor_factory():
    """A constructor for host TMA descriptors without TensorDescriptor's own checks.

    Those checks (alignment, strides, block shape) repeat what `use_tma` checks of every tensor
    and `check_inputs` of the shapes, and cost a few microseconds per descriptor, four per call, on the path every
    attention call takes. Fields the dataclass may grow in later Triton versions get their
    defaults; if one has no plain default, the checked constructor is used instead.
    """
    from triton.tools.tensor_descriptor import TensorDescriptor

    return _unchecked(TensorDescriptor, ("base", "shape", "strides", "block_shape"))
