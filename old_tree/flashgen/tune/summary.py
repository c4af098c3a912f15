"""The table printed at the end of `flashgen tune`, read back from the tuning database so that
it and `flashgen db show` never disagree."""

from __future__ import annotations


def stored_rows(results, db, env) -> list:
    """`results` as the database holds them: for each task the stored record's config, time,
    trial count and winner, so that the table printed and `flashgen db show` never disagree.

    The record can differ from this run's best: the keep-best rule kept an earlier record that
    was as good or better (a tie keeps the stored one), or another worker stored a better one.
    Such rows say "kept stored". The gain over the default stays this run's own measurement
    (both times from the same run); it is left out where the stored record is not this run's."""
    rows = []
    for r in results:
        rec = db.get(r.task.spec, r.task.bucket, env)
        if rec is None:
            rows.append((r, None, False))
            continue
        # A tie with this run's best is this run's result too (the stored twin was kept).
        ours = r.best_config is not None and (rec.time_ms, rec.measured) == (r.best_ms, r.measured)
        rows.append((r, rec, not ours))
    return rows


def format_summary(results, *, db=None, env=None) -> str:
    """The end-of-run table: spec, bucket, best config, time, TFLOP/s, gain over the default,
    evaluated candidates, and which implementation won against PyTorch's SDPA backends (ratio
    to the runner-up). With `db` and `env`, every value but the gain is read back from the
    database (`stored_rows`)."""
    header = ("spec", "bucket", "best config", "time ms", "TFLOP/s", "vs default", "trials", "kind",
              "winner / vs next")  # fmt: skip
    from ..core.impls import impl_label

    if db is not None and env is not None:
        entries = stored_rows(results, db, env)
    else:
        entries = [(r, None, False) for r in results]
    rows = []
    for r, rec, kept in entries:
        if rec is not None:
            config, ms, tfl, trials, measured = (rec.config, rec.time_ms, rec.tflops,
                                                 rec.n_trials, rec.measured)  # fmt: skip
            impl, ratio = rec.impl, rec.impl_ratio
        else:
            config, ms, tfl, trials, measured = (r.best_config, r.best_ms, r.tflops,
                                                 r.evaluated, r.measured)  # fmt: skip
            impl, ratio = r.impl, r.impl_ratio
        gain = r.gain if not kept else float("nan")
        kind = "measured" if measured else "modelled"
        if kept:
            kind += " (kept stored)"
        if r.interrupted:
            kind += " (interrupted)"
        rows.append(
            (r.task.spec.uri(), f"{r.task.bucket[0]}x{r.task.bucket[1]}",
             config.short() if config else "none", f"{ms:.4g}" if config else "-",
             f"{tfl:.1f}" if config else "-", f"{gain:.2f}x" if gain == gain else "n/a",
             str(trials), kind, impl_label(impl, ratio))
        )  # fmt: skip
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h)
              for i, h in enumerate(header)]  # fmt: skip
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    if db is not None:
        lines.append(f"written to {db.url_safe}")
    return "\n".join(line.rstrip() for line in lines)
