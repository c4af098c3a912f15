"""Variants of the Hopper backward's shipped configs, A/B on an H100/H200: each variant is the
config a shape runs (`hopper_bwd.shipped_config` of its head dim, causality, keys and GQA
group) with some fields replaced, checked against float64 and timed against that config in one
process.

Why beside benchmarks/hopper_bwd.py (whole configs as positional field lists, timed beside the
split kind and cuDNN): a knob's effect is a ratio to what ships, and shipped configs differ
per (head dim, causal) and for some by keys and GQA group, so a variant is named by what it
changes.

    PYTHONPATH=. python3 benchmarks/bwd_variants.py --vary t2=dq_turns:1,ds_bufs:2@128 \\
        --vary kv2=kv_bufs:2@64f [--rounds 3] [--budget S] [--out DIR] [--grid anchors|probe]

--vary NAME=FIELD:VALUE[,FIELD:VALUE...][@D[c|f]]: HopperBwdConfig fields (flags as 0/1);
@D limits it to head dim D, with c (causal) or f (not causal) to one causal mode. A variant
the config class refuses for a pair (e.g. dq_first with dq_turns) is left out there, with the
reason printed.

1. Correctness: every variant and the shipped config on a ragged GQA shape (2 x 8/2 heads, 333
   queries, 301 keys), once per distinct shipped config of a (head dim, causal), dQ/dK/dV
   against float64 autograd (`flashgen.bench.checks.grad_check`: 3x PyTorch's own bf16 error
   plus 8e-3 of the gradient's size). Variants that fail are not timed.
2. Speed (bf16, the 18-shape grid, L2 flushed): each shape's plans built once, the shipped
   config and its variants timed in alternating rounds (do_bench medians, order reversed every
   other round), the median per variant; ratio = shipped time / variant time (above 1: faster),
   and the largest gradient difference from the shipped config's, relative to its size.

Results: <out>/bwd_variants.json, rewritten after every shape; geomeans per (variant, head dim)
at the end. Timing stops once --budget seconds have passed. Exit status 1 if a check failed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
import time
from typing import NamedTuple

# appended: a tree on PYTHONPATH (an A/B's old tree) comes first
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from flashgen.bench import scripts  # noqa: E402
from flashgen.bench.scripts import GRIDS  # noqa: E402


class Vary(NamedTuple):
    """One --vary: the fields it replaces and the (head dim, causal) pairs it applies to (a
    NamedTuple: this script is also loaded from its path, outside sys.modules, where a
    dataclass cannot resolve its annotations)."""

    name: str
    fields: tuple[tuple[str, int | bool], ...]
    head_dim: int | None = None
    causal: bool | None = None

    def applies(self, d: int, causal: bool) -> bool:
        return self.head_dim in (None, d) and self.causal in (None, causal)


def parse_vary(text: str, config_class=None) -> Vary:
    """NAME=FIELD:VALUE[,...][@D[c|f]] -> Vary over the fields of `config_class` (default
    HopperBwdConfig; benchmarks/fwd_variants.py passes HopperConfig); ValueError naming what is
    wrong."""
    if config_class is None:
        from flashgen.kernels.hopper_bwd import HopperBwdConfig as config_class

    name, sep, rest = text.partition("=")
    if not sep or not name or name == "shipped":
        raise ValueError(f"{text!r}: NAME=FIELD:VALUE[,...][@D[c|f]] (NAME not 'shipped')")
    body, _, where = rest.partition("@")
    fields_ = dataclasses.fields(config_class)
    known = {f.name for f in fields_}
    flags = {f.name for f in fields_ if f.type in ("bool", bool)}
    fields = []
    for item in body.split(","):
        field, sep, value = item.partition(":")
        if not sep or field not in known:
            raise ValueError(
                f"{text!r}: {item!r} is not FIELD:VALUE of a {config_class.__name__} field"
            )
        try:
            number = int(value)
        except ValueError:
            raise ValueError(f"{text!r}: {field}'s value {value!r} is not an integer") from None
        if field in flags:
            if number not in (0, 1):
                raise ValueError(f"{text!r}: {field} is a flag, 0 or 1")
            number = bool(number)
        fields.append((field, number))
    head_dim = causal = None
    if where:
        mode = where[-1] if where[-1] in "cf" else ""
        digits = where[: len(where) - len(mode)]
        if not digits.isdigit():
            raise ValueError(f"{text!r}: after @ a head dim, then c (causal) or f (not)")
        head_dim, causal = int(digits), {"c": True, "f": False}.get(mode)
    return Vary(name, tuple(fields), head_dim, causal)


def variants(d: int, causal: bool, varies, seq_k=None, group: int = 1) -> tuple[dict, dict]:
    """({name: config} with "shipped" first, {name: why refused}) for (d, causal) at `seq_k`
    keys and `group` query heads a kv head (the shipped config can depend on them:
    `hopper_bwd.shipped_config`): refused where the config class says no, the head dim cannot
    be split so, or the SRAM model puts it past an H100/H200's shared memory (227 KB)."""
    from flashgen.core.config import FieldError
    from flashgen.core.spec import KernelSpec
    from flashgen.hardware.sram import KNOWN_GPUS
    from flashgen.kernels import hopper_bwd

    limit = KNOWN_GPUS["nvidia-h200"].smem_optin_bytes

    shipped = hopper_bwd.shipped_config(KernelSpec(d, causal, "bfloat16", "bwd"), seq_k, group)
    out, refused = {"shipped": shipped}, {}
    for vary in varies:
        if not vary.applies(d, causal):
            continue
        try:
            cfg = dataclasses.replace(shipped, **dict(vary.fields))
        except FieldError as exc:
            refused[vary.name] = str(exc)
            continue
        why = cfg.head_dim_reason(d)
        if why is None and cfg.shared_bytes(d) > limit:
            why = f"{cfg.shared_bytes(d)} bytes of shared memory > {limit}"
        if why is not None:
            refused[vary.name] = why
        else:
            out[vary.name] = cfg
    return out, refused


