"""Random attention modules, written the ways model code writes them, compiled with the flashgen
backend and compared with float64 eager at several lengths (a correctness sweep, not a timing).

Why: the pattern pass proves things about masks (causal, a window, key padding, a bottom-right
diagonal) from the ops that build them, and each proof must hold for every length the compiled
graph accepts. The unit tests pin one spelling per property; this draws many combinations at
once (how the scores are scaled, how the mask is built and applied, which fill value, padding on
either side, a KV-cache offset, GQA, ALiBi, softcapping, the softmax's dtype, SDPA or by hand,
values of another head dim than the keys', a learned factor per head, static, automatic-dynamic or
dynamic compiles, attention dropout in eval or, by hand, in training mode) and checks the numbers, so a proof that is wrong
for some combination shows up as a mismatch rather than waiting for a model to hit it. A case
with dropout in training mode is compared given the mask the compiled call drew (`drawn_keep`:
the same call with values that are columns of the identity, after the same
`torch.manual_seed`), which the float64 reference then applies (`_dropout_by`).

Each case is a module generated as Python source (printed with a failure, so it reproduces
alone). It is compiled once with `flashgen.backend(fallback="aot_eager")` and called at several
(query length, key length) pairs; the output and the gradients of q, k and v are compared with
the same module in float64 eager on every query row that sees at least one key (a row that sees
none is unspecified: eager gives NaN or a mean of V, the kernels zeros). Gradients are compared
only where eager's are finite. Which sites were replaced, and why the others were not, is
tallied: a skip is not a failure; a wrong number is.

Usage: python benchmarks/pattern_fuzz.py [--cases N] [--seed S] [--json FILE]
(CPU: kernels in Triton's interpreter, set up here; a few seconds a case.)
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import json
import math
import os
import random
import sys
import textwrap
import time
import traceback
from dataclasses import asdict, dataclass

B, H, D = 2, 4, 16
W = 5  # window size (lengths below cross it)
CAP = 4.0  # softcap
DROP = 0.25  # the dropout probability of `train` cases
SCALE = D**-0.5
QLENS = (3, 7, 5, 12)  # query lengths of the calls, in order (the first compile sees 3)


@dataclass(frozen=True)
class Case:
    """One generated module and how it is compiled (every field drawn by `draw`)."""

    seed: int
    style: str  # "manual": scores, mask, softmax and @ v by hand; "sdpa": SDPA
    gqa: str  # "none" | "repeat_interleave" | "expand" (HF repeat_kv) | "sdpa" (enable_gqa)
    past: str  # "none": keys = queries; "fixed": 4 cached keys before them; "vary": 0-5
    struct: str  # "none" | "causal" | "window" | "two_sided" | "is_causal" (SDPA's flag)
    build: str  # "tril" | "arange" (comparisons) | "buffer" (sliced) | "offset" (of j - i)
    pad: str  # "none" | "right" | "left" (a [B, Tk] keep mask read from an input)
    # "masked_fill" | "where" | "additive" (zeros.masked_fill) | "hf_where" (HF's masking_utils:
    # where(keep, 0, fill)) | "hf_additive" ((1 - keep) * fill) | "bool" (SDPA only)
    apply: str
    fill: str  # "-inf" | "finfo_min" | "-1e9"
    score: str  # "div_sqrt" | "mul" | "prescale" | "einsum"
    softcap: bool
    alibi: str  # "none" | "relative" | "key" (slopes times key position: BLOOM's form)
    softmax: str  # "method" | "float32" | "torch"
    dynamic: str  # "auto" | "true" | "false"
    layout: str = "contiguous"  # or "bthd": q, k, v laid out [B, T, H, D] in memory
    inplace: bool = False  # masked_fill_ (by hand only)
    # "functional": F.dropout(training=False); "module": nn.Dropout, eval (both in training
    # mode with `train`)
    dropout: str = "none"
    # padding alone written as HF's bidirectional masks are: `(q_idx >= 0) & kp`, a row term
    # every row passes, broadcast to [B, 1, Tq, Tk]
    row_term: bool = False
    vdim: int = D  # the values' head dim: another than D is latent attention (DeepSeek's)
    # the dropout in training mode (p DROP; by hand only): compared given the mask it drew
    train: bool = False
    # the scores times a learned factor of one value per head, `[H, 1, 1]` (Swin v2's logit
    # scale; by hand only), before the softcap and every mask
    head_scale: bool = False


def draw(seed: int) -> Case:
    r = random.Random(seed)
    style = r.choice(["manual", "manual", "sdpa"])
    struct = r.choice(["none", "causal", "causal", "window", "two_sided"])
    pad = r.choice(["none", "none", "right", "left"])
    alibi = r.choice(["none", "none", "none", "relative", "key"])
    if style == "sdpa" and struct == "causal" and r.random() < 0.3:
        struct, pad, alibi = "is_causal", "none", "none"  # SDPA takes no mask with is_causal
    applies = ["masked_fill", "where", "additive", "hf_additive"]
    if style == "sdpa":
        applies += ["bool", "bool"]
    apply = r.choice(applies)
    sdpa_gqa = ["sdpa"] if style == "sdpa" else []
    fill = r.choice(["-inf", "finfo_min", "-1e9"])
    if apply == "hf_additive" and fill == "-inf":
        fill = "finfo_min"  # (1 - keep) * -inf is NaN where kept: nobody writes it
    if apply == "additive" and random.Random(seed * 7919 + 1).random() < 0.5:
        apply = "hf_where"  # (its own draw: every other field of a seed is as before)
    # (its own draw: every other field of a seed is as before)
    row_term = struct == "none" and pad != "none" and random.Random(seed * 7919 + 2).random() < 0.5
    vdim = random.Random(seed * 7919 + 3).choice([D, D, D, 8, 24])  # (its own draw too)
    case = Case(
        seed=seed,
        row_term=row_term,
        vdim=vdim,
        style=style,
        gqa=r.choice(["none", "none", "repeat_interleave", "expand"] + sdpa_gqa),
        past=r.choice(["none", "none", "fixed", "vary"]),
        struct=struct,
        build=r.choice(["tril", "arange", "buffer", "offset"]),
        pad=pad,
        apply=apply,
        fill=fill,
        score=r.choice(["div_sqrt", "mul", "prescale", "einsum"]),
        softcap=style == "manual" and r.random() < 0.2,
        alibi=alibi,
        softmax=r.choice(["method", "float32", "torch"]),
        dynamic=r.choice(["auto", "true", "false"]),
        layout=r.choice(["contiguous", "contiguous", "bthd"]),
        inplace=r.random() < 0.2,
        dropout=r.choice(["none", "none", "functional", "module"]),
    )
    # the dropout in training mode (its own draw too)
    train = random.Random(seed * 7919 + 4).random() < 0.4
    if style == "manual" and case.dropout != "none" and train:
        case = dataclasses.replace(case, train=True)
    if style == "manual" and random.Random(seed * 7919 + 5).random() < 0.25:  # (its own draw)
        case = dataclasses.replace(case, head_scale=True)
    return case


def _fill(case: Case) -> str:
    return {
        "-inf": 'float("-inf")',
        "finfo_min": "torch.finfo(s.dtype).min",
        "-1e9": "-1e9",
    }[case.fill]


def _struct_lines(case: Case) -> list[str]:
    """Lines that set `keep` ([tq, tk] bool, or None) for the causal/window structure, the
    queries being the last tq of tk positions."""
    s = case.struct
    if s in ("none", "is_causal"):
        return ["keep = None"]
    lo = {"causal": None, "window": f"-({W} - 1)", "two_sided": f"-({W} - 1)"}[s]
    hi = {"causal": "0", "window": "0", "two_sided": f"{W} - 1"}[s]
    if case.build == "tril":
        line = f"keep = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril(tk - tq + {hi})"
        if lo is not None:
            line += f".triu(tk - tq + {lo})"
        return [line]
    if case.build == "arange":
        lines = [
            "i = torch.arange(tk - tq, tk, device=q.device)[:, None]",
            "j = torch.arange(tk, device=q.device)[None, :]",
            f"keep = j <= i + {hi}",
        ]
        if lo is not None:
            lines.append(f"keep = keep & (j >= i + {lo})")
        return lines
    if case.build == "offset":  # comparisons of the key - query offset itself
        keep = {
            "causal": "(j - i) <= 0",
            "window": f"((j - i) <= 0) & ((i - j) < {W})",
            "two_sided": f"(j - i).abs() < {W}",
        }[s]
        return [
            "i = torch.arange(tk - tq, tk, device=q.device)[:, None]",
            "j = torch.arange(tk, device=q.device)[None, :]",
            f"keep = {keep}",
        ]
    return ["keep = self.band[tk - tq:tk, :tk]"]  # buffer


def _buffer_init(case: Case) -> list[str]:
    if case.build != "buffer" or case.struct in ("none", "is_causal"):
        return []
    hi = f"{W} - 1" if case.struct == "two_sided" else "0"
    line = f"band = torch.ones(64, 64, dtype=torch.bool).tril({hi})"
    if case.struct in ("window", "two_sided"):
        line += f".triu(-({W} - 1))"
    return [line, 'self.register_buffer("band", band)']


def source(case: Case) -> str:
    """The module's Python source (imports: torch, F, math, nn)."""
    init = [
        "super().__init__()",
        f'self.register_buffer("slopes", 2.0 ** (-torch.arange(1, {H} + 1) / 2.0))',
        *_buffer_init(case),
    ]
    if case.head_scale:
        init.append(
            f"self.head_scale = nn.Parameter(torch.linspace(0.5, 2.0, {H}).view({H}, 1, 1))"
        )
    if case.dropout == "module" and case.train:
        init.append(f"self.drop = nn.Dropout({DROP!r})  # (the module is in training mode)")
    elif case.dropout == "module":
        init.append("self.drop = nn.Dropout(0.1)  # (the module is in eval mode)")
    body = ["tq, tk = q.size(-2), k.size(-2)"]
    if case.layout == "bthd":
        body += ["q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))"]
    if case.gqa == "repeat_interleave":
        body += ["k = k.repeat_interleave(2, dim=1)", "v = v.repeat_interleave(2, dim=1)"]
    elif case.gqa == "expand":
        body += [
            "b, hk = k.shape[:2]",
            "k = k[:, :, None].expand(b, hk, 2, tk, k.size(-1)).reshape(b, hk * 2, tk, k.size(-1))",
            "v = v[:, :, None].expand(b, hk, 2, tk, v.size(-1)).reshape(b, hk * 2, tk, v.size(-1))",
        ]
    body += _struct_lines(case)
    if case.pad != "none":
        body += [
            "kp = pad[:, None, None, :]",
            "keep = kp if keep is None else keep & kp",
        ]
        if case.row_term:
            body += [
                "keep = ((torch.arange(tq, device=q.device) + (tk - tq))[:, None] >= 0) & keep"
            ]
    if case.alibi != "none":
        if case.alibi == "relative":
            body += [
                "pos_i = torch.arange(tk - tq, tk, device=q.device)[:, None]",
                "pos_j = torch.arange(tk, device=q.device)[None, :]",
                "alibi = self.slopes[:, None, None] * (pos_j - pos_i)",
            ]
        else:
            body += ["alibi = self.slopes[:, None, None] * torch.arange(tk, device=q.device)"]
    if case.style == "manual":
        body += {
            "div_sqrt": ["s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))"],
            "mul": [f"s = torch.matmul(q, k.transpose(2, 3)) * {SCALE!r}"],
            "prescale": [f"s = (q * {SCALE!r}) @ k.transpose(-1, -2)"],
            "einsum": [f's = torch.einsum("bhqd,bhkd->bhqk", q, k) * {SCALE!r}'],
        }[case.score]
        if case.head_scale:
            body += ["s = s * self.head_scale"]
        if case.softcap:
            body += [f"s = {CAP!r} * torch.tanh(s / {CAP!r})"]
        if case.alibi != "none":
            body += ["s = s + alibi"]
        body += ["if keep is not None:"]
        body += ["    " + x for x in _apply_lines(case)]
        body += {
            "method": ["p = s.softmax(-1)"],
            "float32": ["p = F.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)"],
            "torch": ["p = torch.softmax(s, dim=-1)"],
        }[case.softmax]
        body += {
            "none": [],
            "functional": [
                f"p = F.dropout(p, {DROP!r}, training=True)"
                if case.train
                else "p = F.dropout(p, 0.1, training=False)"
            ],
            "module": ["p = self.drop(p)"],
        }[case.dropout]
        body += ["return p @ v"]
    else:
        body += ["s = q.new_zeros(())  # (the fill's dtype)"]
        mask = "None"
        if case.alibi != "none":
            body += ["bias = alibi.to(q.dtype)"]
            mask = "bias"
        body += ["if keep is not None:"]
        if case.apply == "bool" and case.alibi == "none":
            body += ["    bias = keep"]
        else:
            body += ["    " + x for x in _additive_lines(case, "bias" if mask == "bias" else None)]
        body += ["else:", f"    bias = {mask}"]
        flags = ["attn_mask=bias"]
        if case.dropout != "none":  # HF's spelling, and an explicit zero
            flags.append("dropout_p=0.1 if self.training else 0.0" if case.dropout == "module"
                         else "dropout_p=0.0")  # fmt: skip
        if case.struct == "is_causal":
            flags.append("is_causal=True")
        if case.score == "mul":
            flags.append(f"scale={SCALE!r}")
        if case.gqa == "sdpa":
            flags.append("enable_gqa=True")
        body += [f"return F.scaled_dot_product_attention(q, k, v, {', '.join(flags)})"]
    lines = ["class Model(nn.Module):", "    def __init__(self):"]
    lines += ["        " + x for x in init]
    lines += ["", "    def forward(self, q, k, v, pad):"]
    lines += ["        " + x for x in body]
    return "\n".join(lines) + "\n"


