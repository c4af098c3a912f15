"""The `torch.compile` backend "flashgen": swap attention for tuned kernels, Inductor for the rest.

Also `flashgen.explain(model, *args, **kwargs)` (here rather than in its own module: a submodule
named `explain` would shadow the function `flashgen.explain` once imported).

`torch.compile(model, backend="flashgen")` finds `flashgen_backend` through the
`torch_dynamo_backends` entry point in pyproject.toml, so users need not import flashgen first.
It is deliberately NOT also decorated with `register_backend`: Dynamo would then see the name
twice and fail with "duplicate name".

The backend is a flat list of passes over the Dynamo-level FX graph (today one: attention), then
`torch._inductor.compile_fx.compile_fx`, which runs AOTAutograd itself, so backward and training
work and everything around the attention is still fused by Inductor. The replaced op chooses its
tile config at run time from the concrete shape (flashgen.runtime.dispatch), so a new sequence length
does not recompile the graph.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["backend", "explain", "flashgen_backend", "default_op", "ExplainReport", "PASSES"]

log = logging.getLogger("flashgen")

#: Graph passes run in order on every graph:
#: fn(gm, example_inputs, op, graph_index, *, sdpa) -> sites (sdpa: the backend's option).
PASSES: list[Callable[..., list]] = []


def _attention_pass(
    gm: Any, example_inputs: Sequence[Any], op: Any, graph_index: int, *, sdpa: bool = True
) -> list:
    from .patterns import attention_pass

    keep = frozenset() if sdpa else frozenset({"sdpa", "mha"})
    return attention_pass(gm, list(example_inputs), op, graph_index=graph_index, keep_kinds=keep)


PASSES.append(_attention_pass)


def default_op() -> Any:
    """The callable the rewrite inserts: `torch.ops.flashgen.attention.default`, or None.

    Importing flashgen.ops registers the custom op; its schema is
    `attention(Tensor q, Tensor k, Tensor v, bool causal, float scale) -> Tensor`.
    """
    import torch

    from .. import ops  # noqa: F401  (registers torch.ops.flashgen)

    try:
        return torch.ops.flashgen.attention.default
    except (AttributeError, RuntimeError):
        return None


_graph_counter = 0


def _resolve_fallback(fallback: Any) -> Callable:
    if callable(fallback):
        return fallback
    if fallback == "inductor":
        from torch._inductor.compile_fx import compile_fx

        return compile_fx
    if fallback == "eager":
        return lambda gm, example_inputs: gm.forward
    if isinstance(fallback, str):
        from torch._dynamo import lookup_backend

        return lookup_backend(fallback)
    raise ValueError(
        f"fallback must be 'inductor', 'eager', a backend name or callable, got {fallback!r}"
    )


def backend(
    db: str | None = None,
    fallback: Any = "inductor",
    *,
    op: Any = None,
    sdpa: bool = True,
    impl: str | None = None,
    cudagraphs: bool = False,
) -> Callable:
    """A configured backend: `torch.compile(model, backend=flashgen.backend(db=url))`.

    db: tuning database URL for the run-time config lookup (default: FLASHGEN_DB_URL, else the
    SQLite file in the cache dir); set process-wide (`flashgen.runtime.dispatch.set_db`) at the first
    graph this backend compiles. fallback: what compiles the rewritten graph ("inductor",
    "eager", any registered backend name, or a backend callable). op: the callable inserted in
    place of attention (default `torch.ops.flashgen.attention.default`); it is called as
    op(q, k, v, causal, scale) and must be traceable by AOTAutograd (a custom op).
    sdpa: False leaves `F.scaled_dot_product_attention` and `nn.MultiheadAttention` calls to
    PyTorch's fused kernels and replaces hand-written attention only. With True (the default),
    a plain SDPA or nn.MultiheadAttention call in a graph of static sizes is still left alone
    where the op would run PyTorch's own pick forward and backward
    (`patterns.choice.keep_reason`).
    impl: force one implementation for every attention call of the process ("flashgen" for
    kernel work and benchmarks; a name from `flashgen.core.impls.IMPLS`), set process-wide
    (`flashgen.runtime.dispatch.set_impl`) when this backend is created; None keeps the run-time
    choice by tuning records and defaults (`flashgen.runtime.vendor`).
    cudagraphs: run each compiled graph as a CUDA graph (Inductor's `triton.cudagraphs`, what
    `torch.compile(mode="reduce-overhead")` sets; a backend cannot be given a mode), so the
    replaced attention's host time is paid once at capture, not at every call. Inductor warms
    each graph up eagerly before capturing it, so the op's config lookup and kernel compilation
    happen outside the capture. Needs fallback="inductor". For a model whose host work
    outlasts its kernels (HF ModernBERT's forward at 4 x 2048 tokens on an H100 read 0.73x to
    1.34x Inductor with the host's speed, 1.34-1.35x as CUDA graphs: benchmarks/RESULTS.md,
    session 53); as with `mode="reduce-overhead"`, outputs are overwritten by the graph's next
    replay: clone what is kept across steps.
    """
    if impl is not None:
        from ..runtime import dispatch

        dispatch.set_impl(impl)
    if cudagraphs:
        if fallback != "inductor":
            raise ValueError(
                f"cudagraphs=True needs fallback='inductor' (Inductor captures the graphs), "
                f"got fallback={fallback!r}"
            )
        compile_rest = _inductor_with_cudagraphs
    else:
        compile_rest = _resolve_fallback(fallback)
    db_applied: list[str] = []

    def flashgen_compile(gm: Any, example_inputs: Sequence[Any]) -> Callable:
        global _graph_counter
        if db is not None and not db_applied:
            from ..runtime import dispatch

            dispatch.set_db(db)  # process-wide: the op's run-time lookup reads this database
            db_applied.append(db)
        target = op if op is not None else default_op()
        _graph_counter += 1
        sites: list = []
        for graph_pass in PASSES:
            sites.extend(graph_pass(gm, example_inputs, target, _graph_counter, sdpa=sdpa))
        _log_summary(_graph_counter, sites)
        with _cache_tag():
            return compile_rest(gm, example_inputs)

    return flashgen_compile


def _cache_tag():
    """A context that adds flashgen's version and its ops' revision
    (`flashgen.runtime.library.OPS_REVISION`) to `torch.compiler.config.cache_key_tag` (after
    the user's own tag) while the rest of the graph compiles.

    Inductor's FX graph and AOTAutograd caches key compiled code on the graph and its inputs,
    not on the ops' fake functions, and the code they keep asserts the strides those functions
    gave (`assert_size_stride`). When a release changes them (session 37: the forward's output
    in q's layout), code cached by the previous one would fail that assert; with the tag its
    entries are simply not found. A torch without the setting gets no tag."""
    import contextlib

    from torch.compiler import config as compiler_config

    from ..core.version import VERSION
    from ..runtime.library import OPS_REVISION

    if not hasattr(compiler_config, "cache_key_tag"):
        return contextlib.nullcontext()
    user = compiler_config.cache_key_tag
    ours = f"flashgen-{VERSION}-ops{OPS_REVISION}"
    return compiler_config.patch(cache_key_tag=f"{user}|{ours}" if user else ours)


def _inductor_with_cudagraphs(gm: Any, example_inputs: Sequence[Any]) -> Callable:
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(gm, example_inputs, config_patches={"triton.cudagraphs": True})


def _log_summary(index: int, sites: list) -> None:
    replaced = [s for s in sites if s.replaced]
    skipped = [s for s in sites if not s.replaced]
    kinds: dict[str, int] = {}
    for s in replaced:
        kinds[s.kind] = kinds.get(s.kind, 0) + 1
    detail = ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items()))
    reasons = "; ".join(f"{s.location}: {s.reason}" for s in skipped)
    log.info(
        "graph %d: %d attention site(s) found, %d replaced%s, %d skipped%s",
        index,
        len(sites),
        len(replaced),
        f" ({detail})" if detail else "",
        len(skipped),
        f" ({reasons})" if reasons else "",
    )


def flashgen_backend(gm: Any, example_inputs: Sequence[Any]) -> Callable:
    """The entry-point backend: default database, Inductor for the rest of the graph."""
    return backend()(gm, example_inputs)


# ----------------------------------------------------------------------------- explain


@dataclass
class ExplainReport:
    """found/replaced: counts; skipped: the sites left alone, each with its reason; breaks:
    the graph breaks Dynamo reported while tracing (what it could not trace: the code there
    ran eagerly, under any backend; a model with no graph at all shows only these)."""

    sites: list = field(default_factory=list)
    graphs: int = 0
    breaks: list = field(default_factory=list)

    @property
    def found(self) -> int:
        return len(self.sites)

    @property
    def replaced(self) -> int:
        return sum(1 for s in self.sites if s.replaced)

    @property
    def skipped(self) -> list:
        return [s for s in self.sites if not s.replaced]

    def __str__(self) -> str:
        head = (
            f"flashgen.explain: {self.graphs} graph(s), {self.found} attention site(s) found, "
            f"{self.replaced} replaceable, {len(self.skipped)} skipped"
        )
        if self.breaks:
            head += f", {len(self.breaks)} graph break(s)"
        notes = [f"graph break: {reason}" for reason in self.breaks]
        if not self.sites:
            return "\n".join([head, *notes])
        rows = [("graph", "where", "kind", "status", "causal", "scale", "gqa", "runs (fwd / bwd)",
                 "shape / reason")]  # fmt: skip
        for s in self.sites:
            rows.append(
                (
                    str(s.graph),
                    s.location,
                    s.kind,
                    "replace" if s.replaced else "skip",
                    _causal_column(s),
                    ("" if s.scale is None else f"{s.scale:.4g}")
                    + (" x per head" if getattr(s, "head_scale", False) else ""),
                    str(s.gqa_group) if s.gqa_group > 1 else "",
                    s.impl if s.replaced else "",
                    s.shape if s.replaced else s.reason,
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
        lines = [head]
        for r in rows:
            lines.append(
                "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1]
            )
        return "\n".join([*lines, *notes])

    __repr__ = __str__


def _causal_column(s: Any) -> str:
    """ "True", "False", "window W" (and its alignment), "band -L/+R" (a two-sided band), or
    "bottom-right" (a KV cache's causal alignment)."""
    if s.causal is None:
        return ""
    drop = f" + dropout {s.dropout:g}" if getattr(s, "dropout", 0.0) else ""
    if getattr(s, "softcap", None) is not None:
        drop = f" + softcap {s.softcap:g}{drop}"
    if getattr(s, "alibi", False):
        drop = f" + ALiBi{drop}"
    if getattr(s, "sinks", False):
        drop = f" + sinks{drop}"
    # a mask tensor beside a window or band (HF's padding split off a sliding-window mask)
    per_key = " per key" if getattr(s, "key_mask", False) else ""
    beside = f" + {s.mask} mask{per_key}{drop}" if s.mask else drop
    if isinstance(s.window, tuple):  # a two-sided band: keys i - left <= j <= i + right
        from .patterns.masks import UNBOUNDED

        left, right = (str(n) if n < UNBOUNDED else "all" for n in s.window)
        return f"band -{left}/+{right}{beside}"
    if s.window:
        edge = " bottom-right" if s.align == "bottom_right" else ""
        return f"window {s.window}{edge}{beside}"
    if s.mask:
        return f"{s.causal}{beside}"
    return ("bottom-right" if s.causal and s.align == "bottom_right" else str(s.causal)) + drop


def explain(model: Any, *args: Any, **kwargs: Any) -> ExplainReport:
    """Trace `model(*args, **kwargs)` with Dynamo and report the attention sites it contains.

    "replace" in the report means the backend would swap the site for the flashgen op (the
    run-time kernel check still applies); "skip" rows give the reason in words. For a replaced
    site, "runs" names the implementation the op would call at the traced shape, for a call
    without and with a backward (`flashgen.runtime.vendor`), with its ratio to the runner-up and where
    the choice came from (a tuning record's lookup source, "default" or "forced").
    """
    import torch

    from .patterns import attention_pass

    report = ExplainReport()

    def report_backend(gm: Any, example_inputs: list) -> Any:
        report.graphs += 1
        report.sites.extend(
            attention_pass(
                gm, list(example_inputs), None, rewrite_graph=False, graph_index=report.graphs
            )
        )
        return gm.forward

    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    before = dict(counters["graph_break"])  # (Dynamo's counters outlive its reset)
    try:
        # No torch.no_grad(): some modules (nn.MultiheadAttention) take a different path
        # without grad, and the report must describe the graph the user's own call produces.
        torch.compile(model, backend=report_backend)(*args, **kwargs)
    finally:
        torch._dynamo.reset()
    after = counters["graph_break"]
    report.breaks = [_break_reason(k) for k in after if after[k] > before.get(k, 0)]
    for site in report.sites:
        if site.replaced and site.seq_q and site.seq_k:
            site.impl = _impl_summary(site)
    return report


def _break_reason(text: str) -> str:
    """Dynamo's graph-break message in one line: its first line and its explanation."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    if not lines:
        return "(no reason given)"
    why = next((ln for ln in lines[1:] if ln.startswith("Explanation:")), None)
    return lines[0] if why is None else f"{lines[0]}: {why.removeprefix('Explanation:').strip()}"


def _impl_summary(site: Any) -> str:
    """ "sdpa_cudnn 1.21x (default) / sdpa_cudnn 1.30x (exact)": the choice `flashgen.runtime.vendor`
    makes for this site's traced shape, for the forward alone and for forward+backward (where
    the second names cuDNN and a training call's forward flashgen, a plain training call runs
    both: cuDNN's backward on flashgen's forward, `flashgen.runtime.vendor.hybrid_backward`)."""
    from ..core.impls import FLASHGEN
    from ..runtime.vendor import HYBRID_BACKEND, mix_enabled
    from .patterns.choice import site_choices

    if site.window is not None:
        return "flashgen (sliding window: SDPA has none)"
    if site.alibi:
        return "flashgen (ALiBi: SDPA has none)"
    if site.sinks:
        return "flashgen (sinks: SDPA has none)"
    if site.softcap is not None:
        return "flashgen (softcap: SDPA has none)"
    if site.mask:
        return f"flashgen (attn_mask tensor, {site.mask})"
    if site.dropout:
        return "flashgen (dropout: its mask is the kernels' own)"
    choices = site_choices(site)
    impls = [impl for impl, _ in choices]
    parts = [label for _, label in choices]
    mix = site.device == "cuda" and mix_enabled()
    # what a training call runs (the mix), whose forward takes the margin of a call with a
    # backward (a forward alone may name flashgen where a training call's does not)
    if mix and impls == [FLASHGEN, HYBRID_BACKEND] and site_choices(site, True)[0][0] == FLASHGEN:
        parts[1] += ", on flashgen's forward"
    return " / ".join(parts)
