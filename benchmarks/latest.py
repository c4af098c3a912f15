"""benchmarks/latest.csv: the latest figures in one machine-readable table, and the plots drawn from it.

    python benchmarks/latest.py add RESULT.json [RESULT.json ...]   # from a GPU run's output
    python benchmarks/latest.py plot                                 # docs/*.png from the CSV

`add` reads what `flashgen bench --json` and the training examples (`examples/train_*.py
--json`, `examples/vision_encoder.py --json`) write, and puts each figure into the CSV as one
line (kind, name, shape, implementation, metric, value, unit, the run's own check of it, and
the GPU, versions, commit and date of the run that measured it), replacing the line of an earlier run with the same key: the
file holds the latest figure of each, and RESULTS.md keeps every run. `plot` draws
`docs/bench_h200.png` (attention TFLOP/s against sequence length, `flashgen.bench.report.plot`)
and `docs/train_h200.png` (training tokens/s per backend) from the CSV alone, so a plot always
shows exactly the table's figures.
"""

from __future__ import annotations

import csv
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CSV = os.path.join(HERE, "latest.csv")
DOCS = os.path.join(os.path.dirname(HERE), "docs")
FIELDS = ("kind", "name", "batch", "hq", "hkv", "seq", "head_dim", "causal", "dtype", "mode",
          "impl", "metric", "value", "unit", "check", "gpu", "torch", "triton", "commit",
          "date")  # fmt: skip
KEY = ("kind", "name", "batch", "hq", "hkv", "seq", "head_dim", "causal", "dtype", "mode", "impl",
       "metric")  # fmt: skip
META = ("gpu", "torch", "triton", "commit", "date")


def check_of(passed) -> str:
    """The run's own check of a figure: "pass", "fail" (flashgen bench's float64 comparison,
    a training run's loss curve against eager's), or "" where the run made none. A figure whose
    check failed stays in the table (it is the latest measurement) but says so."""
    return "" if passed is None else ("pass" if passed else "fail")


def lines_of(path: str) -> list[dict]:
    """The CSV lines one result file gives."""
    with open(path) as handle:
        data = json.load(handle)
    meta = {k: data.get("meta", {}).get(k, "") for k in META}
    out = []
    rows = data["rows"]
    if rows and "impl" in rows[0]:  # flashgen bench
        for r in rows:
            if r["tflops"] is None:
                continue
            base = {k: r[k] for k in ("batch", "hq", "hkv", "seq", "head_dim", "causal", "dtype",
                                      "mode", "impl")}  # fmt: skip
            out.append({**base, "kind": "attention", "name": "flashgen_bench", "metric": "tflops",
                        "value": round(r["tflops"], 1), "unit": "TFLOP/s",
                        "check": check_of(r.get("ok")), **meta})  # fmt: skip
        return out
    name = os.path.basename(path).split(".")[0]
    for r in rows:  # a training example: case "BxT"
        batch, seq = (int(x) for x in r["case"].split("x"))
        base = {"kind": "training", "name": name, "batch": batch, "seq": seq, "mode": "train",
                "impl": r["backend"], "check": check_of(r.get("loss_agrees")), **meta}  # fmt: skip
        for metric, unit in (("tokens_per_s", "tokens/s"), ("peak_mem_gb", "GiB")):
            if r.get(metric) is not None:
                out.append({**base, "metric": metric, "value": round(r[metric], 2), "unit": unit})
    return out


def read() -> list[dict]:
    if not os.path.exists(CSV):
        return []
    with open(CSV, newline="") as handle:
        return list(csv.DictReader(handle))


