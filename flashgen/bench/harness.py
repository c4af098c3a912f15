"""What every attention benchmark shares: cases, inputs, the implementations, checks, timing, rows.

One benchmark row is one (case, mode, implementation) with its time, TFLOP/s and check result
(`Row`); `flashgen bench`, the scripts in benchmarks/ and the examples all build rows here, so a
figure means the same thing wherever it was printed.

Implementations (`IMPLS`): `flashgen` (flashgen's own kernels through `flashgen.attention(...,
impl="flashgen")`, configs from the tuning database's records), `op` (the public op's own choice
between flashgen and the SDPA backends), each SDPA backend restricted with `sdpa_kernel`
(`sdpa_cudnn`, `sdpa_flash`, `sdpa_efficient`, `sdpa_math`) and `flex` (FlexAttention under
`torch.compile`, with a block mask when causal; Dynamo is reset before each case so that one
case's graphs and guards do not leak into the next). An SDPA backend's name with `AGAIN`
appended (`sdpa_cudnn_again`) runs that backend once more as a row of its own: an A/A control,
whose ratio to the backend's own row is the spread of identical kernels in that run. A backend
that refuses a case (an SDPA backend's "no kernel", FlexAttention on an unsupported input) is
recorded as skipped with the reason, never as a failure of the run.

Modes: `fwd` (forward without autograd), `bwd` (the backward alone: autograd.grad of a forward
run once outside the timed region, with retain_graph), `fwd_bwd` (forward + backward).
FLOPs: forward 4 B Hq Sq Sk D (halved when causal and Sq == Sk), backward 2.5x that,
forward + backward 3.5x: the counts FlashAttention's papers use, so TFLOP/s compare across
implementations and with published figures.

Checks: every timed implementation's output (and dQ, dK, dV for modes with a backward) is
compared with a float64 reference computed in query-row chunks on the same device, on the first
batch element and the first K/V head's query group (attention is independent across batch and
K/V heads, so that slice is checked exactly and the reference stays small at 16k tokens). The
error is max |got - ref| / max |ref| per tensor; the bound depends on the dtype (`TOLERANCE`;
both in `flashgen.bench.checks`).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass, field

from .checks import check, reference

IMPLS = ("flashgen", "op", "sdpa_cudnn", "sdpa_flash", "sdpa_efficient", "sdpa_math", "flex")
# The suffix of an SDPA backend timed twice (module docstring: the A/A control).
AGAIN = "_again"
DEFAULT_IMPLS = ("flashgen", "sdpa_cudnn", "sdpa_flash", "sdpa_efficient", "sdpa_math", "flex")
MODES = ("fwd", "bwd", "fwd_bwd")
DTYPES = ("bfloat16", "float16", "float32")
_SDPA_BACKENDS = {
    "sdpa_cudnn": "CUDNN_ATTENTION",
    "sdpa_flash": "FLASH_ATTENTION",
    "sdpa_efficient": "EFFICIENT_ATTENTION",
    "sdpa_math": "MATH",
}


@dataclass(frozen=True)
class Case:
    """One attention problem: q [batch, hq, seq, head_dim], k/v [batch, hkv, seq, head_dim]."""

    batch: int
    hq: int
    hkv: int
    seq: int
    head_dim: int
    causal: bool
    dtype: str = "bfloat16"

    def __post_init__(self):
        for name in ("batch", "hq", "hkv", "seq", "head_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.hq % self.hkv:
            raise ValueError(f"hq ({self.hq}) must be a multiple of hkv ({self.hkv})")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")

    def label(self) -> str:
        gqa = f"{self.hq}" if self.hq == self.hkv else f"{self.hq}/{self.hkv}"
        mask = "causal" if self.causal else "full"
        return f"B{self.batch} H{gqa} N{self.seq} D{self.head_dim} {mask} {self.dtype}"

    def flops(self, mode: str) -> float:
        return attention_flops(self.batch, self.hq, self.seq, self.seq, self.head_dim,
                               self.causal, mode)  # fmt: skip


def attention_flops(batch, hq, sq, sk, head_dim, causal: bool, mode: str = "fwd") -> float:
    """The FLOP count every figure here is quoted in (see the module docstring): 4 B H Sq Sk D
    for the forward, halved when causal and Sq == Sk, times 2.5 (backward) or 3.5 (both)."""
    fwd = 4.0 * batch * hq * sq * sk * head_dim / (2 if causal and sq == sk else 1)
    return fwd * {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}[mode]


def tflops(flops: float, ms: float | None) -> float | None:
    return None if not ms else flops / (ms * 1e-3) / 1e12


def sdpa(impl: str, q, k, v, *, causal: bool, scale: float | None = None):
    """`F.scaled_dot_product_attention` on exactly the backend `impl` names (sdpa_cudnn,
    sdpa_flash, sdpa_efficient, sdpa_math); RuntimeError when it refuses the input. GQA through
    `enable_gqa`."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    with sdpa_kernel([getattr(SDPBackend, _SDPA_BACKENDS[impl])]):
        return scaled_dot_product_attention(
            q, k, v, is_causal=causal, scale=scale, enable_gqa=q.shape[1] != k.shape[1]
        )