def check(d, causal, cfgs) -> dict:
    """{name: passed} against float64 autograd on the ragged GQA shape
    (`flashgen.bench.checks.grad_check`, as benchmarks/hopper_bwd.py checks)."""
    from flashgen.bench.checks import grad_check
    from flashgen.core.spec import KernelSpec
    from flashgen.kernels import hopper_bwd
    from flashgen.kernels.fwd import forward

    spec = KernelSpec(d, causal, "bfloat16", "bwd")
    q, k, v, do = scripts.inputs(2, 8, 2, 333, 301, d, seed=1)
    out, lse = forward(q, k, v, causal=causal, scale=None)
    result = {}
    for name, cfg in cfgs.items():
        try:
            grads = hopper_bwd.backward(do, q, k, v, out, lse, scale=d**-0.5, spec=spec,
                                        config=cfg)  # fmt: skip
        except Exception as exc:  # e.g. a compile error: this variant fails, the run goes on
            print(f"d{d} causal={causal} {name}: {exc!r}"[:400], flush=True)
            result[name] = False
            continue
        ok, errors = grad_check(grads, q, k, v, do, causal=causal)
        if not ok:
            print(f"d{d} causal={causal} {name}: {errors}", flush=True)
        result[name] = ok
    return result


def time_shape(shape, causal, cfgs, rounds, rep) -> dict:
    import triton.testing

    from flashgen.core.spec import KernelSpec
    from flashgen.kernels import hopper_bwd
    from flashgen.kernels.fwd import forward

    b, hq, hkv, n, d = shape
    q, k, v, do = scripts.inputs(b, hq, hkv, n, n, d, seed=2)
    out, lse = forward(q, k, v, causal=causal, scale=None)
    spec = KernelSpec(d, causal, "bfloat16", "bwd")
    plans = {name: hopper_bwd.Plan(spec, cfg, q, k, v, do, out, None) for name, cfg in cfgs.items()}
    scale = d**-0.5
    grads = {name: p(do, q, k, v, out, lse, scale) for name, p in plans.items()}
    diff = {
        name: round(max(((a.float() - c.float()).abs().max() / c.float().abs().max()).item()
                        for a, c in zip(grads[name], grads["shipped"], strict=True)), 6)
        for name in grads if name != "shipped"
    }  # fmt: skip
    del grads
    ms = {name: [] for name in plans}
    for i in range(rounds):
        for name in list(plans)[:: -1 if i % 2 else 1]:
            plan = plans[name]
            ms[name].append(triton.testing.do_bench(
                lambda plan=plan: plan(do, q, k, v, out, lse, scale), warmup=5, rep=rep,
                return_mode="median"))  # fmt: skip
    med = {name: statistics.median(x) for name, x in ms.items()}
    ratio = {name: round(med["shipped"] / med[name], 4) for name in med if name != "shipped"}
    return dict(shape=list(shape), causal=causal, configs={n: c.short() for n, c in cfgs.items()},
                ms=ms, median=med, ratio=ratio, rel_diff=diff)  # fmt: skip


