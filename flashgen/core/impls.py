"""Which implementation runs an attention call: flashgen's kernel or one of PyTorch's SDPA backends.

The names are a short, fixed enum: they are stored in the tuning database (a CHECK constraint
holds the same list), written to portable files and accepted from users (`impl=`,
FLASHGEN_IMPL), so each one is validated against `IMPLS` wherever it enters.

    flashgen        the generated Triton kernels (forward and backward)
    sdpa_cudnn      F.scaled_dot_product_attention restricted to SDPBackend.CUDNN_ATTENTION
    sdpa_flash      ... SDPBackend.FLASH_ATTENTION
    sdpa_efficient  ... SDPBackend.EFFICIENT_ATTENTION

`default_impl` is the answer when no tuned record compared them: measured tables for known
GPUs, flashgen elsewhere (the CPU interpreter, GPUs never measured). This module imports no
torch at import time.
"""

from __future__ import annotations

import os

FLASHGEN = "flashgen"
SDPA_IMPLS = ("sdpa_cudnn", "sdpa_flash", "sdpa_efficient")
IMPLS = (FLASHGEN, *SDPA_IMPLS)
ENV_VAR = "FLASHGEN_IMPL"
# Values that mean "choose by records and defaults" (the same as not setting anything).
AUTO = ("", "auto")

_BACKEND_NAMES = {
    "sdpa_cudnn": "CUDNN_ATTENTION",
    "sdpa_flash": "FLASH_ATTENTION",
    "sdpa_efficient": "EFFICIENT_ATTENTION",
}

# (GPU name, dtype) -> the implementation to run with no record to say otherwise. NVIDIA H200,
# torch 2.11 + triton 3.6: cuDNN was faster than flashgen's portable kernels on every 16-bit shape
# of the benchmark grid (forward 0.81-0.93x, forward+backward 0.75-0.83x; benchmarks/RESULTS.md,
# run 3). The Hopper family that beats it at head dims 64 and 128 (session 32: forward 1.039x,
# forward+backward 1.012x by geometric mean, not on every shape) wins only through records
# (tuning_db/), which name the winner per bucket; a call with none (another head dim, a GPU of
# the same name never tuned) keeps cuDNN, what PyTorch itself runs. cuDNN and flash do not take
# float32, and float32 was never compared: flashgen.
_DEFAULTS = {
    ("NVIDIA H200", "bfloat16"): "sdpa_cudnn",
    ("NVIDIA H200", "float16"): "sdpa_cudnn",
}


def check_impl(value, name: str = "impl") -> str:
    """`value` if it is one of IMPLS, else ValueError naming `name` and the choices."""
    if value not in IMPLS:
        raise ValueError(f"{name} must be one of {', '.join(IMPLS)}, got {value!r}")
    return value


def forced_impl() -> str | None:
    """The implementation FLASHGEN_IMPL forces for every call, or None ("auto" / unset)."""
    value = os.environ.get(ENV_VAR, "").strip()
    if value in AUTO:
        return None
    return check_impl(value, ENV_VAR)


def sdpa_backend(impl: str):
    """The `torch.nn.attention.SDPBackend` member of an sdpa_* implementation."""
    from torch.nn.attention import SDPBackend

    return getattr(SDPBackend, _BACKEND_NAMES[impl])


def default_impl(gpu_name: str | None, dtype: str) -> str:
    """The implementation to run without a record: `gpu_name` None means no CUDA device
    (CPU tensors, the interpreter), which always runs flashgen's kernels."""
    if gpu_name is None:
        return FLASHGEN
    return _DEFAULTS.get((gpu_name, dtype), FLASHGEN)


def impl_label(impl: str, ratio: float | None) -> str:
    """ "sdpa_cudnn 1.18x": the winner and its margin over the runner-up (the tune summary,
    `flashgen db show`, `flashgen.explain`); "flashgen (not compared)" without a comparison."""
    if ratio is None:
        return f"{impl} (not compared)"
    return f"{impl} {ratio:.2f}x"
