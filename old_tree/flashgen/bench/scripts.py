"""The pieces the GPU scripts in benchmarks/ share, on top of `harness`: inputs, timing, SDPA
baselines, the TFLOP/s figure, the command line and the result files.

The scripts each measure something different (a config grid, backward kinds, masks, decode), so
they keep their own loops and output columns; what they used to write again each time lives here
so that a figure means the same in every one of them:

- `inputs`: seeded random q, k, v (and dO) for any (batch, q heads, kv heads, lengths, head dim,
  dtype, device); GQA when kv heads < q heads.
- `timer`: `harness.gpu_timer` (triton.testing.do_bench median, L2 flushed, repeated) on a GPU,
  `harness.wall_timer` on the CPU, so the scripts' CPU smoke paths time through the same call.
- `attempt` and `error_text`: a timing that may fail (OutOfResources, an SDPA backend that does
  not accept the input) as (ms, None) or (None, "Type: message"), never an aborted run.
- `sdpa_baselines`: PyTorch's SDPA backends (cuDNN, flash, efficient, math through
  `torch.nn.attention.sdpa_kernel`), forward or forward + backward, each as ms or the reason it
  was not accepted.
- `tflops`: the FLOP count of `harness.attention_flops` (causal halves) per time, rounded.
- `parser`, `out_path`: the scripts' command lines (`--help` needs neither GPU nor CUDA).
- `run_meta`, `save_json`, `RowWriter`: result files carrying where, when and with what they
  were measured (GPU, torch/triton versions, commit, date, command).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import time

from . import harness

SDPA_IMPLS = ("sdpa_cudnn", "sdpa_flash", "sdpa_efficient", "sdpa_math")
# The shape grids a script's --grid picks, as (B, Hq, Hkv, N, D): the anchors with GQA
# 32/8 (harness.ANCHOR_SHAPES) and their 4k row for short GPU slots.
GRIDS = {"anchors": list(harness.ANCHOR_SHAPES), "probe": list(harness.PROBE_SHAPES)}
# The anchors without GQA as (B, H, N, D): the shapes of the config-grid scripts (gpu_check*.py).
MHA_ANCHORS = tuple((b, hq, n, d) for b, hq, hkv, n, d in harness.ANCHOR_SHAPES if hq == hkv)


def error_text(exc: BaseException, limit: int = 300) -> str:
    """'Type: message', cut to `limit` characters: how a failed case is recorded in a result."""
    return f"{type(exc).__name__}: {exc}"[:limit]


def inputs(b, hq, hkv, sq, sk, d, *, dtype="bfloat16", device="cuda", seed=0, draw="device",
           count=4):  # fmt: skip
    """[q, k, v, do][:count]: q and do [b, hq, sq, d], k and v [b, hkv, sk, d], standard normal,
    drawn in float32 from a generator seeded with `seed` and cast to `dtype`. `draw` = "cpu"
    draws on the CPU and then moves them (the numbers do not depend on the GPU's generator, at
    the cost of a host pass); "device" draws where they live (no host pass over a GB at 16k)."""
    import torch

    where = "cpu" if draw == "cpu" else device
    gen = torch.Generator(device=where).manual_seed(seed)
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    shapes = ((b, hq, sq, d), (b, hkv, sk, d), (b, hkv, sk, d), (b, hq, sq, d))[:count]
    return [torch.randn(*s, generator=gen, device=where).to(device).to(dtype) for s in shapes]


def timer(device: str = "cuda", rep_ms: int = 40, *, warmup_ms: int | None = None,
          repeats: int = 1):  # fmt: skip
    """A timer fn(callable, grad_to_none=None) -> ms. On "cuda": do_bench's median (`rep_ms`
    of runs after `warmup_ms`, L2 flushed), the median of `repeats` readings; elsewhere the
    median wall time of `repeats` (at least 3) calls, for CPU smoke runs and tests."""
    if device == "cuda":
        return harness.gpu_timer(rep_ms, repeats=repeats, warmup_ms=warmup_ms)
    wall = harness.wall_timer(max(3, repeats))

    def cpu(fn, grad_to_none=None) -> float:
        def run():
            for t in grad_to_none or ():
                t.grad = None
            return fn()

        return wall(run)

    return cpu


def attempt(time_fn, fn, **kwargs) -> tuple[float | None, str | None]:
    """(ms, None) when `time_fn(fn, **kwargs)` measured it, (None, error text) when it raised."""
    try:
        return time_fn(fn, **kwargs), None
    except Exception as exc:  # a config out of resources, an input a backend refuses
        return None, error_text(exc)


def fwd_bwd(fn, leaves, grad=None):
    """A callable running `fn()` and its backward with `grad` (default: random, shaped like
    fn's output, drawn once here), first resetting the .grad of `leaves` so that nothing
    accumulates from one timed run to the next."""
    import torch

    if grad is None:
        with torch.no_grad():
            grad = torch.randn_like(fn())

    def run():
        for t in leaves:
            t.grad = None
        fn().backward(grad)

    return run


def tflops(flops: float, ms: float | None, ndigits: int = 1) -> float | None:
    """TFLOP/s of `flops` done in `ms`, rounded; None when there is no time."""
    value = harness.tflops(flops, ms)
    return None if value is None else round(value, ndigits)


def sdpa_fwd_bwd(impl: str, q, k, v, do, *, causal: bool, scale: float | None = None):
    """(fn, leaves): fn runs `impl`'s forward and backward once on fresh leaf copies of q, k, v
    (`leaves`, to pass as grad_to_none so the gradients are not accumulated between runs)."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]

    def run():
        harness.sdpa(impl, *leaves, causal=causal, scale=scale).backward(do)

    return run, leaves


def sdpa_baselines(q, k, v, *, causal: bool, time_fn, impls=("sdpa_cudnn", "sdpa_flash"),
                   do=None, scale: float | None = None) -> dict:  # fmt: skip
    """{impl: ms or error text} for each SDPA backend in `impls`, restricted with `sdpa_kernel`:
    the forward alone, or forward + backward when `do` is given. A backend that does not accept
    the input ("No available kernel", an unsupported head dim) gives its error text."""
    import torch

    out = {}
    for impl in impls:
        if do is None:

            def fn(impl=impl):
                with torch.no_grad():
                    return harness.sdpa(impl, q, k, v, causal=causal, scale=scale)

            ms, err = attempt(time_fn, fn)
        else:
            fn, leaves = sdpa_fwd_bwd(impl, q, k, v, do, causal=causal, scale=scale)
            ms, err = attempt(time_fn, fn, grad_to_none=leaves)
            del leaves
        out[impl] = ms if err is None else err
    return out


def banner(meta: dict) -> str:
    """One line naming the GPU, torch and triton of `run_meta`, printed as a log's first line."""
    return f"{meta['gpu']} torch {meta['torch']} triton {meta['triton']} commit {meta['commit']}"


def entry(ms, flops: float, prefix: str = "") -> dict:
    """A timing as a result entry: {prefix+"ms", prefix+"tflops"}, or {"error"} when `ms` is the
    error text of a case that failed (as `sdpa_baselines` and `attempt` give them)."""
    if isinstance(ms, str):
        return {"error": ms}
    return {f"{prefix}ms": ms, f"{prefix}tflops": tflops(flops, ms)}


def ratio_text(ours, theirs) -> str:
    """ours / theirs to two decimals for a table, "-" when either is missing."""
    return f"{ours / theirs:.2f}" if ours and theirs else "-"


def grid_header(config: str, middle: str = "", tail: str = "") -> str:
    """The config-grid scripts' table header (see `grid_line`)."""
    head = f"{'shape':<22}{'causal':<8}{'flashgen':>9}{config:>20}"
    return f"{head}{middle}{'cuDNN':>8}{'FLASH':>8}{'ratio':>7}{tail}"


def grid_line(r: dict, key: str, middle: str = "", tail: str = "") -> str:
    """One line of the config-grid scripts' table (gpu_check*.py): shape, causal, the best
    config's `key` figure and the config, `middle`, cuDNN's and FLASH's, ours/cuDNN, `tail`."""
    best = r.get("best", {})
    ours = best.get(key)
    cudnn, flash = (r[name].get(key) for name in ("sdpa_cudnn", "sdpa_flash"))
    head = f"{shape_label(*r['shape'].values()):<22}{r['causal']!s:<8}{ours or '-':>9}"
    sdpa = f"{cudnn or '-':>8}{flash or '-':>8}{ratio_text(ours, cudnn):>7}"
    return f"{head}{str(tuple(best.get('cfg', ()))):>20}{middle}{sdpa}{tail}"


def shape_label(b, h, n, d) -> str:
    return f"B{b} H{h} N{n} D{d}"


def within(start: float, budget_s: float) -> bool:
    """True while fewer than `budget_s` seconds have passed since `start` (time.time())."""
    return time.time() - start <= budget_s


# -- compile pools: kernels compile in spawned workers, the main process times them -------------


def pool(workers: int | None = None, **kwargs):
    """A ProcessPoolExecutor of `workers` spawned processes (default: the cores less two, at
    most 12), so that compiling and checking run in parallel and a broken CUDA context stays in
    its worker; the main process then times from Triton's on-disk cache."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    workers = workers or max(1, min(12, (os.cpu_count() or 2) - 2))
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), **kwargs)


def warm_and_check(workers: int, warm, jobs, check, cases) -> tuple[dict, list]:
    """Compile `jobs` (warm(job) -> error text, or None when it compiled and launched) and run the
    correctness `cases` (check(case) -> result dict) in one pool, side by side:
    ({repr(job): error text}, [check results in the order of `cases`])."""
    with pool(workers) as workers_pool:
        warm_futs = [(job, workers_pool.submit(warm, job)) for job in jobs]
        check_futs = [workers_pool.submit(check, case) for case in cases]
        checks = [f.result() for f in check_futs]
        errors = {repr(job): err for job, f in warm_futs if (err := f.result())}
    return errors, checks


def config_verdict(
    report: dict, checks: list, warm: list, where, detail
) -> tuple[list, list, dict]:
    """What the config-grid scripts (gpu_check.py, gpu_check_bwd.py) make of their checks and
    per-config warm-ups (dicts with d, causal, cfg, status ok|oor|wrong|error): stored in
    `report`, counted and the first 20 failures printed (`where` keys name a case, detail(case)
    says what failed); returns (failed checks, wrong configs, {(d, causal): [usable cfg, ...]})."""
    failed = [c for c in checks if not c["ok"]]
    wrong = [w for w in warm if w["status"] in ("wrong", "error")]
    report.update(checks=checks, checks_failed=len(failed), configs=warm, configs_wrong=len(wrong))
    n_ok = sum(w["status"] == "ok" for w in warm)
    n_oor = sum(w["status"] == "oor" for w in warm)
    print(f"correctness: {len(checks) - len(failed)}/{len(checks)} cases ok")
    print(f"configs: {n_ok} ok, {n_oor} out of resources, {len(wrong)} wrong or failing")
    print(f"compile + checks: {report.get('compile_and_check_s')} s", flush=True)
    for c in failed[:20]:
        print("  FAILED", {k: c.get(k) for k in where}, detail(c))
    for w in wrong[:20]:
        print("  CONFIG", w["d"], w["causal"], w["cfg"], w["status"], w.get("error", ""))
    usable: dict = {}
    for w in warm:
        if w["status"] == "ok":
            usable.setdefault((w["d"], w["causal"]), []).append(w["cfg"])
    return failed, wrong, usable


# -- command line -----------------------------------------------------------------------------


def parser(doc: str | None, *, out: str | None = None, budget: float | None = None,
           checks: bool = False, speed: bool = False, **kwargs) -> argparse.ArgumentParser:  # fmt: skip
    """An ArgumentParser whose --help prints the script's docstring as written, with the flags
    the GPU scripts share when asked for: --out (default `out`), --budget SECONDS (default
    `budget`), --no-check, --no-speed."""
    kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
    ap = argparse.ArgumentParser(description=doc, **kwargs)
    if out is not None:
        ap.add_argument("--out", default=out, help=f"where the results go (default: {out})")
    if budget is not None:
        ap.add_argument("--budget", type=float, default=budget,
                        help="seconds for the whole run: no new case starts after them")  # fmt: skip
    if checks:
        ap.add_argument("--no-check", action="store_true", help="skip the correctness checks")
    if speed:
        ap.add_argument("--no-speed", action="store_true", help="skip the timings")
    return ap


def out_path(given: str | None, name: str) -> str:
    """Where a result goes: `given` if it is a file name, `given`/`name` if it is a directory,
    else $OUT/`name`, else ./`name` (the device tool collects $OUT)."""
    from .report import out_file

    return out_file(given, name)


# -- result files -----------------------------------------------------------------------------


def run_meta(device: str = "cuda", **extra) -> dict:
    """`harness.run_meta` (GPU, torch, triton, flashgen, commit, date, command) plus `extra`."""
    meta = harness.run_meta(device)
    meta.update(extra)
    return meta


def result_doc(device: str = "cuda", **fields) -> dict:
    """The head of a grid script's JSON document: `started` (UTC), `env` (gpu, torch, triton),
    `meta` (`run_meta`), then `fields` (rows, checks, ... filled in as the run goes)."""
    meta = run_meta(device)
    env = {key: meta[key] for key in ("gpu", "torch", "triton")}
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    return dict(started=started, env=env, meta=meta, **fields)


def save_json(path: str, doc, *, indent: int = 1) -> None:
    """Write `doc` whole (a temporary file renamed over `path`): scripts rewrite their JSON after
    every measured case, so that a run cut off by its time limit keeps what it measured."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(doc, fh, indent=indent, default=str)
    os.replace(tmp, path)


def meta_path(path: str) -> str:
    """The file beside a CSV that holds its run's metadata: x.csv -> x.meta.json."""
    root, _ = os.path.splitext(path)
    return root + ".meta.json"


class RowWriter:
    """Rows of one table, written as they come: CSV (header once; `append` keeps an existing
    file's rows) or JSON lines, each flushed, so a cut run keeps its rows. The run's metadata
    goes beside a CSV (`meta_path`: {"runs": [meta, ...]}, one entry per run that wrote rows
    into the file, in order), or as a {"meta": ...} line before a JSON lines file's rows."""

    def __init__(self, path: str, fields, *, meta: dict | None = None, append: bool = False):
        self.path, self.fields = path, list(fields)
        self.jsonl = path.endswith(".jsonl")
        existed = append and os.path.exists(path) and os.path.getsize(path) > 0
        self._fh = open(path, "a" if append else "w", newline="")  # noqa: SIM115 (closed in close)
        self._csv = None
        if not self.jsonl:
            self._csv = csv.DictWriter(self._fh, self.fields)
            if not existed:
                self._csv.writeheader()
        if meta is not None:
            if self.jsonl:
                self._fh.write(json.dumps({"meta": meta}, default=str) + "\n")
            else:
                runs = []
                if existed and os.path.exists(meta_path(path)):
                    with open(meta_path(path)) as fh:
                        runs = json.load(fh).get("runs", [])
                save_json(meta_path(path), {"runs": [*runs, meta]})
        self._fh.flush()

    def write(self, row: dict) -> dict:
        """Write one row (keys outside `fields` are an error: a column nobody reads back)."""
        extra = set(row) - set(self.fields)
        if extra:
            raise ValueError(f"fields not in the table: {sorted(extra)}")
        if self.jsonl:
            self._fh.write(json.dumps({f: row.get(f) for f in self.fields}, default=str) + "\n")
        else:
            self._csv.writerow(row)
        self._fh.flush()
        return row

    def close(self) -> None:
        self._fh.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
