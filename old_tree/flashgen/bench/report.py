"""Benchmark rows out: a table for the terminal, CSV and JSON files, a plot.

The table has one line per (case, mode): TFLOP/s of each implementation and the ratio of the
first implementation asked for (flashgen by default) to the fastest other one. A failed check
shows as `!` after the figure, a skipped implementation as `-`. CSV and JSON hold one flat
record per (case, mode, implementation) (`harness.Row.flat`) plus, in JSON, the run's metadata
(GPU, versions, commit, command). The plot draws TFLOP/s against sequence length, one line per
implementation, one panel per (head dim, causal, mode); it needs matplotlib (the `plot` extra).
"""

from __future__ import annotations

import csv
import json

from .harness import Case, Row, fastest_other

FIELDS = ("batch", "hq", "hkv", "seq", "head_dim", "causal", "dtype", "mode", "impl", "ms",
          "tflops", "ok", "max_rel_err", "note")  # fmt: skip


def table(rows: list[Row], impls) -> str:
    """The rows as a fixed-width text table (see the module docstring)."""
    first = impls[0]
    head = f"{'case':<34}{'mode':<8}" + "".join(f"{i:>15}" for i in impls)
    head += f"{first + '/best other':>22}"
    lines = [head, "-" * len(head)]
    keys = []
    for r in rows:
        if (r.case, r.mode) not in keys:
            keys.append((r.case, r.mode))
    for case, mode in keys:
        group = {r.impl: r for r in rows if r.case == case and r.mode == mode}
        cells = []
        for impl in impls:
            r = group.get(impl)
            if r is None or r.tflops is None:
                cells.append(f"{'-':>15}")
            else:
                cells.append(f"{r.tflops:>14.1f}{'' if r.ok else '!'}".rjust(15))
        ratio = "-"
        mine = group.get(first)
        other = fastest_other(rows, mine) if mine is not None and mine.ms else None
        if other is not None:
            ratio = f"{other.ms / mine.ms:.2f}x ({other.impl})"
        lines.append(f"{case.label():<34}{mode:<8}" + "".join(cells) + f"{ratio:>22}")
    lines.append("TFLOP/s; '!' = output differs from the float64 reference; '-' = not run")
    return "\n".join(lines)


META_FIELDS = ("gpu", "torch", "triton", "commit", "date")


def write_csv(path: str, rows: list[Row], meta: dict | None = None) -> None:
    """One line per row; with `meta`, its GPU, versions, commit and date on every line, so the
    file stands alone as a table of figures (benchmarks/latest.csv is one)."""
    extra = {k: (meta or {}).get(k, "") for k in META_FIELDS} if meta else {}
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS + tuple(extra))
        writer.writeheader()
        for r in rows:
            writer.writerow({**r.flat(), **extra})


def write_json(path: str, rows: list[Row], meta: dict) -> None:
    with open(path, "w") as handle:
        json.dump({"meta": meta, "rows": [r.flat() for r in rows]}, handle, indent=1)


def out_file(target: str | None, name: str) -> str:
    """Where a GPU script writes its JSON: `target` itself when it names a .json file, else
    `target`/`name`; `target` None: the folder in $OUT (what the GPU queue brings back), else
    the current one. Creates the folder."""
    import os

    target = target or os.environ.get("OUT", ".")
    if target.endswith(".json"):
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        return target
    os.makedirs(target, exist_ok=True)
    return os.path.join(target, name)


def read_rows(path: str) -> list[Row]:
    """Rows back from a JSON or CSV file written above (to re-draw a plot without a GPU)."""
    if path.endswith(".json"):
        with open(path) as handle:
            flat = json.load(handle)["rows"]
    else:
        with open(path, newline="") as handle:
            flat = list(csv.DictReader(handle))
    rows = []
    for f in flat:
        case = Case(int(f["batch"]), int(f["hq"]), int(f["hkv"]), int(f["seq"]),
                    int(f["head_dim"]), _bool(f["causal"]), f["dtype"])  # fmt: skip
        ms = _float(f["ms"])
        rows.append(Row(case, f["mode"], f["impl"], ms, _float(f["tflops"]), _bool(f["ok"]),
                        {}, f.get("note") or ""))  # fmt: skip
    return rows


def _float(value):
    return None if value in (None, "", "None") else float(value)


def _bool(value):
    if value in (None, "", "None"):
        return None
    return value if isinstance(value, bool) else value == "True"


def panel_key(row: Row) -> tuple:
    """The panel a row is drawn in: (head dim, causal, dtype, query heads, kv heads, mode)."""
    c = row.case
    return (c.head_dim, c.causal, c.dtype, c.hq, c.hkv, row.mode)


def plot(path: str, rows: list[Row], title: str = "", notes: dict | None = None) -> None:
    """TFLOP/s against sequence length, one line per implementation (see module docstring).

    `notes` maps a `panel_key` to text added under that panel's title: a plot drawn from
    several runs (benchmarks/latest.py) names there the commit each panel was measured on."""
    try:
        import matplotlib
    except ImportError:
        raise ValueError(
            "--plot needs matplotlib: pip install 'flashgen[plot]' (or pip install matplotlib)"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys(panel_key(r) for r in rows))
    cols = min(3, len(panels)) or 1
    nrows = (len(panels) + cols - 1) // cols or 1
    fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 3.6 * nrows), squeeze=False)
    for ax, key in zip(axes.flat, panels, strict=False):
        d, causal, dtype, hq, hkv, mode = key
        sel = [r for r in rows if panel_key(r) == key and r.tflops is not None]
        impls = list(dict.fromkeys(r.impl for r in sel))
        for impl in impls:
            pts = sorted((r.case.seq, r.tflops) for r in sel if r.impl == impl)
            style = "-o" if impl in ("flashgen", "op") else "--."
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=impl)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length")
        ax.set_ylabel("TFLOP/s")
        heads = f"H{hq}" if hq == hkv else f"H{hq}/{hkv}"
        name = f"{mode} D{d} {heads} {'causal' if causal else 'full'} {dtype}"
        note = (notes or {}).get(key)
        ax.set_title(f"{name}\n{note}" if note else name, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
