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


def use_tma(env_var: str, tensors, *, eligible: bool = True) -> bool:
    """Whether a launcher takes its descriptor kernels for `tensors` (every tensor it would make
    a descriptor of). `env_var` set to "0" / "1" forces the choice (also in the interpreter,
    which is how the tests cover that path); otherwise CUDA on a TMA device, the launcher's own
    `eligible` rule, and every tensor `tma_compatible`."""
    forced = os.environ.get(env_var)
    if forced:
        return forced != "0"
    if not (eligible and _on_tma_device(tensors[0])):
        return False
    return all(tma_compatible(t) for t in tensors)


def _on_tma_device(t) -> bool:
    return t.is_cuda and device_has_tma(t.device.index or 0)


def descriptors(pairs, block_d: int) -> list:
    """Host descriptors of [B, H, S, D] tensors, one per (tensor, rows per block) pair."""
    make = descriptor_factory()
    return [make(t, list(t.shape), list(t.stride()), [1, 1, rows, block_d]) for t, rows in pairs]


@functools.cache
def descriptor_factory():
    """A constructor for host TMA descriptors without TensorDescriptor's own checks.

    Those checks (alignment, strides, block shape) repeat what `use_tma` checks of every tensor
    and `check_inputs` of the shapes, and cost a few microseconds per descriptor, four per call, on the path every
    attention call takes. Fields the dataclass may grow in later Triton versions get their
    defaults; if one has no plain default, the checked constructor is used instead.
    """
    import dataclasses

    from triton.tools.tensor_descriptor import TensorDescriptor

    given = ("base", "shape", "strides", "block_shape")
    defaults = {
        f.name: f.default for f in dataclasses.fields(TensorDescriptor) if f.name not in given
    }
    if any(value is dataclasses.MISSING for value in defaults.values()):
        return TensorDescriptor

    def make(base, shape, strides, block_shape):
        desc = TensorDescriptor.__new__(TensorDescriptor)
        desc.__dict__.update(
            defaults, base=base, shape=shape, strides=strides, block_shape=block_shape
        )
        return desc

    return make
