"""Check the shared-memory model (flashgen.hardware.sram) against the real Triton compiler, no GPU needed.

Triton compiles ahead of time for any CUDA target on a CPU machine and reports the shared memory
a kernel will ask for (`.metadata.shared`). This script renders the real generated kernels,
compiles them for sm_90 / sm_80 / sm_86 and compares the bytes with `flashgen.hardware.sram`, and
`fits()` with "compiler bytes <= the target GPU's opt-in limit":

- false admit: the model says it fits, the compiler needs more than the limit (must be 0);
- false reject: the model says it does not fit, the compiler's bytes are within the limit
  (must be <= 5% of the configs that really fit).

Sampling (compiles cost 1-3 s forward, 4-12 s backward, on 2 shared cores): per (target,
direction, head dim) the space is `space.candidates`; every config whose modelled bytes lie
within [0.8, 1.25] x the limit is compiled (that band is where admits and rejects are decided;
capped at --band-cap per cell, nearest the limit first), plus --per-cell others drawn with a fixed
seed. Each config is compiled for one of the four (dtype, causal) variants of its head dim,
picked by a fixed hash (bytes do not depend on them: --spot-check compiles a few configs in all
four variants to show it). Results are cached in <out>/cache.json keyed by Triton version,
target, kernel uri, config and template hash, so reruns only compile what is new, and rows of
every Triton version in the cache are reported.

Usage (repo root, CPU machine; the interpreter must be off for AOT compiles):
    env -u TRITON_INTERPRET PYTHONPATH=. .venv/bin/python benchmarks/sram_vs_compiler.py \
        --targets 90 80 86 --jobs 2 --out benchmarks/sram_results
    env -u TRITON_INTERPRET PYTHONPATH=. .venv36/bin/python benchmarks/sram_vs_compiler.py ...
    .venv/bin/python benchmarks/sram_vs_compiler.py --report-only --out benchmarks/sram_results
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import random
import subprocess
import sys
import time
import zlib
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

# appended: a tree on PYTHONPATH (an A/B's old tree) comes first
sys.path.append(str(Path(__file__).resolve().parent.parent))

from flashgen.core.config import TileConfig  # noqa: E402
from flashgen.core.paths import templates_dir  # noqa: E402
from flashgen.core.spec import KernelSpec  # noqa: E402
from flashgen.hardware import sram
from flashgen.hardware import tiles as space  # noqa: E402
from flashgen.hardware.dq_tiles import dq_config  # noqa: E402

# Target capability -> the KNOWN_GPUS entry whose limit it is judged against.
TARGET_DEVICE = {90: "nvidia-h200", 80: "nvidia-a100", 86: "nvidia-a10", 89: "nvidia-l4"}
# "onepass" stands for the backward kind of that name (bwd specs, the one-pass template,
# sram.kernel_bytes(..., kind="onepass")); "bwd" is the split kind.
KERNELS = {
    "fwd": ("attn_fwd",),
    "bwd": ("attn_bwd_dkdv", "attn_bwd_dq"),
    "onepass": ("attn_bwd_onepass",),
}
# flashgen.kernels.fwd runs the TMA kernel on Hopper and newer when the tensors allow it, the pointer
# kernel otherwise: both must fit there.
HOPPER_EXTRA = {
    "fwd": ("attn_fwd_tma",),
    "bwd": ("attn_bwd_dkdv_tma", "attn_bwd_dq_tma"),
    "onepass": ("attn_bwd_onepass_tma",),
}
ONEPASS_MAX_D = 128  # flashgen.kernels.bwd runs the one-pass kind up to this head dim
TEMPLATES = {"fwd": "attn_fwd", "bwd": "attn_bwd", "onepass": "attn_bwd_onepass"}
HEAD_DIMS = (64, 128, 256)
VARIANTS = (("float16", False), ("float16", True), ("bfloat16", False), ("bfloat16", True))
FLOAT_ARGS = {"qk_scale", "scale", "sm_scale", "softcap_raw", "SOFTCAP_RAW", "drop_p"}
POINTERS = {"Q", "K", "V", "O", "Out", "DO", "DQ", "DK", "DV"}
FP32_POINTERS = {"Lse", "LSE", "Delta", "DQAcc"}
_TRITON_DTYPE = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
BAND = (0.8, 1.25)
BOUNDARY = 8192  # bytes above the limit within which a false reject is possible (max over-estimate)


def _arg_kind(name: str, dtype: str, cfg: TileConfig, block_d: int, mask: str = "") -> str:
    """Triton signature type of one kernel argument, from the signatures the templates document
    in their headers: 4-D TMA descriptors (desc_*: [1, 1, rows, BLOCK_D] blocks), the named
    pointers (a mask tensor's: bytes for `mask` "bool", the inputs' dtype for "add"; the int32
    SeqBounds and block-sparse lists), the fp32 scale, the BLOCK_* / MASK_* constexprs, else
    int32."""
    if name == "desc_dqacc":  # the one-pass backward's fp32 dQ accumulator
        return f"tensordesc<fp32[1, 1, {cfg.block_m}, {block_d}]>"
    if name.startswith("desc_"):
        rows = cfg.block_m if name in ("desc_q", "desc_o", "desc_do") else cfg.block_n
        return f"tensordesc<{_TRITON_DTYPE[dtype]}[1, 1, {rows}, {block_d}]>"
    if name.startswith(("BLOCK_", "MASK_")) or name == "DQ_TMA":
        return "constexpr"
    if name == "Mask":
        return "*u8" if mask == "bool" else "*" + _TRITON_DTYPE[dtype]
    if name in ("SeqBounds", "TileIdx", "TileCnt"):
        return "*i32"
    if name in FLOAT_ARGS:
        return "fp32"
    if name == "drop_seed":  # seeds are drawn >= 2**31 (flashgen.kernels.dropout): int64
        return "i64"
    if name in FP32_POINTERS:
        return "*fp32"
    if name == "RowKeys":  # dropout's row keys (int32 bits), attn_bwd.py.jinja
        return "*i32"
    if name in POINTERS:
        return "*" + _TRITON_DTYPE[dtype]
    return "i32"


def _spec_kind(spec_t) -> tuple[KernelSpec, str]:
    """A job's spec tuple (head_dim, causal, dtype, direction) as (KernelSpec, direction key):
    direction "onepass" is a bwd spec counted as the one-pass backward kind."""
    if spec_t[3] == "onepass":
        return KernelSpec(*spec_t[:3], "bwd"), "onepass"
    return KernelSpec(*spec_t), spec_t[3]


def _kind(direction: str) -> str:
    """The `kind` argument of the sram model for a direction key."""
    return "onepass" if direction == "onepass" else "split"


def _uri(spec: KernelSpec, direction: str) -> str:
    return spec.uri().replace("attn_bwd_", "attn_bwd_onepass_", direction == "onepass")


def _from_uri(uri: str) -> tuple[KernelSpec, str]:
    if uri.startswith("attn_bwd_onepass_"):
        return KernelSpec.from_uri(uri.replace("attn_bwd_onepass_", "attn_bwd_")), "onepass"
    spec = KernelSpec.from_uri(uri)
    return spec, spec.direction


def compile_kernel(spec: KernelSpec, kernel_name: str, cfg: TileConfig, cap: int) -> int:
    """Compile one generated kernel ahead of time for sm_<cap>; return its shared bytes."""
    return int(compile_ahead(spec, kernel_name, cfg, cap)[0].metadata.shared)


def compile_ahead(
    spec: KernelSpec, kernel_name: str, cfg: TileConfig, cap: int, flags: dict | None = None
):
    """(Triton's compiled kernel, the config it was compiled with) of one generated kernel,
    ahead of time for sm_<cap>: the dQ kernels take their own config where one was measured
    (`flashgen.hardware.dq_tiles`), as the launcher runs them. `flags`: the values of the
    kernel's other constexprs (a mask kernel's MASK_PER_KEY, MASK_SHARED, BLOCK_SPARSE), those
    it has.

    The JIT marks pointers and ints divisible by 16 at launch (tt.divisibility); with the common
    shapes (head dim and lengths multiples of 16) every pointer and int is, and that is the case
    that pipelines the most loads through shared memory, so it is the one to budget for."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise RuntimeError("unset TRITON_INTERPRET: ahead-of-time compiles need the real compiler")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from flashgen.kernels.codegen import load_family

    family = "onepass" if kernel_name.startswith("attn_bwd_onepass") else "portable"
    fn = getattr(load_family(spec, family), kernel_name)
    if kernel_name.startswith("attn_bwd_dq"):  # the dQ kernel's own config where measured
        cfg = dq_config(spec, cfg, (cap // 10, cap % 10))
    signature, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        kind = _arg_kind(name, spec.dtype, cfg, spec.block_d, spec.attn_mask)
        signature[name] = kind
        if kind.startswith("*") or kind == "i32":
            attrs[(i,)] = [["tt.divisibility", 16]]
    constexprs = {"BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n}
    if "DQ_TMA" in fn.arg_names:
        constexprs["DQ_TMA"] = False  # element atomics: the default build
    constexprs.update({k: v for k, v in (flags or {}).items() if k in fn.arg_names})
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    options = {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
    return triton.compile(src, target=GPUTarget("cuda", cap, 32), options=options), cfg


_LOADED_HASHES: dict[str, str] = {}


def _kernel_names(spec: KernelSpec, cap: int, direction: str | None = None) -> tuple[str, ...]:
    """The kernels flashgen may launch for `spec` on sm_<cap>: the TMA builds on Hopper and
    newer (the backward's for 16-bit dtypes only), the pointer kernels everywhere.
    `direction`: the direction key ("onepass" for that backward kind), default the spec's."""
    direction = direction or spec.direction
    tma = cap >= 90 and (spec.direction == "fwd" or spec.dtype != "float32")
    names = KERNELS[direction] + (HOPPER_EXTRA[direction] if tma else ())
    if direction == "bwd" and not spec.has_extras:  # the dQ kernel that computes delta itself
        names += ("attn_bwd_dq_delta",) + (("attn_bwd_dq_delta_tma",) if tma else ())
    return names


def _fresh_template(direction: str) -> str:
    """The current template's hash; drops codegen's in-process module cache when the file changed
    since this worker last rendered it (templates are edited while long sweeps run)."""
    from flashgen.kernels import codegen

    digest = template_hash(direction)
    if _LOADED_HASHES.get(direction, digest) != digest:
        codegen._load.cache_clear()
    _LOADED_HASHES[direction] = digest
    return digest


def compile_job(job: tuple) -> tuple[tuple, dict]:
    """Pool worker: bytes of every kernel of one (spec, config, target), and the hash of the
    template they were rendered from (a rendering race with an edit only mislabels one result)."""
    spec_t, cfg_t, cap = job
    (spec, direction), cfg = _spec_kind(spec_t), TileConfig(*cfg_t)
    t0 = time.time()
    digest = _fresh_template(direction)
    try:
        names = _kernel_names(spec, cap, direction)
        per = {name: compile_kernel(spec, name, cfg, cap) for name in names}
        result = {"per_kernel": per, "secs": round(time.time() - t0, 2)}
        if direction == "bwd":
            result["dq_table"] = True  # dQ compiled on flashgen.hardware.dq_tiles' config
    except Exception as exc:  # a compile failure is a result to record, not a crash
        error = f"{type(exc).__name__}: {str(exc)[:300]}"
        result = {"error": error, "secs": round(time.time() - t0, 2)}
    if template_hash(direction) != digest:
        result["template_changed"] = True
    result["template"] = digest
    return job, result


def template_hash(direction: str) -> str:
    """Hash of the template's code lines: edits to its comment header do not retire results."""
    path = templates_dir() / f"{TEMPLATES[direction]}.py.jinja"
    code = [ln for ln in path.read_text().splitlines() if not ln.lstrip().startswith("#")]
    return hashlib.sha256("\n".join(code).encode()).hexdigest()[:12]


def _full_file_hash(direction: str) -> str:
    """The hash the first sweeps of this script used (whole file); still accepted as current."""
    path = templates_dir() / f"{TEMPLATES[direction]}.py.jinja"
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def cache_key(
    version: str,
    cap: int,
    spec: KernelSpec,
    cfg: TileConfig,
    digest: str | None = None,
    direction: str | None = None,
) -> str:
    direction = direction or spec.direction
    digest = digest or template_hash(direction)
    return f"{version}|sm{cap}|{_uri(spec, direction)}|{cfg.short()}|{digest}"


def _variant(head_dim: int, direction: str, cfg: TileConfig) -> tuple[str, bool]:
    return VARIANTS[zlib.crc32(f"{head_dim}{direction}{cfg.short()}".encode()) % len(VARIANTS)]


def plan(
    targets, per_cell: int, band_cap: int, spot_check: int, seed: str, directions=("fwd", "bwd")
) -> list[tuple]:
    """The deterministic list of (spec, config, target) jobs (see module docstring)."""
    jobs: list[tuple] = []
    for cap in targets:
        device = sram.KNOWN_GPUS[TARGET_DEVICE[cap]]
        limit, capability = device.smem_optin_bytes, device.capability
        for direction in directions:
            for d in HEAD_DIMS:
                if direction == "onepass" and d > ONEPASS_MAX_D:
                    continue
                spec, _ = _spec_kind((d, False, "float16", direction))
                cands = space.candidates(spec)
                kind = _kind(direction)
                model = {c: sram.smem_bytes(spec, c, capability, kind) for c in cands}
                band = [c for c in cands if BAND[0] * limit <= model[c] <= BAND[1] * limit]
                band.sort(key=lambda c: (abs(math.log(model[c] / limit)), c))
                band = band[:band_cap]
                rest = [c for c in cands if c not in band]
                rng = random.Random(f"{seed}|{cap}|{direction}|{d}")
                picked = band + rng.sample(rest, min(per_cell, len(rest)))
                for cfg in picked:
                    dtype, causal = _variant(d, direction, cfg)
                    jobs.append(((d, causal, dtype, direction), cfg, cap))
                for cfg in rng.sample(picked, min(spot_check, len(picked))):
                    for dtype, causal in VARIANTS:
                        jobs.append(((d, causal, dtype, direction), cfg, cap))
    seen, unique = set(), []
    for spec_t, cfg, cap in jobs:
        key = (spec_t, (cfg.block_m, cfg.block_n, cfg.num_warps, cfg.num_stages), cap)
        if key not in seen:
            seen.add(key)
            unique.append(key)
    return unique


def _write_json(path: Path, data) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def _save_cache(path: Path, cache: dict) -> None:
    """Merge `cache` into the file under a lock: sweeps of two Triton versions may share it."""
    import fcntl

    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        on_disk = json.loads(path.read_text()) if path.exists() else {}
        on_disk.update(cache)
        cache.update(on_disk)
        _write_json(path, on_disk)


def _cached(cache: dict, version: str, job: tuple) -> bool:
    """Compiled already for the current template, with every kernel flashgen may launch."""
    (spec, direction), cfg = _spec_kind(job[0]), TileConfig(*job[1])
    wanted = set(_kernel_names(spec, job[2], direction))
    for digest in (template_hash(direction), _full_file_hash(direction)):
        result = cache.get(cache_key(version, job[2], spec, cfg, digest, direction))
        if result and ("error" in result or set(result["per_kernel"]) == wanted):
            return True
    return False


def _stale_dq(direction: str, spec: KernelSpec, cfg: TileConfig, cap: int, result: dict) -> bool:
    """A split-backward result compiled before the dQ kernel got its own config on this target
    (flashgen.hardware.dq_tiles): its dQ bytes are another kernel's."""
    if direction != "bwd" or result.get("dq_table"):
        return False
    return dq_config(spec, cfg, (cap // 10, cap % 10)) != cfg


def run_sweep(args, version: str) -> None:
    cache_path = args.out / "cache.json"
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    jobs = plan(
        args.targets, args.per_cell, args.band_cap, args.spot_check, args.seed, args.directions
    )
    todo = [j for j in jobs if not _cached(cache, version, j)]
    # Round-robin over the cells (target, direction, head dim), each in plan order (band
    # nearest the limit first), so a time-limited run still covers every cell.
    rank: dict[tuple, int] = {}
    order = []
    for j in todo:
        cell = (j[2], j[0][3], j[0][0])
        order.append((rank.get(cell, 0), j))
        rank[cell] = rank.get(cell, 0) + 1
    todo = [j for _, j in sorted(order, key=lambda pair: pair[0])]
    print(f"triton {version}: {len(jobs)} planned, {len(todo)} to compile", flush=True)
    deadline = time.time() + args.budget_s
    done = 0
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(compile_job, j) for j in todo]
        for fut in as_completed(futures):
            job, result = fut.result()
            (spec, direction), cfg = _spec_kind(job[0]), TileConfig(*job[1])
            if not result.get("template_changed"):
                key = cache_key(version, job[2], spec, cfg, result["template"], direction)
                cache[key] = result
            done += 1
            if done % 10 == 0 or done == len(todo):
                _save_cache(cache_path, cache)
                print(
                    f"  {done}/{len(todo)} {spec.uri()} {cfg.short()} sm{job[2]} {result}",
                    flush=True,
                )
            if time.time() > deadline:
                print("time budget spent: cancelling the rest (rerun to continue)", flush=True)
                for f in futures:
                    f.cancel()
                break
    _save_cache(cache_path, cache)


def analyse(cache: dict) -> list[dict]:
    """One row per (triton version, target, direction, template revision): "current" for the
    templates in the checkout, "earlier" for results of revisions edited since (kept: they test
    the same model on kernels of the same structure)."""
    hashes = {d: {template_hash(d), _full_file_hash(d)} for d in TEMPLATES}
    cells: dict[tuple, dict] = {}
    variants: dict[tuple, set] = {}
    for key, result in cache.items():
        version, target, uri, short, thash = key.split("|")
        spec, direction = _from_uri(uri)
        if direction == "onepass" and spec.head_dim > ONEPASS_MAX_D:
            continue  # compiled before the kind was limited to head dims <= 128
        cap = int(target[2:])
        revision = "current" if thash in hashes[direction] else "earlier"
        names = set(_kernel_names(spec, cap, direction))
        if "per_kernel" in result and set(result["per_kernel"]) != names:
            revision = "earlier"  # compiled before the template grew its TMA kernels
        cfg = TileConfig(*(int(x.lstrip("ws")) for x in short.strip("()").split(",")))
        device = sram.KNOWN_GPUS[TARGET_DEVICE[cap]]
        cell = cells.setdefault(
            (version, cap, direction, revision),
            {
                "triton": version,
                "templates": revision,
                "target": f"sm_{cap}",
                "device": device.name,
                "limit": device.smem_optin_bytes,
                "direction": direction,
                "configs": 0,
                "compile_errors": 0,
                "fit": 0,
                "false_admits": [],
                "false_rejects": [],
                "errors": [],
                "kernel_errors": [],
                "head_dims": set(),
                "variants": set(),
                "compiled_over_limit": set(),
            },
        )
        if "error" in result:
            cell["compile_errors"] += 1
            continue
        compiled = result["per_kernel"]
        model_per = sram.kernel_bytes(spec, cfg, device.capability, _kind(direction))
        if _stale_dq(direction, spec, cfg, cap, result):  # compare the dK/dV kernels only
            compiled = {k: v for k, v in compiled.items() if not k.startswith("attn_bwd_dq")}
            model_per = {k: v for k, v in model_per.items() if k in compiled}
        actual = max(compiled.values())
        model = max(model_per.values())
        cell["configs"] += 1
        cell["head_dims"].add(spec.head_dim)
        cell["variants"].add((spec.dtype, spec.causal))
        cell["errors"].append(model - actual)
        cell["kernel_errors"] += [model_per[k] - v for k, v in compiled.items()]
        really_fits = actual <= device.smem_optin_bytes
        model_fits = model <= device.smem_optin_bytes
        cell["fit"] += really_fits
        row = {"spec": uri, "config": short, "model": model, "compiler": actual}
        if model_fits and not really_fits:
            cell["false_admits"].append(row)
        if really_fits and not model_fits:
            cell["false_rejects"].append(row)
        cell["compiled_over_limit"].add((spec.head_dim, short, model - device.smem_optin_bytes))
        variants.setdefault((version, cap, spec.head_dim, direction, short, thash), set()).add(
            actual
        )
    rows = []
    for (version, cap, direction, revision), cell in sorted(cells.items()):
        errs = cell.pop("errors")
        kerrs = cell.pop("kernel_errors")
        spot = [
            v
            for k, v in variants.items()
            if k[:2] == (version, cap)
            and k[3] == direction
            and (k[5] in hashes[direction]) == (revision == "current")
        ]
        cell.update(
            head_dims=sorted(cell["head_dims"]),
            variants=len(cell["variants"]),
            max_over=max(errs, default=0),
            max_under=-min(min(errs, default=0), 0),
            mean_error=round(sum(errs) / len(errs), 1) if errs else 0,
            max_kernel_under=-min(min(kerrs, default=0), 0),
            false_reject_pct=round(100 * len(cell["false_rejects"]) / cell["fit"], 2)
            if cell["fit"]
            else 0,
            variant_mismatch=sum(len(s) > 1 for s in spot),
        )
        cell.update(_whole_space_estimate(cap, direction, cell))
        rows.append(cell)
    return rows


def _whole_space_estimate(cap: int, direction: str, cell: dict) -> dict:
    """False rejects as a share of the WHOLE space's fitting configs (what the goal is about),
    not of the sample, which is packed with configs next to the limit on purpose.

    Whole space: `space.candidates` for every head dim (one (dtype, causal) variant each; bytes do
    not depend on them). A reject is only possible where the model is above the limit by no
    more than its over-estimate, so every config with limit < model <= limit + reach (the larger
    of BOUNDARY and the largest over-estimate seen in the cell) is a
    "boundary" config; the rejects found among the compiled ones are scaled to all of them.
    Fitting configs: those the model admits (no false admits among the compiled ones) plus the
    estimated rejects."""
    device = sram.KNOWN_GPUS[TARGET_DEVICE[cap]]
    limit = device.smem_optin_bytes
    reach = max(BOUNDARY, cell["max_over"])
    admitted = boundary = 0
    for d in HEAD_DIMS:
        if direction == "onepass" and d > ONEPASS_MAX_D:
            continue
        spec, _ = _spec_kind((d, False, "float16", direction))
        for c in space.candidates(spec):
            b = sram.smem_bytes(spec, c, device.capability, _kind(direction))
            admitted += b <= limit
            boundary += limit < b <= limit + reach
    over = cell.pop("compiled_over_limit")
    compiled = len({(d, c) for d, c, excess in over if 0 < excess <= reach})
    found = len(cell["false_rejects"])
    est = found * boundary / compiled if compiled else 0.0
    return {
        "space_admitted": admitted,
        "space_boundary": boundary,
        "boundary_reach": reach,
        "boundary_compiled": compiled,
        "est_false_reject_pct": round(100 * est / (admitted + est), 2) if admitted else 0.0,
    }


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def markdown(rows: list[dict], command: str) -> str:
    lines = [
        "| Triton | target (limit, bytes) | dir | templates | configs compiled | fit (compiler) | false admits "
        "| false rejects (% of sampled fit) | est. false rejects, whole space | max over (B) | mean over (B) | max under (B) | variant mismatches |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['triton']} | {r['target']} ({r['device']}, {r['limit']:,}) | {r['direction']} "
            f"| {r['templates']} "
            f"| {r['configs']} | {r['fit']} | {len(r['false_admits'])} "
            f"| {len(r['false_rejects'])} ({r['false_reject_pct']}%) "
            f"| {r['est_false_reject_pct']}% ({r['boundary_compiled']}/{r['space_boundary']} "
            f"boundary compiled, {r['space_admitted']} admitted) | {r['max_over']:,} "
            f"| {r['mean_error']:,} | {r['max_under']:,} | {r['variant_mismatch']} |"
        )
    head = (
        f"Generated {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC at commit "
        f"{_git('rev-parse', '--short', 'HEAD')} by `{command}`."
    )
    return head + "\n\n" + "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--targets", type=int, nargs="+", default=[90, 80, 86])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--per-cell", type=int, default=12, help="random configs per (target, dir, hd)"
    )
    parser.add_argument(
        "--band-cap", type=int, default=40, help="band configs per (target, dir, hd)"
    )
    parser.add_argument(
        "--spot-check", type=int, default=1, help="configs per cell in all 4 variants"
    )
    parser.add_argument("--seed", default="flashgen-sram")
    parser.add_argument(
        "--directions",
        nargs="+",
        default=["fwd", "bwd", "onepass"],
        choices=["fwd", "bwd", "onepass"],
        help="kernel sets: forward, split backward, one-pass backward",
    )
    parser.add_argument("--budget-s", type=float, default=3000.0, help="stop compiling after this")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/sram_results"))
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        import triton

        run_sweep(args, triton.__version__)
    cache = json.loads((args.out / "cache.json").read_text())
    rows = analyse(cache)
    _write_json(args.out / "summary.json", rows)
    command = "PYTHONPATH=. python benchmarks/sram_vs_compiler.py " + " ".join(argv or sys.argv[1:])
    (args.out / "table.md").write_text(markdown(rows, command))
    print(markdown(rows, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
