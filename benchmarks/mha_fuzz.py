"""Random PyTorch attention modules, compiled vs float64 eager (CPU).

nn.MultiheadAttention, nn.TransformerEncoderLayer, nn.TransformerDecoderLayer and a two-layer
nn.TransformerEncoder, compiled with the flashgen backend and compared with the same module in
float64 eager at several lengths (a correctness sweep, not a timing).

Why: `flashgen.compile.patterns.mha` rebuilds `F.multi_head_attention_forward` around the
flashgen op and reads its masks (attn_mask boolean or additive, 2-D or per head, built in
forward() or passed in; key_padding_mask of either kind; the is_causal hint; need_weights whose
weights go unused), and the layers around it add their own choices (batch_first, norm_first,
cross-attention of another length, kdim/vdim, bias, training mode, a forward under no_grad in
eval mode where PyTorch's fast path is tried). The unit tests pin a spread of these; this
draws them together, with dynamic and static compiles over several lengths, and checks the
outputs and every gradient (inputs and parameters), so a combination the pass gets wrong shows
up as a mismatch. A site the pass keeps is PyTorch's and is still compared: a kept site is
tallied, not failed; a wrong number fails.

Compared: float32 compiled against float64 eager on every element eager gives finite (a query
row PyTorch's math path hides whole can be NaN there); gradients where eager's are all finite.
The error is max |got - want| over max |want| per tensor; BAD above 1e-4 (float32 eager itself
reads ~1e-6), or on a NaN where eager is finite.

Usage: python benchmarks/mha_fuzz.py [--cases N] [--seed S] [--only SEED] [--json FILE]
(CPU: kernels in Triton's interpreter, set up here; a few seconds a case.)
"""

from __future__ import annotations

import argparse
import collections
import copy
import dataclasses
import json
import os
import random
import sys
import time
import traceback
from dataclasses import asdict, dataclass

B = 2
TOL = 1e-4
SELF_LENS = (5, 9, 7, 12)  # the calls' lengths, in order (the first compile sees 5)
CROSS_LENS = (8, 6, 11, 9)  # keys' lengths of cross-attention, beside SELF_LENS


@dataclass(frozen=True)
class Case:
    """One module, its masks and how it is compiled (every field drawn by `draw`)."""

    seed: int
    module: str  # "mha" | "encoder_layer" | "decoder_layer" | "encoder" (two layers)
    batch_first: bool
    embed: int
    heads: int
    bias: bool
    cross: bool  # mha: keys and values from another sequence (of CROSS_LENS)
    kvdim: bool  # mha with cross: kdim / vdim other than embed
    extra_kv: str  # mha: "none" | "bias_kv" (add_bias_kv) | "zero_attn" (add_zero_attn)
    need_weights: bool  # mha: PyTorch's default True (the weights unused)
    # the self-attention's attn_mask: "none"; built in forward(): "causal_float"
    # (nn.Transformer.generate_square_subsequent_mask), "causal_bool" (triu, True hides);
    # an input: "bool" (True hides), "float" (additive, -inf where hidden), "bool3" ([B*H, L, S])
    attn_mask: str
    hint: bool  # is_causal=True beside a causal attn_mask
    kpm: str  # key_padding_mask: "none" | "bool" (True pads) | "float" (-inf where padded)
    pad: str  # "right" | "left": where batch 1's two padded keys are
    norm_first: bool
    train: bool  # training mode (dropout 0) rather than eval (dropout 0.1, not applied)
    nograd: bool  # eval, forward only under torch.no_grad (PyTorch's fast-path conditions)
    dynamic: str  # "auto" | "true" | "false"