def _apply_lines(case: Case) -> list[str]:
    fill = _fill(case)
    if case.apply in ("masked_fill", "bool"):
        if case.inplace:
            return [f"s.masked_fill_(~keep, {fill})"]
        return [f"s = s.masked_fill(~keep, {fill})"]
    if case.apply == "where":
        return [f"s = torch.where(keep, s, {fill})"]
    return [x.replace("bias", "add") for x in _additive_lines(case, None)] + ["s = s + add"]


def _additive_lines(case: Case, base: str | None) -> list[str]:
    """Lines setting `bias` to an additive mask built from `keep` (plus `base` when given)."""
    fill = _fill(case)
    if case.apply == "hf_additive":
        line = f"bias = (1.0 - keep.to(s.dtype)) * {fill}"
    elif case.apply == "hf_where":
        zero = "torch.zeros((), dtype=s.dtype, device=q.device)"  # (a float 0.0: float32)
        line = f"bias = torch.where(keep, {zero}, {fill})"
    else:
        zeros = "torch.zeros(keep.shape, dtype=s.dtype, device=q.device)"
        line = f"bias = {zeros}.masked_fill(~keep, {fill})"
    lines = [line]
    if base is not None:
        lines = [line.replace("bias =", "add ="), f"bias = {base} + add"]
    return lines


