"""What a replaceable attention site runs at its traced shape (`site_choices`), and the
`F.scaled_dot_product_attention` calls left to PyTorch because of it (`keep_reason`).

Why a site may be left alone: Dynamo guards every size it did not mark dynamic, so a graph
traced with static sizes only ever runs that shape, and the run-time choice of
`flashgen.runtime.vendor` (records, defaults, the host-time rule) is known when it is
compiled. Where that choice is, for the forward and for the backward alike, the very SDPA
backend PyTorch's own call picks at that shape, replacing the call would run the same kernel
through a Python custom op: more host time, and a different graph for Inductor to compile
(the Llama block of benchmarks/RESULTS.md ran the same kernels either way and read 0.98-0.99x
Inductor forward+backward, host-bound). Left as the user wrote it, the call compiles exactly
as without flashgen. Graphs with symbolic sizes are replaced as before and choose per call.
"""

from __future__ import annotations

from typing import Any

import torch

from ...core.impls import FLASHGEN, SDPA_IMPLS, impl_label, sdpa_backend
from ...core.spec import KernelSpec
from .core import example_value, node_arg

# Sequence lengths of the tensors that ask PyTorch which backend it would pick (its checks look
# at dtypes, head dims, head counts, strides and flags, not at how long the sequences are).
PROBE_SEQ = 128


def site_choices(site: Any) -> list[tuple[str, str]]:
    """[(impl, label)] for a call without and with a backward at the site's traced shape: the
    implementation `flashgen.runtime.vendor` would run (the host-time rule applied) and words
    saying why ("sdpa_cudnn 1.10x (shipped)", "sdpa_cudnn (default; flashgen 1.06x (shipped)
    saves < host time)")."""
    from ...runtime import dispatch, vendor

    cuda = site.device == "cuda"
    out = []
    for direction in ("fwd", "bwd"):
        spec = KernelSpec(
            site.head_dim, bool(site.causal), site.dtype, direction, site.window is not None
        )
        choice = dispatch.impl_choice(spec, site.seq_q, site.seq_k, cuda)
        impl, ratio, source = choice
        label = impl if ratio is None else impl_label(impl, ratio)
        instead = None
        if cuda and site.rows:
            work = (site.rows, 1, site.seq_q, site.seq_k, site.head_dim)
            instead = vendor.host_rule(choice, spec, work, bool(site.causal), direction == "bwd")
        if instead is not None:  # the record's margin saves less than the op's host time
            out.append((instead, f"{instead} (default; {label} ({source}) saves < host time)"))
        else:
            out.append((impl, f"{label} ({source})"))
    return out


def keep_reason(site: Any, node: Any) -> str | None:
    """Why the SDPA call `node` (a matched, replaceable site) is left to PyTorch, or None to
    replace it: only a plain call (no mask tensor, window, dropout, ALiBi or softcap, the
    causal diagonal top-left) on tensors of static sizes whose forward and backward would both
    run the SDPA backend that PyTorch's own call picks there (on any device: the CPU has SDPA's
    flash backend too)."""
    if site.kind != "sdpa" or not _plain(site):
        return None
    if node_arg(node, 3, "attn_mask") is not None:
        return None  # a mask proven causal or padding-free: PyTorch's call reads the tensor
    q, k, v = (example_value(node_arg(node, i, n)) for i, n in enumerate(("query", "key", "value")))
    if not all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in (q, k, v)):
        return None
    if not all(type(s) is int for t in (q, k, v) for s in t.shape):
        return None  # symbolic sizes: the graph serves several shapes, each chooses at run time
    choices = site_choices(site)
    impls = {impl for impl, _ in choices}
    if len(impls) != 1 or FLASHGEN in impls:
        return None
    (impl,) = impls
    if impl not in SDPA_IMPLS or pytorch_pick(node, q, k, v) != int(sdpa_backend(impl)):
        return None
    return (
        f"left to PyTorch: at this static shape the op would run {impl}, what PyTorch's own "
        f"call runs (fwd: {choices[0][1]}; bwd: {choices[1][1]})"
    )


def _plain(site: Any) -> bool:
    return not (
        site.mask
        or site.window is not None
        or site.dropout
        or site.alibi
        or site.softcap is not None
        or site.align != "top_left"
    )


def pytorch_pick(node: Any, q: Any, k: Any, v: Any) -> int | None:
    """The `SDPBackend` value PyTorch's dispatch picks for the call `node` (its flags, the
    example tensors' dtype, device, head counts and head dim, whether they require grad), asked
    with small tensors of that kind (batch 1, PROBE_SEQ rows); None when it cannot be asked."""
    is_causal = node_arg(node, 5, "is_causal", False)
    scale = node_arg(node, 6, "scale", None)
    enable_gqa = node_arg(node, 7, "enable_gqa", False)
    if not (isinstance(is_causal, bool) and isinstance(enable_gqa, bool)):
        return None
    if scale is not None and not isinstance(scale, float | int):
        return None

    def probe(t):
        return torch.empty(
            (1, t.shape[1], PROBE_SEQ, t.shape[3]), dtype=t.dtype, device=t.device
        ).requires_grad_(t.requires_grad)

    try:
        return int(
            torch._fused_sdp_choice(
                probe(q), probe(k), probe(v), None, 0.0, is_causal, scale=scale,
                enable_gqa=enable_gqa,
            )
        )  # fmt: skip
    except Exception:  # (an older torch without the argument, a device it cannot ask)
        return None