def draw(seed: int) -> Case:
    r = random.Random(seed)
    module = r.choice(["mha", "mha", "encoder_layer", "decoder_layer", "encoder"])
    heads = r.choice([1, 2, 4])
    cross = module == "mha" and r.random() < 0.4
    attn_mask = r.choice(["none", "causal_float", "causal_bool", "bool", "float", "bool3"])
    if cross and attn_mask.startswith("causal"):
        attn_mask = "bool"  # (a causal mask is square)
    train = r.random() < 0.4
    # key padding mostly of the attn_mask's kind: PyTorch warns of mixed kinds (deprecated),
    # which breaks the graph there (no site to compare), so those are drawn rarely
    kind = "float" if attn_mask in ("float", "causal_float") else "bool"
    other = {"bool": "float", "float": "bool"}[kind]
    kpm = r.choice(
        ["none", kind, kind, other] if attn_mask != "none" else ["none", "bool", "float"]
    )
    case = Case(
        seed=seed,
        module=module,
        batch_first=r.random() < 0.6,
        embed=heads * r.choice([16, 24, 32]),
        heads=heads,
        bias=r.random() < 0.8,
        cross=cross,
        kvdim=cross and r.random() < 0.5,
        extra_kv=r.choice(["none"] * 6 + ["bias_kv", "zero_attn"]) if module == "mha" else "none",
        need_weights=module == "mha" and r.random() < 0.3,
        attn_mask=attn_mask,
        hint=attn_mask.startswith("causal") and r.random() < 0.5,
        kpm=kpm,
        pad=r.choice(["right", "left"]),
        norm_first=r.random() < 0.5,
        train=train,
        nograd=not train and r.random() < 0.3,
        dynamic=r.choice(["auto", "true", "false"]),
    )
    # nn.TransformerEncoderLayer's fused inference op (eval under no_grad, batch_first, an even
    # head count, biases) for a third of the encoders (its own draw: the fields above stay)
    if module.startswith("encoder") and random.Random(seed * 7919 + 1).random() < 0.35:
        case = dataclasses.replace(
            case, train=False, nograd=True, batch_first=True, bias=True,
            heads=max(2, heads), embed=max(2, heads) * (case.embed // heads),
        )  # fmt: skip
    return case


class Model:
    """Builds the case's torch module and calls it the way its users do."""

    def __init__(self, case: Case):
        import torch
        from torch import nn

        self.case = c = case
        torch.manual_seed(c.seed)
        layer_kw = dict(
            d_model=c.embed, nhead=c.heads, dim_feedforward=2 * c.embed, dropout=0.1,
            batch_first=c.batch_first, norm_first=c.norm_first, bias=c.bias,
        )  # fmt: skip
        if c.module == "mha":
            kdim = c.embed + 4 if c.kvdim else None
            vdim = c.embed + 8 if c.kvdim else None
            self.net = nn.MultiheadAttention(
                c.embed, c.heads, dropout=0.0 if c.train else 0.1, bias=c.bias,
                add_bias_kv=c.extra_kv == "bias_kv", add_zero_attn=c.extra_kv == "zero_attn",
                kdim=kdim, vdim=vdim, batch_first=c.batch_first,
            )  # fmt: skip
        elif c.module == "encoder_layer":
            self.net = nn.TransformerEncoderLayer(**layer_kw)
        elif c.module == "decoder_layer":
            self.net = nn.TransformerDecoderLayer(**layer_kw)
        else:
            layer = nn.TransformerEncoderLayer(**layer_kw)
            self.net = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        if c.train:
            for m in self.net.modules():
                if isinstance(m, nn.Dropout):
                    m.p = 0.0
                if isinstance(m, nn.MultiheadAttention):
                    m.dropout = 0.0  # (a float of its own, not an nn.Dropout)
        self.net.train(c.train)

    def __call__(self, x, mem, masks):
        """x: the queries' sequence; mem: the keys' (cross-attention, the decoder's memory) or
        None; masks: the inputs' masks (`inputs`)."""
        import torch
        from torch import nn

        c = self.case
        n = x.shape[1] if c.batch_first else x.shape[0]
        am = masks.get("attn_mask")
        if c.attn_mask == "causal_float":
            am = nn.Transformer.generate_square_subsequent_mask(n, dtype=x.dtype)
        elif c.attn_mask == "causal_bool":
            am = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
        kpm = masks.get("key_padding_mask")
        if c.module == "mha":
            kv = x if mem is None else mem
            key = kv[..., : self.net.kdim] if c.kvdim else kv
            value = kv[..., : self.net.vdim] if c.kvdim else kv
            return self.net(
                x, key, value, key_padding_mask=kpm, need_weights=c.need_weights,
                attn_mask=am, is_causal=c.hint,
            )[0]  # fmt: skip
        if c.module == "decoder_layer":
            return self.net(
                x, mem, tgt_mask=am, tgt_key_padding_mask=kpm, tgt_is_causal=c.hint,
                memory_key_padding_mask=masks.get("memory_key_padding_mask"),
            )  # fmt: skip
        if c.module == "encoder_layer":
            return self.net(x, src_mask=am, src_key_padding_mask=kpm, is_causal=c.hint)
        return self.net(x, mask=am, src_key_padding_mask=kpm, is_causal=c.hint)


def lengths(case: Case) -> list[tuple[int, int | None]]:
    """(query length, other sequence's length or None) per call."""
    other = case.cross or case.module == "decoder_layer"
    return [(n, m if other else None) for n, m in zip(SELF_LENS, CROSS_LENS, strict=True)]


def _padding(case: Case, n: int, gen):
    import torch

    pad = torch.zeros(B, n, dtype=torch.bool)
    if case.pad == "right":
        pad[1, n - 2 :] = True
    else:
        pad[1, :2] = True
    if case.kpm == "float":
        return torch.zeros(B, n).masked_fill(pad, float("-inf"))
    return pad


def inputs(case: Case, model: Model, n: int, m: int | None, seed: int):
    """The call's tensors: x, mem (or None), and the masks that are inputs."""
    import torch

    g = torch.Generator().manual_seed(seed)
    e = case.embed
    width = max(e, model.net.kdim, model.net.vdim) if case.module == "mha" else e
    x = torch.randn(B, n, e, generator=g)
    mem = None if m is None else torch.randn(B, m, width if case.cross else e, generator=g)
    if not case.batch_first:
        x = x.transpose(0, 1).contiguous()
        mem = None if mem is None else mem.transpose(0, 1).contiguous()
    s = n if (m is None or case.module == "decoder_layer") else m  # keys of the masked site
    masks = {}
    if case.attn_mask in ("bool", "float", "bool3"):
        shape = (B * case.heads, n, s) if case.attn_mask == "bool3" else (n, s)
        hide = torch.rand(shape, generator=g) < 0.3
        hide[..., 0] = False  # (padding may still hide a row whole)
        if case.attn_mask == "float":
            masks["attn_mask"] = torch.randn(shape, generator=g).masked_fill(hide, float("-inf"))
        else:
            masks["attn_mask"] = hide
    if case.kpm != "none":
        masks["key_padding_mask"] = _padding(case, s, g)
        if case.module == "decoder_layer":
            masks["memory_key_padding_mask"] = _padding(case, m, g)
    return x, mem, masks


def run_case(case: Case, backend_factory) -> dict:
    """Compile and compare; the result record (raises nothing: errors are recorded)."""
    import torch

    from flashgen.compile import patterns
    from flashgen.compile.patterns import attention_pass

    model = Model(case)
    ref = copy.deepcopy(model)
    ref.net.double()
    record = {"case": asdict(case), "calls": [], "replaced": 0, "kept": [], "error": None}
    inner = backend_factory()

    def compile_graph(gm, example_inputs):
        for site in attention_pass(gm, list(example_inputs), None, rewrite_graph=False):
            if not site.replaced:
                record["kept"].append(site.reason)
        before = patterns.counters.copy()
        out = inner(gm, example_inputs)
        record["replaced"] += sum(
            v - before.get(k, 0) for k, v in patterns.counters.items() if k.endswith(".replaced")
        )
        return out

    dynamic = {"auto": None, "true": True, "false": False}[case.dynamic]
    torch._dynamo.reset()
    compiled = torch.compile(model.__call__, backend=compile_graph, dynamic=dynamic)
    try:
        for i, (n, m) in enumerate(lengths(case)):
            x, mem, masks = inputs(case, model, n, m, case.seed * 100 + i)
            want, want_g = _evaluate(ref, x, mem, masks, torch.float64, case)
            got, got_g = _evaluate(compiled, x, mem, masks, torch.float32, case, model)
            call = {"n": n, "m": m, "out": _error(got, want), "grads": None}
            if want_g and all(torch.isfinite(w).all() for w in want_g):
                call["grads"] = max(_error(a, b) for a, b in zip(got_g, want_g, strict=True))
            record["calls"].append(call)
    except Exception:  # noqa: BLE001 - a sweep records every error, with its trace
        record["error"] = traceback.format_exc(limit=8)
    finally:
        torch._dynamo.reset()
    return record


def _evaluate(fn, x, mem, masks, dtype, case: Case, model: Model | None = None):
    """The output, and the gradients of the inputs and parameters (none under `nograd`)."""
    import torch

    net = (model or fn).net
    x = x.to(dtype).requires_grad_(not case.nograd)
    mem = None if mem is None else mem.to(dtype).requires_grad_(not case.nograd)
    masks = {k: v.to(dtype) if v.is_floating_point() else v for k, v in masks.items()}
    if case.nograd:
        with torch.no_grad():
            return fn(x, mem, masks).detach(), []
    out = fn(x, mem, masks)
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(7)).to(dtype)
    wanted = [x] + ([mem] if mem is not None else []) + list(net.parameters())
    grads = torch.autograd.grad((torch.nan_to_num(out) * w).sum(), wanted, allow_unused=True)
    grads = [torch.zeros_like(p) if g is None else g for g, p in zip(grads, wanted, strict=True)]
    return out.detach(), [g.detach() for g in grads]