def build(case: Case):
    import torch
    import torch.nn.functional as F
    from torch import nn

    scope = {"torch": torch, "F": F, "math": math, "nn": nn}
    exec(compile(source(case), f"<case {case.seed}>", "exec"), scope)
    model = scope["Model"]()
    return model.eval() if case.dropout == "module" and not case.train else model


def lengths(case: Case) -> list[tuple[int, int]]:
    r = random.Random(case.seed + 1)
    past = {"none": lambda: 0, "fixed": lambda: 4, "vary": lambda: r.randint(0, 5)}[case.past]
    return [(tq, tq + past()) for tq in QLENS]


def inputs(case: Case, tq: int, tk: int, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    hk = H // 2 if case.gqa != "none" else H
    q = torch.randn(B, H, tq, D, generator=g)
    k = torch.randn(B, hk, tk, D, generator=g)
    v = torch.randn(B, hk, tk, case.vdim, generator=g)
    pad = None
    if case.pad != "none":
        valid = [tk, max(1, tk - 3)]  # batch 1 loses 3 keys (never all)
        pad = torch.zeros(B, tk, dtype=torch.bool)
        for b, n in enumerate(valid):
            if case.pad == "right":
                pad[b, :n] = True
            else:
                pad[b, tk - n :] = True
    return q, k, v, pad


def visible(case: Case, tq: int, tk: int, pad) -> object:
    """[B, 1, tq, 1] bool: the query rows that see at least one key (independent of the
    module's source: from the case's definition)."""
    import torch

    i = torch.arange(tk - tq, tk)[:, None]
    j = torch.arange(tk)[None, :]
    keep = torch.ones(tq, tk, dtype=torch.bool)
    if case.struct in ("causal", "window", "is_causal"):
        keep &= j <= i
    if case.struct == "window":
        keep &= j >= i - (W - 1)
    if case.struct == "two_sided":
        keep &= (j - i).abs() <= W - 1
    if case.struct == "is_causal":  # SDPA's is_causal is top-left
        keep = torch.ones(tq, tk, dtype=torch.bool).tril()
    keep = keep[None].expand(B, tq, tk)
    if pad is not None:
        keep = keep & pad[:, None, :]
    return keep.any(-1)[:, None, :, None]


def run_case(case: Case, backend_factory) -> dict:
    """Compile and compare; the result record (raises nothing: errors are recorded)."""
    import torch

    from flashgen.compile import patterns
    from flashgen.compile.patterns import attention_pass

    model = build(case)
    ref = build(case).double()
    record = {"case": asdict(case), "calls": [], "replaced": 0, "skips": [], "error": None}
    inner = backend_factory()

    def compile_graph(gm, example_inputs):
        for site in attention_pass(gm, list(example_inputs), None, rewrite_graph=False):
            if not site.replaced:
                record["skips"].append(site.reason)
        before = patterns.counters.copy()
        out = inner(gm, example_inputs)
        record["replaced"] += sum(
            v - before.get(k, 0) for k, v in patterns.counters.items() if k.endswith(".replaced")
        )
        return out

    dynamic = {"auto": None, "true": True, "false": False}[case.dynamic]
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=compile_graph, dynamic=dynamic)
    try:
        for n, (tq, tk) in enumerate(lengths(case)):
            call_seed = case.seed * 100 + n
            q, k, v, pad = inputs(case, tq, tk, call_seed)
            seen = visible(case, tq, tk, pad)
            w = torch.randn(B, H, tq, case.vdim, generator=torch.Generator().manual_seed(n))
            if case.train:
                keep = drawn_keep(compiled, case, (q, k, v), pad, call_seed)
                with _dropout_by(keep):
                    want, want_g = _forward_backward(ref, (q, k, v), pad, seen, w, torch.float64)
            else:
                want, want_g = _forward_backward(ref, (q, k, v), pad, seen, w, torch.float64)
            if case.train:
                torch.manual_seed(call_seed)  # the draw whose mask `drawn_keep` read
            got, got_g = _forward_backward(compiled, (q, k, v), pad, seen, w, torch.float32)
            call = {"tq": tq, "tk": tk, "out": _diff(got, want, seen), "grads": None}
            if all(torch.isfinite(g).all() for g in want_g):
                call["grads"] = max(_diff(a, b, None) for a, b in zip(got_g, want_g, strict=True))
            record["calls"].append(call)
    except Exception:  # noqa: BLE001 - a sweep records every error, with its trace
        record["error"] = traceback.format_exc(limit=6)
    finally:
        torch._dynamo.reset()
    return record