def add(paths: list[str]) -> int:
    table = {tuple(str(r.get(k, "")) for k in KEY): r for r in read()}
    for path in paths:
        for line in lines_of(path):
            table[tuple(str(line.get(k, "")) for k in KEY)] = line
    with open(CSV, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        for line in table.values():
            writer.writerow({k: line.get(k, "") for k in FIELDS})
    print(f"{CSV}: {len(table)} figures")
    return 0


def runs(lines: list[dict], sep: str = ", ") -> str:
    """'commit abc (date), commit def (date)': every run the lines come from, oldest first."""
    seen = dict.fromkeys((r["date"], r["commit"]) for r in lines)
    return sep.join(f"commit {c} ({d})" for d, c in sorted(seen))


def machine(lines: list[dict]) -> str:
    """The GPU and versions of the lines, each value once ('a / b' where runs differ)."""
    parts = []
    for field, label in (("gpu", ""), ("torch", "torch "), ("triton", "triton ")):
        values = " / ".join(dict.fromkeys(r[field] for r in lines))
        parts.append(label + values)
    return ", ".join(parts)


def attention_titles(lines: list[dict]) -> tuple[str, dict]:
    """The plot's title and, per panel (`report.panel_key`), the run(s) it was measured in:
    a panel's figures may come from another run than its neighbours', so each says which."""
    from flashgen.bench.report import panel_key

    panels: dict = {}
    for r in lines:
        panels.setdefault(panel_key(_row(r)), []).append(r)
    notes = {key: runs(group, sep="\n") for key, group in panels.items()}  # one run a line
    return f"{machine(lines)}; latest figure of each (benchmarks/latest.csv)", notes


def _row(r: dict):
    from flashgen.bench.harness import Case, Row

    case = Case(int(r["batch"]), int(r["hq"]), int(r["hkv"]), int(r["seq"]), int(r["head_dim"]),
                r["causal"] == "True", r["dtype"])  # fmt: skip
    return Row(case, r["mode"], r["impl"], 1.0, float(r["value"]), True)


def plot() -> int:
    sys.path.insert(0, os.path.dirname(HERE))
    from flashgen.bench.report import plot as plot_attention

    lines = read()
    attention = [r for r in lines if r["kind"] == "attention"]
    if attention:
        title, notes = attention_titles(attention)
        rows = [_row(r) for r in attention]
        plot_attention(os.path.join(DOCS, "bench_h200.png"), rows, title=title, notes=notes)
    training = [r for r in lines if r["kind"] == "training" and r["metric"] == "tokens_per_s"]
    if training:
        _plot_training(training, os.path.join(DOCS, "train_h200.png"))
    return 0


def _plot_training(lines: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(dict.fromkeys((r["name"], r["batch"], r["seq"]) for r in lines))
    impls = list(dict.fromkeys(r["impl"] for r in lines))
    fig, ax = plt.subplots(figsize=(2.2 + 1.8 * len(groups), 3.9))
    width = 0.8 / len(impls)
    for i, impl in enumerate(impls):
        values = [next((float(r["value"]) / 1e3 for r in lines
                        if (r["name"], r["batch"], r["seq"]) == g and r["impl"] == impl), 0.0)
                  for g in groups]  # fmt: skip
        bars = ax.bar([x + i * width for x in range(len(groups))], values, width, label=impl)
        failed = [any(r["impl"] == impl and (r["name"], r["batch"], r["seq"]) == g
                      and r.get("check") == "fail" for r in lines) for g in groups]  # fmt: skip
        labels = [f"{v:.0f}k" + ("!" if f else "") for v, f in zip(values, failed, strict=True)]
        ax.bar_label(bars, labels, fontsize=7)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(groups))])
    ax.set_xticklabels([training_label(lines, g) for g in groups], fontsize=7)
    ax.set_ylabel("thousand tokens/s (training)")
    note = (
        "; '!' = the run's loss check failed"
        if any(r.get("check") == "fail" for r in lines)
        else ""
    )
    ax.set_title(machine(lines) + note, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def training_label(lines: list[dict], group: tuple) -> str:
    """A bar group's label: example, shape and the commit(s) its figures were measured on."""
    name, batch, seq = group
    commits = ", ".join(dict.fromkeys(r["commit"] for r in lines
                                      if (r["name"], r["batch"], r["seq"]) == group))  # fmt: skip
    return f"{name}\n{batch} x {seq}\n{commits}"


def main(argv=None) -> int:
    sys.path.insert(0, os.path.dirname(HERE))
    from flashgen.bench.scripts import parser

    ap = parser(__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("add", help="put a result file's figures into latest.csv")
    a.add_argument("files", nargs="+")
    sub.add_parser("plot", help="draw docs/*.png from latest.csv")
    args = ap.parse_args(argv)
    return add(args.files) if args.cmd == "add" else plot()


if __name__ == "__main__":
    raise SystemExit(main())