def _error(got, want) -> float:
    """max |got - want| / max |want| over the elements where `want` is finite; infinite where
    `got` is not finite there."""
    import torch

    got, want = got.double(), want.double()
    ok = torch.isfinite(want)
    if not torch.isfinite(got[ok]).all():
        return float("inf")
    if not ok.any():
        return 0.0
    scale = float(want[ok].abs().max()) or 1.0
    return float((got[ok] - want[ok]).abs().max()) / scale


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=40, help="how many cases")
    parser.add_argument("--seed", type=int, default=0, help="first case's seed")
    parser.add_argument("--json", default=None, help="write every record here")
    parser.add_argument("--only", type=int, default=None, help="run this seed alone, verbosely")
    args = parser.parse_args(argv)
    if args.cases < 1:
        parser.error(f"--cases: at least 1, got {args.cases}")

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
    for i, seed in enumerate(seeds):
        case = draw(seed)
        rec = run_case(case, factory)
        records.append(rec)
        worst = max((max(c["out"], c["grads"] or 0.0) for c in rec["calls"]), default=0.0)
        bad = rec["error"] is not None or worst > TOL
        for why in rec["kept"]:
            reasons[why[:110]] += 1
        print(
            f"[{i + 1}/{len(seeds)}] seed {seed} {'BAD' if bad else 'ok'} {case.module} "
            f"replaced={rec['replaced']} kept={len(rec['kept'])} worst={worst:.3g} "
            f"({time.time() - start:.0f} s)",
            flush=True,
        )
        if bad:
            failed.append(seed)
        if bad or args.only is not None:
            print(f"    {asdict(case)}")
            print(f"    calls: {rec['calls']}")
            if rec["error"]:
                print("    " + rec["error"].replace("\n", "\n    "))
            for why in rec["kept"]:
                print(f"    kept: {why}")
    replaced = sum(1 for r in records if r["replaced"])
    print(f"\n{len(records)} cases: {len(failed)} bad {failed}; {replaced} with a site replaced")
    for why, count in reasons.most_common():
        print(f"  {count:4d} kept: {why}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