def drawn_keep(compiled, case: Case, qkv, pad, call_seed: int):
    """The dropout mask [B, H, tq, tk] (bool) that `compiled` draws after
    `torch.manual_seed(call_seed)` on these inputs (the same graph and draw as the compared
    call: values of the same shape, gradients wanted): read through values that are columns
    of the identity, `vdim` keys at a time, where out[i, j] = P[i, j] * keep[i, j] / (1 - p)
    is > 0 exactly where the key is kept and its probability is not 0 (a probability too small
    to show is read as dropped: it weighs nothing in the reference either)."""
    import torch

    q, k, v = qkv
    tk = k.shape[2]
    cols = []
    for start in range(0, tk, case.vdim):
        eye = torch.zeros(tk, case.vdim)
        width = min(case.vdim, tk - start)
        eye[start : start + width, :width] = torch.eye(width)
        probe = eye.expand_as(v).contiguous()
        args = [t.float().requires_grad_() for t in (q, k, probe)]
        torch.manual_seed(call_seed)
        out = compiled(*args, pad)
        cols.append(out.detach()[..., :width] > 0)
    return torch.cat(cols, dim=-1)


@contextlib.contextmanager
def _dropout_by(keep):
    """Within: `F.dropout` (nn.Dropout's too) in training mode applies `keep` and scales by
    1 / (1 - p), so the float64 reference drops what the compiled call dropped."""
    import torch.nn.functional as F

    real = F.dropout

    def dropout(input, p=0.5, training=True, inplace=False):
        return input * keep.to(input.dtype) / (1 - p) if training else input

    F.dropout = dropout
    try:
        yield
    finally:
        F.dropout = real


