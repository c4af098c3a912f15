"""When the TMA-descriptor kernels may run: shared by the forward and backward launchers.

Host tensor descriptors (Hopper's tensor memory accelerator) need compute capability 9 or newer,
a Triton that ships `TensorDescriptor`, a 16-byte aligned base and non-zero outer strides that
are multiples of 16 bytes. Anything else takes the pointer-load kernels.
"""

from __future__ import annotations

import functools


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


@functools.cache
def descriptor_factory():
    """A constructor for host TMA descriptors without TensorDescriptor's own checks.

    Those checks (alignment, strides, block shape) repeat `tma_compatible` and
    `check_inputs` and cost a few microseconds per descriptor, four per call, on the path every
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
