"""Which backward kind a call runs: the choice, apart from the launches (`flashgen.kernels.bwd`).

Why a module of its own: the choice reads only the spec, the caller's wishes and the
environment, never a tensor's memory, so it is what the tuner's space and the tests ask about
(`resolve_kind`), while `flashgen.kernels.bwd` builds and runs the launches of whichever kind
comes out.

Three kinds (`KINDS`):

- "split" (templates/attn_bwd.py.jinja): a dK/dV kernel per key block and a dQ kernel per query
  block; deterministic, bit-identical run to run; also the only kind with kernels for mask
  tensors other than key-padding masks, packed sequences, ALiBi with lengths and dropout with
  softcap. On CUDA, for large enough calls, its dQ
  kernel runs on a second stream beside the dK/dV kernel (`flashgen.kernels.streams`,
  FLASHGEN_BWD_OVERLAP; same bits); a short call without extras runs both as one kernel
  (`attn_bwd_short`, `flashgen.kernels.bwd.SHORT_MAX_K`), deterministic as well.
- "onepass" (templates/attn_bwd_onepass.py.jinja): one program per key block and kv head
  computes dK, dV and adds its share of dQ into an fp32 buffer with atomics (5 matrix products
  per tile pair instead of 7); `attn_bwd_dq_convert` scales and casts the buffer to dQ. The
  order of those fp32 adds varies run to run, so dQ is not bit-identical.
- "hopper" (templates/attn_bwd_hopper.py.jinja, `flashgen.kernels.hopper_bwd`): the one-pass
  idea as a warp-specialised Gluon kernel for sm_90 (TMA producer warp, wgmma consumer
  warpgroups, dQ partials by TMA reduce-add), fp16/bf16, head dim 64 or 128; not deterministic
  either; it also has lengths, key-padding masks, windows, softcap, ALiBi and dropout
  (`hopper_bwd.spec_reason`). Taken by a call that leaves the kind open where `hopper_bwd.AUTO`
  (or, for those extras, `AUTO_EXTRAS` / `AUTO_WINDOW` / `AUTO_SCORE_MODS`) lists the shape
  (measured faster than "split"), else asked for (kind="hopper" or FLASHGEN_BWD_KIND=hopper);
  where it cannot run (another GPU, unaligned tensors, no Gluon) `flashgen.kernels.bwd` falls
  back to "split" and logs why once. (The "split" kind's dK/dV kernel may be this template's
  too, without dQ: `hopper_bwd.DKDV_AUTO`, chosen in `flashgen.kernels.bwd`.)

`deterministic=None` follows `torch.are_deterministic_algorithms_enabled()`: deterministic
means "split". Otherwise `kind` (or FLASHGEN_BWD_KIND) picks, defaulting to `DEFAULT_KIND`;
a spec the chosen kind has no kernel for (the one-pass kind has no extras and no head dim above
128; the hopper kind's rules are `hopper_bwd.spec_reason`) runs "split", and so does a call
that wants no dQ (the split kind's dK/dV kernel alone).
"""

from __future__ import annotations

import torch

from . import hopper_bwd
from .tma import env_reader

KIND_ENV = "FLASHGEN_BWD_KIND"
_kind_env = env_reader(KIND_ENV)
KINDS = ("split", "onepass", "hopper")
# "split": on the H200 (triton 3.6, bf16) the one-pass kind measured slower in every case tried
# (benchmarks/RESULTS.md, one-pass backward), e.g. hd128 4k causal 2.44 ms vs 1.76 ms.
DEFAULT_KIND = "split"
ONEPASS_MAX_HEAD_DIM = 128  # wider tiles spill and were never measured


def onepass_supported(spec) -> bool:
    """Whether the one-pass kind has a kernel for `spec` (a bwd KernelSpec): no window, no
    softcap, no lengths, no mask tensor, no dropout, no ALiBi, head dim <=
    ONEPASS_MAX_HEAD_DIM."""
    return (
        not (
            spec.window
            or spec.softcap
            or spec.lengths
            or spec.attn_mask
            or spec.dropout
            or spec.alibi
        )  # fmt: skip
        and spec.head_dim <= ONEPASS_MAX_HEAD_DIM
    )


def resolve_kind(deterministic: bool | None, kind: str | None, spec) -> str:
    """The backward kind a call of `spec` runs (see the module docstring): "split" when
    determinism is asked for or the chosen kind has no kernel for `spec`, else `kind`,
    FLASHGEN_BWD_KIND or DEFAULT_KIND. Raises ValueError for an unknown kind, and for
    kind="onepass" or "hopper" given as an argument with deterministic=True or for a spec it
    cannot run (FLASHGEN_BWD_KIND=onepass/hopper is a preference: those calls run "split").
    "hopper" is resolved from the spec alone; `flashgen.kernels.bwd.backward` still falls back
    to "split" where the GPU or the tensors cannot run it."""
    if kind is None:
        raw = _kind_env()
        kind = raw.decode() if isinstance(raw, bytes) else raw
        from_env = bool(kind)
    else:
        from_env = False
    if kind and kind not in KINDS:
        where = KIND_ENV if from_env else "kind"
        raise ValueError(f"{where} must be one of {', '.join(KINDS)}, got {kind!r}")
    if deterministic is None:
        deterministic = torch.are_deterministic_algorithms_enabled()
    if deterministic:
        if kind in ("onepass", "hopper") and not from_env:
            raise ValueError(
                f"kind={kind!r} is not deterministic (fp32 atomics); use kind='split' or "
                "deterministic=False"
            )
        return "split"
    if kind == "hopper":
        reason = hopper_bwd.spec_reason(spec)
        if reason is not None:
            if not from_env:
                raise ValueError(f"kind='hopper' has no kernel for {spec.uri()}: {reason}")
            return "split"
        return kind
    if not onepass_supported(spec):
        if kind == "onepass" and not from_env:
            raise ValueError(
                f"kind='onepass' has no kernel for {spec.uri()} (window, softcap, lengths, mask, "
                f"dropout, ALiBi or head dim "
                f"> {ONEPASS_MAX_HEAD_DIM}); use kind='split' or None"
            )
        return "split"
    return kind or DEFAULT_KIND


def auto_hopper(deterministic, chosen, spec, seq_k: int, group: int = 1) -> bool:
    """Whether a call that left the kind to flashgen (no kind argument, no FLASHGEN_BWD_KIND,
    determinism not asked for) runs the hopper kind: where it measured faster
    (`flashgen.kernels.hopper_bwd.auto_choice`: `AUTO`, `AUTO_GROUPED` for GQA calls (`group`
    query heads a kv head), or the table of the call's extras)."""
    if chosen is not None or _kind_env():
        return False
    if deterministic or (deterministic is None and torch.are_deterministic_algorithms_enabled()):
        return False
    return hopper_bwd.auto_choice(spec, seq_k, group)


def for_call(deterministic, kind, spec, seq_k: int, *, split_only: bool, group: int = 1) -> str:
    """The kind one `backward` call runs: `resolve_kind`, then the hopper kind where
    `auto_hopper` lists the shape; "split" whatever was asked when `split_only` (no dQ wanted:
    the split kind's dK/dV kernel alone, no atomics). Which extras each kind has is
    `resolve_kind`'s answer from `spec`."""
    resolved = resolve_kind(deterministic, kind, spec)
    if split_only:
        return "split"
    if resolved == DEFAULT_KIND and auto_hopper(deterministic, kind, spec, seq_k, group):
        return "hopper"
    return resolved