def _forward_backward(fn, qkv, pad, seen, w, dtype):
    import torch

    q, k, v = (t.to(dtype).requires_grad_() for t in qkv)
    out = fn(q, k, v, pad)
    out = torch.where(seen, out, 0.0)
    grads = torch.autograd.grad((out * w.to(dtype)).sum(), (q, k, v))
    return out.detach(), [g.detach() for g in grads]


def _diff(got, want, seen) -> float:
    """Largest error beyond tolerance's scale: |got - want| / (atol + rtol |want|), over the
    rows `seen` (None: everything); NaN anywhere counts as infinite."""
    import torch

    got, want = got.double(), want.double()
    if seen is not None:
        got, want = torch.where(seen, got, 0.0), torch.where(seen, want, 0.0)
    err = (got - want).abs() / (2e-4 + 2e-4 * want.abs())
    if not torch.isfinite(err).all():
        return math.inf
    return float(err.max()) if err.numel() else 0.0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=40, help="how many cases")
    parser.add_argument("--seed", type=int, default=0, help="first case's seed")
    parser.add_argument("--json", default=None, help="write every record here")
    parser.add_argument("--only", type=int, default=None, help="run this seed alone, verbosely")
    args = parser.parse_args(argv)

    os.environ.setdefault("FLASHGEN_IMPL", "flashgen")
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from flashgen.compile.backend import backend

    def factory():
        return backend(fallback="aot_eager")

    seeds = [args.only] if args.only is not None else range(args.seed, args.seed + args.cases)
    records, failed = [], []
    reasons = collections.Counter()
    start = time.time()
    for n, seed in enumerate(seeds):
        case = draw(seed)
        rec = run_case(case, factory)
        records.append(rec)
        worst = max((max(c["out"], c["grads"] or 0.0) for c in rec["calls"]), default=0.0)
        bad = rec["error"] is not None or worst > 1.0
        for why in rec["skips"]:
            reasons[why.split(":")[0][:90]] += 1
        status = "FAIL" if bad else "ok"
        print(
            f"[{n + 1}/{len(seeds)}] seed {seed} {status} replaced={rec['replaced']} "
            f"worst={worst:.3g} skips={len(rec['skips'])} ({time.time() - start:.0f} s)",
            flush=True,
        )
        if bad:
            failed.append(seed)
        if bad or args.only is not None:
            print(textwrap.indent(source(case), "    "))
            print(f"    {asdict(case)}")
            print(f"    calls: {rec['calls']}")
            if rec["error"]:
                print(textwrap.indent(rec["error"], "    "))
            for why in rec["skips"]:
                print(f"    skipped: {why}")
    replaced = sum(1 for r in records if r["replaced"])
    print(f"\n{len(records)} cases: {len(failed)} failed {failed}; {replaced} with a site replaced")
    for why, count in reasons.most_common():
        print(f"  {count:4d} skipped: {why}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