def head_dim_label(row) -> str:
    return f"head dim {row['shape'][-1]}"


def summarise(rows, label=head_dim_label) -> list[str]:
    """'NAME at LABEL: geomean G (min, max) over R rows' per variant and row label (`label`
    of a row; default its head dim)."""
    lines = []
    names = sorted({n for r in rows for n in r["ratio"]})
    for group in sorted({label(r) for r in rows}):
        for name in names:
            got = [r["ratio"][name] for r in rows if label(r) == group and name in r["ratio"]]
            if got:
                lines.append(f"{name} at {group}: shipped / variant geomean "
                             f"{statistics.geometric_mean(got):.4f} (min {min(got):.4f}, "
                             f"max {max(got):.4f}) over {len(got)} rows")  # fmt: skip
    return lines


def add_arguments(ap) -> None:
    """The options this script shares with benchmarks/fwd_variants.py."""
    ap.add_argument("--vary", action="append", default=[], metavar="NAME=FIELD:VALUE,...[@D[c|f]]",
                    help="a variant of the shipped configs (repeatable; see above)")  # fmt: skip
    ap.add_argument("--grid", choices=sorted(GRIDS), default="anchors")
    ap.add_argument("--rounds", type=int, default=3, help="alternating timing rounds per shape")
    ap.add_argument("--rep", type=int, default=25, help="do_bench rep (ms)")


def parse_varies(ap, texts, config_class=None) -> list[Vary]:
    """The --vary options parsed; the parser's error (exit 2) for a bad one, none, or a name
    given twice."""
    try:
        varies = [parse_vary(text, config_class) for text in texts]
    except ValueError as exc:
        ap.error(str(exc))
    if not varies:
        ap.error("no --vary given: nothing to compare with the shipped configs")
    if len({v.name for v in varies}) != len(varies):
        ap.error("two --vary with the same NAME")
    return varies


def checked_variants(report, key: str, found: dict, refused: dict, run_check) -> dict:
    """`found` ({name: config}, "shipped" first) without the variants whose float64 check
    failed: `run_check()` ({name: passed}) runs once per `key` (a shipped config of a head dim
    and causal mode), its result and the refused variants recorded in `report` under it."""
    if key not in report["checks"]:
        if refused:
            report["refused"][key] = refused
            print(f"{key}: left out {json.dumps(refused)}")
        report["checks"][key] = run_check()
    passed = report["checks"][key]
    return {name: c for name, c in found.items() if passed[name] or name == "shipped"}


def failed_checks(report) -> list:
    """After the checks: the (key, variant) pairs that failed; the run's metadata recorded and
    every check printed."""
    bad = [(k, n) for k, r in report["checks"].items() for n, ok in r.items() if not ok]
    report["meta"] = scripts.run_meta("cuda")
    print("float64 checks:", json.dumps(report["checks"]), flush=True)
    return bad


def main(argv=None) -> int:
    ap = scripts.parser(__doc__, out=os.environ.get("OUT", "."), budget=240.0)
    add_arguments(ap)
    args = ap.parse_args(argv)
    varies = parse_varies(ap, args.vary)
    start = time.time()
    shapes = GRIDS[args.grid]
    report = dict(vary=args.vary, refused={}, checks={}, rows=[])
    path = scripts.out_path(args.out, "bwd_variants.json")

    def save():
        report["summary"] = summarise(report["rows"])
        scripts.save_json(path, report)

    # Per (shape, causal): the variants of the config that shape runs, each set checked once
    # (shapes that run the same shipped config share it).
    cfgs = {}
    for shape in shapes:
        b, hq, hkv, n, d = shape
        for causal in (False, True):
            found, refused = variants(d, causal, varies, n, hq // hkv)
            key = f"d{d} causal={causal} {found['shipped'].short()}"
            cfgs[tuple(shape), causal] = checked_variants(
                report, key, found, refused, lambda d=d, causal=causal, found=found: check(
                    d, causal, found))  # fmt: skip
    bad = failed_checks(report)
    save()
    for shape in shapes:
        for causal in (False, True):
            if time.time() - start > args.budget:
                print(f"budget reached before {tuple(shape)} causal={causal}")
                save()
                return 1 if bad else 0
            if len(cfgs[tuple(shape), causal]) > 1:
                row = time_shape(shape, causal, cfgs[tuple(shape), causal], args.rounds, args.rep)
                report["rows"].append(row)
                save()
                print(json.dumps({k: row[k] for k in ("shape", "causal", "ratio")}), flush=True)
    save()
    print("\n".join(report["summary"]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
