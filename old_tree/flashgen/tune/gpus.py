"""`flashgen tune --gpus`: which GPUs of this host get a tuning worker, and how each is pinned.

One worker process per chosen GPU, each started with CUDA_VISIBLE_DEVICES naming that one GPU,
so its CUDA context, its timings and its fingerprint (the GPU model in every record and study
name) are its own GPU's and nothing else's. Indices count the GPUs this process sees: under an
outer CUDA_VISIBLE_DEVICES="2,3", `--gpus 1` pins the worker to physical GPU 3 (the outer list's
entry, which may also be a UUID).

Nothing here initialises CUDA in the parent: `torch.cuda.device_count()` asks NVML where it can,
and the workers are spawned fresh, so each creates its own context on its own GPU.
"""

from __future__ import annotations

import os


def visible_gpu_count() -> int:
    """CUDA GPUs this process may use (0 without CUDA). Tests replace it to fake several."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return 0
    if not torch.cuda.is_available():
        return 0
    return int(torch.cuda.device_count())


def parse_gpus(text: str) -> list[int] | str:
    """The --gpus value, checked for form only: "all", or distinct indices >= 0 (ValueError
    naming the flag otherwise). The count is checked by `choose_gpus`, which needs torch."""
    text = str(text).strip()
    if text == "all":
        return "all"
    items = [part.strip() for part in text.split(",")]
    if not items or not all(items):
        raise ValueError(f"--gpus takes 'all' or comma-separated GPU indices (0,1), got {text!r}")
    indices = []
    for item in items:
        if not item.isdigit():
            raise ValueError(f"--gpus takes 'all' or GPU indices such as 0,1; got {item!r}")
        indices.append(int(item))
    repeated = sorted({i for i in indices if indices.count(i) > 1})
    if repeated:
        raise ValueError(
            f"--gpus names GPU {repeated[0]} twice (one worker per GPU: each index once)"
        )
    return indices


def choose_gpus(text: str, count: int | None = None) -> list[int]:
    """The GPU indices `--gpus text` names among the `count` visible ones (default: asked)."""
    wanted = parse_gpus(text)
    count = visible_gpu_count() if count is None else count
    if count < 1:
        raise ValueError(
            "--gpus: no CUDA GPU is visible here (torch.cuda sees none); without a GPU, "
            "--workers N runs N modelled workers on the CPU"
        )
    if wanted == "all":
        return list(range(count))
    beyond = [i for i in wanted if i >= count]
    if beyond:
        raise ValueError(
            f"--gpus: GPU {beyond[0]} does not exist here: {count} visible "
            f"(indices 0 to {count - 1}; CUDA_VISIBLE_DEVICES narrows what is visible)"
        )
    return list(wanted)


def pin_value(index: int, outer: str | None = None) -> str:
    """The CUDA_VISIBLE_DEVICES value that shows a worker only GPU `index` of this process's
    visible GPUs: the outer list's entry when one is set (ids or UUIDs), else the index."""
    outer = os.environ.get("CUDA_VISIBLE_DEVICES") if outer is None else outer
    if outer is not None and outer.strip():
        entries = [e.strip() for e in outer.split(",") if e.strip()]
        if index < len(entries):
            return entries[index]
    return str(index)


def worker_label(pin: str | None = None) -> str:
    """ "gpu<N>" for a worker pinned to one GPU (CUDA_VISIBLE_DEVICES holds exactly one entry),
    "" otherwise; part of each trial's worker id, so the trials say which GPU timed them."""
    pin = os.environ.get("CUDA_VISIBLE_DEVICES") if pin is None else pin
    if pin is None:
        return ""
    entries = [e.strip() for e in pin.split(",") if e.strip()]
    return f"gpu{entries[0]}" if len(entries) == 1 else ""