@dataclass
class Row:
    """One measurement: a case, a mode, an implementation; ms and tflops are None when the
    implementation was skipped (`note` says why) or its check failed to run."""

    case: Case
    mode: str
    impl: str
    ms: float | None = None
    tflops: float | None = None
    ok: bool | None = None  # the check's verdict; None: not checked (skipped)
    errors: dict = field(default_factory=dict)  # tensor name -> relative error
    note: str = ""
    # each round's reading (ms), in round order: the rounds interleave the impls, so two impls'
    # readings of one round were taken moments apart (paired ratios cancel the GPU's drift)
    readings: list = field(default_factory=list)

    def flat(self) -> dict:
        """The row as one flat dict (the CSV and JSON format)."""
        out = asdict(self.case)
        out.update(mode=self.mode, impl=self.impl, ms=self.ms, tflops=self.tflops, ok=self.ok)
        out["max_rel_err"] = max(self.errors.values()) if self.errors else None
        out["note"] = self.note
        return out


# The GPU scripts' grid (benchmarks/vendor_grid.py, bwd_kinds.py, hopper_bwd.py), as (batch,
# q heads, kv heads, seq, head dim): head dims 128 and 64 at 1k/4k/16k tokens a sequence with
# 16k tokens a batch, and GQA 32/8; `PROBE_SHAPES` is its 4k row, for short GPU slots.
ANCHOR_SHAPES = tuple(
    (16384 // n, hq, hkv, n, d)
    for hq, hkv, d in ((16, 16, 128), (32, 32, 64), (32, 8, 128))
    for n in (1024, 4096, 16384)
)
PROBE_SHAPES = tuple(s for s in ANCHOR_SHAPES if s[3] == 4096)


def case_grid(*, head_dims, seqs, causal, dtypes, heads, batch_tokens: int) -> list[Case]:
    """The cross product of the flags; batch = max(1, batch_tokens // seq) so every length
    does about the same work (the usual way attention benchmarks keep short lengths busy)."""
    cases = []
    for dtype in dtypes:
        for hq, hkv in heads:
            for d in head_dims:
                for c in causal:
                    for n in seqs:
                        cases.append(Case(max(1, batch_tokens // n), hq, hkv, n, d, c, dtype))
    return cases


def make_inputs(case: Case, device: str, seed: int = 0):
    """(q, k, v, do) in the case's dtype, drawn in float32 from a seeded generator."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, case.dtype)

    def rand(heads):
        shape = (case.batch, heads, case.seq, case.head_dim)
        return torch.randn(shape, generator=gen, device=device).to(dtype)

    return rand(case.hq), rand(case.hkv), rand(case.hkv), rand(case.hq)


def attention_fn(impl: str, case: Case):
    """A function (q, k, v) -> out running `impl` on `case`'s kind of input."""
    import torch

    scale = 1.0 / math.sqrt(case.head_dim)
    gqa = case.hq != case.hkv
    if impl.endswith(AGAIN) and impl.removesuffix(AGAIN) in _SDPA_BACKENDS:
        return attention_fn(impl.removesuffix(AGAIN), case)
    if impl in _SDPA_BACKENDS:

        def call(q, k, v):
            return sdpa(impl, q, k, v, causal=case.causal, scale=scale)

        return call
    if impl == "flex":
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        torch._dynamo.reset()
        compiled = torch.compile(flex_attention, dynamic=False)
        mask = None
        if case.causal:
            mask = create_block_mask(
                lambda b, h, q_idx, kv_idx: q_idx >= kv_idx,
                None,
                None,
                case.seq,
                case.seq,
                device=_device_of(),
            )

        def call(q, k, v):
            return compiled(q, k, v, block_mask=mask, scale=scale, enable_gqa=gqa)

        return call
    if impl in ("flashgen", "op"):
        from ..ops import attention

        chosen = "flashgen" if impl == "flashgen" else None

        def call(q, k, v):
            return attention(q, k, v, causal=case.causal, scale=scale, impl=chosen)

        return call
    raise ValueError(f"impl must be one of {', '.join(IMPLS)}, got {impl!r}")


def _device_of() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def runner(impl: str, case: Case, mode: str, inputs):
    """(callable for the timer, what to check): the callable runs `mode` once; the check
    tuple is (out, dq, dk, dv) from one untimed run (grads None for `fwd`)."""
    import torch

    q, k, v, do = inputs
    fn = attention_fn(impl, case)
    if mode == "fwd":
        with torch.no_grad():
            out = fn(q, k, v)

        def run():
            with torch.no_grad():
                return fn(q, k, v)

        return run, (out, None, None, None)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = fn(*leaves)
    grads = torch.autograd.grad(out, leaves, do, retain_graph=True)
    if mode == "bwd":

        def run():
            return torch.autograd.grad(out, leaves, do, retain_graph=True)

    else:

        def run():
            return torch.autograd.grad(fn(*leaves), leaves, do)

    return run, (out.detach(), *grads)


def gpu_timer(rep_ms: int = 40, repeats: int = 1, warmup_ms: int | None = None):
    """A timer: triton.testing.do_bench's median in ms (L2 flushed between runs); with
    `repeats` > 1 the median of that many such readings. The one timing rule of every GPU
    benchmark here, so their figures compare. `grad_to_none`: tensors whose .grad is reset
    before each run (a backward that accumulates into .grad)."""

    def timer(fn, grad_to_none=None) -> float:
        import triton.testing

        warm = max(1, rep_ms // 4) if warmup_ms is None else warmup_ms
        readings = [
            triton.testing.do_bench(
                fn, warmup=warm, rep=rep_ms, grad_to_none=grad_to_none, return_mode="median"
            )  # fmt: skip
            for _ in range(repeats)
        ]
        return statistics.median(readings)

    return timer


def wall_timer(repeats: int = 3):
    """A timer for the CPU interpreter (no CUDA events): median wall time of a few calls."""

    def timer(fn) -> float:
        fn()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
        return statistics.median(times)

    return timer


def host_us(fn, *, calls: int, rounds: int, sync, warmup: int = 1) -> float:
    """Host time of one call of `fn`, µs: `calls` back-to-back calls timed without a
    synchronisation, the median of `rounds` such rounds, after `warmup` calls. `sync` waits for
    the device (a no-op on the CPU). Where a call is launch-bound, this is what its time is
    made of (host_steps.py, alibi_decode.py)."""
    for _ in range(warmup):
        fn()
    sync()
    readings = []
    for _ in range(rounds):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        readings.append((time.perf_counter() - start) / calls * 1e6)
    sync()
    return statistics.median(readings)


def identity_node():
    """A trivial `torch.autograd.Function` (forward a view of its input, backward the gradient
    as it comes): the cost any Python autograd node pays in the engine, beside which the
    host-time scripts (host_steps.py, bwd_thread.py) read flashgen's own node. A new class a
    call, so a script that wraps its backward (bwd_thread.py's spans) wraps its own."""
    import torch

    class Identity(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, g):
            return g

    return Identity


SMOKE_HELP = (
    "without a GPU: tiny sizes, float32, Triton's interpreter, AOTAutograd run eagerly instead "
    "of Inductor's code generation (checks this script; the figures mean nothing)"
)


def backend_script_args(ap, *, rounds: int, rep: int) -> None:
    """The options the backend-vs-Inductor scripts share (hf_padded.py, llama_block.py,
    transformer_masks.py, alibi_decode.py): --rounds (alternating readings, `alternate`),
    --rep (do_bench ms a reading), --out (the JSON report) and --smoke (`SMOKE_HELP`)."""
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--rep", type=int, default=rep, help="do_bench rep in ms per reading")
    ap.add_argument("--out", default=None)
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)


def gpu_or_smoke(smoke: bool) -> bool | None:
    """For a GPU benchmark script with a `--smoke` option (`SMOKE_HELP`): True with CUDA, False
    for a smoke run on the CPU (Triton's interpreter switched on), None (after saying why on
    stderr) when there is neither: the script then exits with status 2."""
    import os
    import sys

    import torch

    if torch.cuda.is_available():
        return True
    if not smoke:
        print("needs a CUDA GPU (--smoke checks the script on the CPU)", file=sys.stderr)
        return None
    os.environ.setdefault("TRITON_INTERPRET", "1")
    return False


def alternate(runs: dict, modes: dict, timer, rounds: int) -> dict:
    """Time `modes[mode](runs[name])` (a callable made per run) for every mode and run, in
    turn, for `rounds` rounds: a slow period of the host or the GPU falls on every run alike
    instead of on whichever ran then. Returns the readings, the median of each (mode, name)
    ("ms"), and per mode the first run's median over each other run's ("ratio": > 1, the
    other is faster) with the median of the rounds' back-to-back ratios ("paired"), which
    cancels what moves both. Each callable runs once before the timing (compiles, caches)."""
    made = {(mode, name): make(fn) for mode, make in modes.items() for name, fn in runs.items()}
    for call in made.values():
        call()
    readings: dict = {key: [] for key in made}
    for _ in range(rounds):
        for key, call in made.items():
            readings[key].append(timer(call))
    ms = {key: statistics.median(values) for key, values in readings.items()}
    first, *others = runs
    ratio, paired = {}, {}
    for mode in modes:
        for name in others:
            base, it = readings[mode, first], readings[mode, name]
            ratio[mode, name] = ms[mode, first] / ms[mode, name]
            pairs = zip(base, it, strict=True)
            paired[mode, name] = statistics.median(a / b for a, b in pairs)
    return {"readings": readings, "ms": ms, "ratio": ratio, "paired": paired}


def backend_pair(model, cuda: bool, cudagraphs: bool = False) -> dict:
    """{"inductor": ..., "flashgen": ...}: `model` under torch.compile with Inductor and with
    flashgen's backend (its fallback Inductor); on the CPU (a smoke run) AOTAutograd run
    eagerly instead, since Inductor's code generation is not what such a run checks.
    `cudagraphs` (CUDA only): both run their graphs as CUDA graphs, Inductor through
    mode="reduce-overhead" and flashgen through `backend(cudagraphs=True)` (the same Inductor
    setting), for models whose host work outlasts their kernels."""
    import torch

    import flashgen

    if cudagraphs and cuda:
        return {
            "inductor": torch.compile(model, mode="reduce-overhead"),
            "flashgen": torch.compile(model, backend=flashgen.backend(cudagraphs=True)),
        }
    return {
        "inductor": torch.compile(model, backend="inductor" if cuda else "aot_eager"),
        "flashgen": torch.compile(
            model, backend=flashgen.backend(fallback="inductor" if cuda else "eager")
        ),
    }


def print_backend_ratios(report: dict, timed: dict, modes, rounds: int) -> None:
    """For the scripts that time a model compiled by Inductor against flashgen's backend
    (`alternate`'s `timed`, runs "inductor" then "flashgen"): the readings into report["ms"],
    each mode's ratio (Inductor's median over flashgen's) and paired ratio (the median of the
    rounds' back-to-back ratios, which cancels the host's slow and fast periods) into
    report[mode + "_ratio"] / [mode + "_paired_ratio"], and a line a mode printed."""
    report["ms"] = {f"{mode} {name}": values for (mode, name), values in timed["readings"].items()}
    for mode in modes:
        ind, ours = timed["ms"][mode, "inductor"], timed["ms"][mode, "flashgen"]
        report[f"{mode}_ratio"] = timed["ratio"][mode, "flashgen"]
        paired = report[f"{mode}_paired_ratio"] = timed["paired"][mode, "flashgen"]
        print(
            f"{mode:<8} inductor {ind:.4f} ms  flashgen {ours:.4f} ms  ratio {ind / ours:.3f}x "
            f"(median of {rounds} alternating do_bench readings); median of the rounds' "
            f"ratios {paired:.3f}x"
        )


def report_backends(report: dict, runs: dict, modes: dict, timer, rounds: int, out=None) -> int:
    """The end the scripts comparing a model compiled by Inductor and by flashgen's backend
    share (`backend_pair`: hf_padded.py, llama_block.py, transformer_masks.py): `modes` timed
    in turn (`alternate`), the ratios printed (`print_backend_ratios`), then the check line
    (the report's ok, replaced, kept where it has one, err), the compile times and
    `flashgen.explain`'s table, and the report written to `out` as JSON. Returns the exit
    status: 0 when report["ok"]."""
    import json
    from pathlib import Path

    timed = alternate(runs, modes, timer, rounds)
    print_backend_ratios(report, timed, modes, rounds)
    kept = f" kept={report['kept']}" if "kept" in report else ""
    print(f"check ok={report['ok']} replaced={report['replaced']}{kept} err={report['err']}")
    print(f"compile s: {report['compile_s']}")
    print(report["explain"])
    if "explain_train" in report:  # (transformer_masks.py: the timed graphs in training mode)
        print("in training mode (timed):")
        print(report["explain_train"])
    if out:
        Path(out).write_text(json.dumps(report, indent=1) + "\n")
    return 0 if report["ok"] else 1


def rel_err(got, want) -> float:
    """Max abs error over the reference's max abs value."""
    return ((got.float() - want).abs().max() / want.abs().max()).item()


def bench_case(case: Case, modes, impls, *, device: str, timer, rounds: int = 2,
               on_row=None) -> list[Row]:  # fmt: skip
    """Every (mode, impl) of one case, checked and timed; interleaved over `rounds` rounds
    (median of the rounds; every other round in reverse order) so that neither a slow moment
    of the GPU nor a place in the round falls on one impl."""
    import torch

    if "flex" in impls:
        torch._dynamo.reset()  # each case starts from fresh graphs and guards
    inputs = make_inputs(case, device)
    rows = []
    for mode in modes:
        ref = reference(case, inputs, backward=mode != "fwd")
        runners = {}
        for impl in impls:
            row = Row(case, mode, impl)
            try:
                fn, got = runner(impl, case, mode, inputs)
            except Exception as exc:  # a backend that refuses this case: skipped, with why
                row.note = _reason(exc)
                rows.append(row)
                continue
            row.ok, row.errors = check(case, got, ref)
            del got
            runners[impl] = (fn, row)
            rows.append(row)
        readings: dict[str, list[float]] = {impl: [] for impl in runners}
        for i in range(max(1, rounds)):
            # every other round in reverse order: with one fixed order an impl always runs
            # first (right after the round before's last, slowest backend) or last, and any
            # effect of that place on a GPU under its power cap would fall on it alone
            order = list(runners.items())
            for impl, (fn, _row) in order[:: -1 if i % 2 else 1]:
                try:
                    readings[impl].append(timer(fn))
                except Exception as exc:
                    _row.note = _reason(exc)
        for impl, (_fn, row) in runners.items():
            if readings[impl] and not row.note:
                row.readings = readings[impl]
                row.ms = statistics.median(readings[impl])
                row.tflops = tflops(case.flops(mode), row.ms)
        runners.clear()
        if on_row is not None:
            for row in rows:
                if row.mode == mode:
                    on_row(row)
    del inputs
    if device == "cuda":
        torch.cuda.empty_cache()
    return rows


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:200]


def fastest_other(rows: list[Row], row: Row) -> Row | None:
    """The fastest row of the same case and mode with another implementation."""
    others = [
        r for r in rows
        if r.case == row.case and r.mode == row.mode and r.impl != row.impl and r.ms is not None
    ]  # fmt: skip
    return min(others, key=lambda r: r.ms) if others else None


def commit() -> str:
    """FLASHGEN_COMMIT when set (a copied tree outside its checkout), else git's HEAD, else '?'."""
    import os
    import subprocess

    value = os.environ.get("FLASHGEN_COMMIT", "")
    if not value:
        try:
            value = subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                timeout=5, cwd=os.path.dirname(os.path.abspath(__file__)),
            ).stdout.strip()  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            value = ""
    return value or "?"


def run_meta(device: str) -> dict:
    """Where and with what a run was made: GPU, versions, commit, time, command line."""
    import datetime
    import os
    import platform
    import sys

    import torch
    import triton

    from ..core.version import VERSION

    gpu = torch.cuda.get_device_name(0) if device == "cuda" else f"cpu ({platform.machine()})"
    return {
        "gpu": gpu,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "flashgen": VERSION,
        "commit": commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(sys.argv),
        "interpreter": os.environ.get("TRITON_INTERPRET") == "1",
    }
