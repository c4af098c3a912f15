"""flashgen.bench.scripts, the harness the GPU scripts in benchmarks/ share, on the CPU: inputs,
FLOP counting, the CPU timing path, SDPA baselines (accepted or not), the row writer and the
scripts' command lines (each moved script parses its flags and prints --help without a GPU)."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import os
import time

import pytest
import repo_scripts
import torch

from flashgen.bench import harness, scripts


def test_inputs_shapes_gqa_dtype_and_seed():
    q, k, v, do = scripts.inputs(2, 8, 2, 5, 7, 16, dtype="float16", device="cpu", seed=3)
    assert q.shape == do.shape == (2, 8, 5, 16)
    assert k.shape == v.shape == (2, 2, 7, 16)
    assert {t.dtype for t in (q, k, v, do)} == {torch.float16}
    again = scripts.inputs(2, 8, 2, 5, 7, 16, dtype=torch.float16, device="cpu", seed=3)
    assert all(torch.equal(a, b) for a, b in zip((q, k, v, do), again, strict=True))
    other = scripts.inputs(2, 8, 2, 5, 7, 16, dtype="float16", device="cpu", seed=4)
    assert not torch.equal(q, other[0])
    assert not torch.equal(k, v)  # each tensor its own draw
    three = scripts.inputs(1, 2, 1, 3, 3, 8, device="cpu", count=3, draw="cpu")
    assert len(three) == 3 and three[0].dtype == torch.bfloat16


def test_flops_causal_halves_and_tflops():
    full = harness.attention_flops(2, 4, 1024, 1024, 64, False)
    assert full == 4.0 * 2 * 4 * 1024 * 1024 * 64
    assert harness.attention_flops(2, 4, 1024, 1024, 64, True) == full / 2
    assert harness.attention_flops(2, 4, 1024, 1024, 64, True, "fwd_bwd") == full / 2 * 3.5
    # 1e12 FLOPs in 1000 ms is 1 TFLOP/s; rounded to one decimal by default
    assert scripts.tflops(1e12, 1000.0) == 1.0
    assert scripts.tflops(1.234e12, 1000.0, ndigits=2) == 1.23
    assert scripts.tflops(1e12, None) is None
    assert scripts.entry(500.0, 1e12) == {"ms": 500.0, "tflops": 2.0}
    assert scripts.entry(250.0, 1e12, "fwd_bwd_") == {"fwd_bwd_ms": 250.0, "fwd_bwd_tflops": 4.0}
    assert scripts.entry("RuntimeError: no kernel", 1e12) == {"error": "RuntimeError: no kernel"}


def test_cpu_timer_measures_and_resets_grads():
    leaf = torch.ones(3, requires_grad=True)
    seen = []

    def fn():
        seen.append(leaf.grad)
        (leaf * 2).sum().backward()
        time.sleep(0.002)

    ms = scripts.timer("cpu", repeats=3)(fn, grad_to_none=[leaf])
    assert ms >= 2.0
    assert len(seen) >= 4 and all(g is None for g in seen)  # warm-up call + 3 timed


def test_attempt_and_error_text():
    def boom():
        raise ValueError("x" * 400)

    ms, err = scripts.attempt(lambda fn: fn(), boom)
    assert ms is None and err.startswith("ValueError: xxx") and len(err) == 300
    assert scripts.attempt(lambda fn: fn(), lambda: 1.5) == (1.5, None)
    assert scripts.error_text(KeyError("k"), 200) == "KeyError: 'k'"


def test_sdpa_baselines_on_cpu_accepted_and_refused():
    q, k, v, do = scripts.inputs(1, 4, 2, 16, 16, 32, dtype="float32", device="cpu")
    cpu = scripts.timer("cpu")
    fwd = scripts.sdpa_baselines(q, k, v, causal=True, time_fn=cpu,
                                 impls=("sdpa_math", "sdpa_cudnn"))  # fmt: skip
    assert isinstance(fwd["sdpa_math"], float) and fwd["sdpa_math"] > 0
    assert isinstance(fwd["sdpa_cudnn"], str) and fwd["sdpa_cudnn"].startswith("RuntimeError")
    both = scripts.sdpa_baselines(q, k, v, causal=False, time_fn=cpu, impls=["sdpa_math"], do=do)
    assert isinstance(both["sdpa_math"], float)


def test_fwd_bwd_does_not_accumulate_gradients():
    x = torch.randn(4, 4, requires_grad=True)
    grad = torch.ones(4, 4)
    run = scripts.fwd_bwd(lambda: x * 3, [x], grad)
    run()
    run()
    assert torch.equal(x.grad, torch.full((4, 4), 3.0))
    drawn = scripts.fwd_bwd(lambda: x * 3, [x])  # a random dO of the output's shape
    drawn()
    assert x.grad.shape == (4, 4)


def test_row_writer_csv_with_meta_and_append(tmp_path):
    path = str(tmp_path / "rows.csv")
    with scripts.RowWriter(path, ["a", "b"], meta={"run": 1}) as w:
        w.write({"a": 1, "b": "x"})
        with pytest.raises(ValueError, match="not in the table"):
            w.write({"a": 2, "c": 3})
    with scripts.RowWriter(path, ["a", "b"], meta={"run": 2}, append=True) as w:
        w.write({"a": 2})
    with open(path) as fh:
        rows = list(csv.DictReader(fh))
    assert rows == [{"a": "1", "b": "x"}, {"a": "2", "b": ""}]  # one header
    meta = json.loads((tmp_path / "rows.meta.json").read_text())
    assert meta == {"runs": [{"run": 1}, {"run": 2}]}
    with scripts.RowWriter(path, ["a"], meta={"run": 3}) as w:  # not append: a new table
        w.write({"a": 9})
    assert json.loads((tmp_path / "rows.meta.json").read_text()) == {"runs": [{"run": 3}]}


def test_row_writer_jsonl_and_save_json(tmp_path):
    path = str(tmp_path / "rows.jsonl")
    with scripts.RowWriter(path, ["a", "b"], meta={"gpu": "x"}) as w:
        w.write({"a": 1})
    lines = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert lines == [{"meta": {"gpu": "x"}}, {"a": 1, "b": None}]
    out = tmp_path / "doc.json"
    scripts.save_json(out, {"path": tmp_path, "n": 1})
    assert json.loads(out.read_text()) == {"path": str(tmp_path), "n": 1}
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_run_meta_and_result_doc_on_cpu():
    meta = scripts.run_meta("cpu", extra="yes")
    for key in ("gpu", "torch", "triton", "commit", "date", "command", "flashgen"):
        assert meta[key], key
    assert meta["torch"] == torch.__version__ and meta["extra"] == "yes"
    assert meta["commit"] in scripts.banner(meta) and meta["gpu"] in scripts.banner(meta)
    doc = scripts.result_doc("cpu", rows=[])
    assert doc["env"] == {k: meta[k] for k in ("gpu", "torch", "triton")}
    assert doc["rows"] == [] and doc["started"].endswith("UTC")


def test_config_verdict_and_grid_line(capsys):
    warm = [
        dict(d=64, causal=False, cfg=[64, 64, 4, 2], status="ok"),
        dict(d=64, causal=False, cfg=[128, 64, 4, 2], status="oor"),
        dict(d=64, causal=True, cfg=[64, 64, 4, 2], status="wrong"),
        dict(d=128, causal=True, cfg=[64, 32, 4, 2], status="ok"),
    ]
    checks = [dict(d=64, ok=True), dict(d=80, ok=False, error="bad")]
    report = {"compile_and_check_s": 1.0}
    failed, wrong, usable = scripts.config_verdict(report, checks, warm, ("d",),
                                                   lambda c: c["error"])  # fmt: skip
    assert [c["d"] for c in failed] == [80] and [w["status"] for w in wrong] == ["wrong"]
    assert usable == {(64, False): [[64, 64, 4, 2]], (128, True): [[64, 32, 4, 2]]}
    assert report["checks_failed"] == 1 and report["configs_wrong"] == 1
    out = capsys.readouterr().out
    assert "correctness: 1/2 cases ok" in out and "configs: 2 ok, 1 out of resources" in out
    row = dict(shape=dict(B=1, H=16, N=1024, D=128), causal=True,
               best=dict(cfg=[128, 64, 4, 2], tflops=400.0),
               sdpa_cudnn=dict(tflops=500.0), sdpa_flash=dict(error="no"))  # fmt: skip
    header = scripts.grid_header("config", f"{'ptr':>7}")
    line = scripts.grid_line(row, "tflops", f"{'-':>7}")
    assert len(header) == len(line)
    assert line.split() == ["B1", "H16", "N1024", "D128", "True", "400.0", "(128,", "64,", "4,",
                            "2)", "-", "500.0", "-", "0.80"]  # fmt: skip


def test_parser_shared_flags():
    ap = scripts.parser("doc", out="x.csv", budget=5.0, checks=True, speed=True)
    args = ap.parse_args([])
    assert (args.out, args.budget, args.no_check, args.no_speed) == ("x.csv", 5.0, False, False)
    args = ap.parse_args(["--out", "y", "--budget", "1", "--no-check", "--no-speed"])
    assert (args.out, args.budget, args.no_check, args.no_speed) == ("y", 1.0, True, True)
    assert not hasattr(scripts.parser("doc").parse_args([]), "out")


class _Parsed(Exception):
    """Raised in place of running a script once its command line is parsed."""


@pytest.fixture
def parsed(monkeypatch):
    """parsed(script, argv) -> the argparse namespace script's main(argv) parsed (it runs no
    further: nothing is measured, no GPU is needed)."""
    real = argparse.ArgumentParser.parse_args

    def stop(self, args=None, namespace=None):
        raise _Parsed(real(self, args, namespace))

    def run(script, argv):
        module = repo_scripts.load(f"benchmarks/{script}.py", f"bench_{script}")
        monkeypatch.setattr(argparse.ArgumentParser, "parse_args", stop)
        try:
            with pytest.raises(_Parsed) as got:
                module.main(argv)
        finally:
            monkeypatch.setattr(argparse.ArgumentParser, "parse_args", real)
        return got.value.args[0]

    return run


# (script, argv for main, expected attributes of what it parsed)
PARSE_CASES = [
    ("gpu_check", ["gpu_check.py", "out.json"], dict(out_path="out.json")),
    ("gpu_check_bwd", ["x", "--smoke", "--timing-only", "d"],
     dict(smoke=True, timing_only=True, out_path="d")),
    ("bwd_grid", ["--budget", "5", "--no-fwd", "--shapes", "0,2", "--fa2", "--rounds", "5"],
     dict(budget=5.0, fwd=False, shapes="0,2", rep=60, workers=15, fa2=True, rounds=5)),
    ("bwd_kinds", ["--grid", "anchors", "--no-check", "--configs", "64,64,4,2"],
     dict(grid="anchors", no_check=True, configs=["64,64,4,2"], budget=50.0)),
    ("hopper_bwd", ["--grid", "probe", "--rep", "7", "--rounds", "3"],
     dict(grid="probe", rep=7, budget=60.0, rounds=3)),
    ("bwd_sweep", ["--out", "o", "--rep", "3"], dict(out="o", rep=3, budget=55.0, workers=15)),
    ("bias_grad", ["--no-speed", "--warm"],
     dict(no_speed=True, warm=True, no_check=False, budget=20.0, out=".")),
    ("varlen", ["--check-causal", "1", "--warm", "ragged10"],
     dict(check_causal="1", warm="ragged10", budget=40.0, out=".")),
    ("decode", ["--out", "d.csv", "--no-grid", "--sweep", "1x32x8x4096x128", "--no-check"],
     dict(out="d.csv", grid=False, sweep="1x32x8x4096x128", no_check=True, budget=600)),
    ("masks", ["--only", "window", "--dirs", "fwd", "--no-per-key"],
     dict(only="window", dirs="fwd", no_per_key=True, budget=50.0, no_check=False,
          bwd_kinds="")),
    ("hopper_profile", ["run", "d128_16k"], dict(cmd="run", cases=["d128_16k"])),
    ("latest", ["add", "a.json"], dict(cmd="add", files=["a.json"])),
    ("hopper_probe", ["bench", "quick", "shipped"], dict(cmd="bench", words=["quick", "shipped"])),
    ("hopper_tune", ["--out", "c.json", "--trials", "3"], dict(out="c.json", trials=3, budget=60.0)),
    ("hopper_bwd_tune", ["--out", "b.json", "--head-dims", "128"],
     dict(out="b.json", trials=10, head_dims="128", seqs="4096", budget=40.0)),
    ("decode_host", ["--shape", "1,8,2,64,64", "--device", "cpu"],
     dict(shape="1,8,2,64,64", device="cpu", calls=200)),
    ("tuner_vs_grid", ["--cpu-smoke", "--case-set", "heldout", "--cases", "2"],
     dict(cpu_smoke=True, case_set="heldout", cases=2)),
    ("mask_kernels", ["--only", "alibi_full", "--iters", "2", "--wall"],
     dict(only="alibi_full", iters=2, shape="4,16,4,4096,128", wall=True)),
    ("host_steps", ["--shape", "1,1,64,64", "--causal"],
     dict(shape="1,1,64,64", causal=True, calls=2000, rounds=7)),
    ("overlap_probe", ["--shift", "3", "--reps", "2"],
     dict(shift=3, reps=2, variant="attn_mask_bool_pad", shape="4,16,4,4096,128")),
    ("loss_spread", ["ref.json=fp32", "a.json"], dict(runs=["ref.json=fp32", "a.json"])),
    ("masked_tiles", ["--shape", "1,2,1,512,64", "--rep", "5", "--only", "bool_b1nn"],
     dict(shape="1,2,1,512,64", rep=5, budget=300.0, out=None, only="bool_b1nn")),
    ("mix_bwd", ["--rounds", "9", "--out", "m.json"], dict(rounds=9, rep=30, out="m.json")),
    ("bwd_thread", ["--shape", "1,1,64,64", "--rounds", "2"],
     dict(shape="1,1,64,64", rounds=2, calls=300, device="cuda")),
    ("encoder_infer", ["--rounds", "3", "--shapes", "2x64x128x4", "--every-size"],
     dict(rounds=3, layers=4, dtype="bfloat16", shapes="2x64x128x4", every_size=True)),
    ("mha_fuzz", ["--cases", "5", "--seed", "7"], dict(cases=5, seed=7, only=None)),
    ("swin_train", ["--batch", "8", "--every-size", "--out", "s.json"],
     dict(batch=8, every_size=True, rounds=5, rep=40, image=256, window=8, out="s.json")),
]  # fmt: skip


@pytest.mark.parametrize("script,argv,want", PARSE_CASES, ids=[c[0] for c in PARSE_CASES])
def test_script_parses_its_flags(parsed, script, argv, want):
    args = parsed(script, argv)
    assert {key: getattr(args, key) for key in want} == want


@pytest.mark.parametrize("script", [c[0] for c in PARSE_CASES])
def test_script_help_without_gpu(script, capsys):
    module = repo_scripts.load(f"benchmarks/{script}.py", f"bench_{script}")
    argv = ["--help"]
    if script in ("gpu_check", "gpu_check_bwd"):  # main takes sys.argv whole
        argv = [script, "--help"]
    with pytest.raises(SystemExit) as done:
        module.main(argv)
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: ") and module.__doc__.splitlines()[0] in out


def test_masks_times_backward_kinds_in_one_process(monkeypatch, capsys):
    """masks.py --bwd-kinds: each kind's readings alternate (FLASHGEN_BWD_KIND set around each,
    then restored), medians and ratios to the first kind printed; an unknown kind is refused
    before anything runs."""
    import os

    module = repo_scripts.load("benchmarks/masks.py", "bench_masks_kinds")
    with pytest.raises(SystemExit) as done:
        module.main(["--bwd-kinds", "hopper,bogus"])
    assert done.value.code == 2 and "bogus" in capsys.readouterr().err
    monkeypatch.setenv("FLASHGEN_BWD_KIND", "onepass")
    seen = []
    ms = {"hopper": iter([1.0, 1.2, 1.1]), "split": iter([2.0, 2.1, 2.3])}

    def bench(run):
        kind = os.environ["FLASHGEN_BWD_KIND"]
        seen.append(kind)
        return next(ms[kind])

    monkeypatch.setattr(module, "bench", bench)
    monkeypatch.setattr(module, "BWD_KINDS", ("hopper", "split"))
    monkeypatch.setattr(module, "ROUNDS", 3)
    line = module.kinds_line("pad_right_full", lambda: None)
    assert seen == ["hopper", "split"] * 3  # alternating
    assert os.environ["FLASHGEN_BWD_KIND"] == "onepass"  # restored
    assert line.startswith("kinds pad_right_full fwd+bwd: hopper 1.0000/1.2000/1.1000 (median")
    assert "(median 1.1000, 1.000x)" in line and "(median 2.1000, 1.909x)" in line


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("causal", [False, True])
def test_masks_unpadded_reference_holds_the_visible_work(side, causal):
    """masks.py's `unpadded`: each batch element's valid queries, keys, values and output
    gradient as its own contiguous leaf, cut where the padding side puts them, and the visible
    pairs it counts equal to those of the dense mask `visible` builds for the padded call."""
    from flashgen.kernels.padding import bounds

    module = repo_scripts.load("benchmarks/masks.py", "bench_masks_unpadded")
    b, hq, n, d = 3, 2, 11, 4
    q, k, v, do = (torch.randn(b, hq, n, d) for _ in range(4))
    lens = torch.tensor([11, 4, 7])
    kw = {"key_lengths": lens, "padding": side}
    if causal:
        kw["query_lengths"] = lens
    calls, pairs = module.unpadded(q, k, v, do, kw, causal)
    qs, ql, ks, kl = bounds(b, n, n, lens, kw.get("query_lengths"), side, "cpu").unbind(1)
    mask = module.visible(n, n, causal=causal, lengths=((qs, qs + ql), (ks, ks + kl)), device="cpu")
    assert pairs == mask.expand(b, 1, n, n).sum().item() * hq
    for i, (qi, ki, vi, doi) in enumerate(calls):
        keys = torch.arange(n)[mask[i, 0].any(0)]  # the keys some query sees
        assert ki.is_leaf and ki.requires_grad and ki.is_contiguous()
        assert torch.equal(ki, k[i : i + 1, :, keys]) and torch.equal(vi, v[i : i + 1, :, keys])
        rows = torch.arange(n)[mask[i, 0].any(1)] if causal else torch.arange(n)
        assert torch.equal(qi, q[i : i + 1, :, rows]) and torch.equal(doi, do[i : i + 1, :, rows])


def test_hopper_probe_table_needs_its_json(capsys):
    module = repo_scripts.load("benchmarks/hopper_probe.py", "bench_hopper_probe")
    with pytest.raises(SystemExit) as done:
        module.parse_args(["table"])
    assert done.value.code == 2 and "table takes one bench JSON" in capsys.readouterr().err


def test_tuner_vs_grid_case_sets():
    module = repo_scripts.load("benchmarks/tuner_vs_grid.py", "bench_tuner_vs_grid")
    for name, lengths, dtype in (("tuned", {1024, 4096}, "bfloat16"),
                                 ("heldout", {2048, 8192}, "float16")):  # fmt: skip
        cases = module.CASE_SETS[name]
        assert len({c[:3] for c in cases}) == 8  # 8 distinct (head dim, causal, direction)
        assert {c[3] for c in cases} == lengths and {c[4] for c in cases} == {dtype}
        for length in lengths:  # each length on half the specs, fwd and bwd alike
            assert sum(c[3] == length for c in cases) == 4
            assert sum(c[3] == length and c[2] == "fwd" for c in cases) == 2


def test_tuner_vs_grid_files_follow_the_raw_naming_scheme(tmp_path):
    module = repo_scripts.load("benchmarks/tuner_vs_grid.py", "bench_tuner_vs_grid")
    names = [module.child_path(tmp_path, m).name for m in ("grid", "search", "search-cold")]
    assert names == ["tuner_vs_grid_grid.json", "tuner_vs_grid_search.json",
                     "tuner_vs_grid_search_cold.json"]  # fmt: skip


def test_grids_and_anchors():
    assert scripts.GRIDS["anchors"] == list(harness.ANCHOR_SHAPES)
    assert all(s[3] == 4096 for s in scripts.GRIDS["probe"])
    assert scripts.MHA_ANCHORS == ((16, 16, 1024, 128), (4, 16, 4096, 128), (1, 16, 16384, 128),
                                   (16, 32, 1024, 64), (4, 32, 4096, 64), (1, 32, 16384, 64))  # fmt: skip


def _job_calls(tmp_path, **params) -> list[str]:
    """The commands benchmarks/llama_bench_job.sh starts with `params`, python3 and timeout
    stubbed (each logs its arguments), in a copy of the tree's layout."""
    import shutil
    import subprocess

    tree, stubs, out = tmp_path / "tree", tmp_path / "stubs", tmp_path / "out"
    for folder in (tree / "examples", tree / "benchmarks", stubs, out):
        folder.mkdir(parents=True)
    shutil.copy(repo_scripts.ROOT / "benchmarks" / "llama_bench_job.sh", tree / "benchmarks")
    for name in ("python3", "timeout"):
        (stubs / name).write_text(f'#!/bin/bash\necho "{name} $*" >> "$CALLS"\n')
        (stubs / name).chmod(0o755)
    env = dict(PATH=f"{stubs}:/usr/bin:/bin", OUT=str(out), CALLS=str(tmp_path / "calls"))
    env.update({k: str(v) for k, v in params.items()})
    subprocess.run(["bash", "benchmarks/llama_bench_job.sh"], cwd=tree, env=env, check=True,
                   capture_output=True, timeout=30)  # fmt: skip
    lines = (tmp_path / "calls").read_text().splitlines()
    return sorted(line.replace(str(out), "OUT") for line in lines)


def test_llama_bench_job_two_shapes_with_lock_and_merge(tmp_path):
    calls = _job_calls(tmp_path, SHAPES="1x16384:16k 2x4096:4k", BACKENDS="eager flashgen")
    train = [c for c in calls if "train_hf_llama.py" in c]
    assert len(train) == 4 and all("--gpu-lock /tmp/bench-gpu-lock-" in c for c in train)
    assert any("--shapes 2x4096 --steps 8" in c and "OUT/llama_model_4k_flashgen.json" in c
               for c in train)  # fmt: skip
    merge = [c for c in calls if "train_merge.py" in c]
    assert merge == ["python3 ../benchmarks/train_merge.py OUT/llama_model_16k_eager.json "
                     "OUT/llama_model_16k_flashgen.json OUT/llama_model_4k_eager.json "
                     "OUT/llama_model_4k_flashgen.json --json OUT/train_hf_llama_model.json"]  # fmt: skip
    bench = [c for c in calls if "flashgen.cli bench" in c]
    assert len(bench) == 1 and "--seq-len 4096,16384,1024" in bench[0]


def test_llama_bench_job_repeated_runs_without_lock(tmp_path):
    calls = _job_calls(tmp_path, BACKENDS="eager", RUNS="a b", LOCK=0, MERGE=0, COMPARE=1,
                       END=0, LIMIT=40)  # fmt: skip
    train = [c for c in calls if "train_hf_llama.py" in c]
    assert [c.split("--json ")[1] for c in train] == ["OUT/llama_model_16k_eager_a.json",
                                                     "OUT/llama_model_16k_eager_b.json"]  # fmt: skip
    assert all(c.startswith("timeout -s INT -k 3 40 ") and "--gpu-lock" not in c for c in train)
    assert "python3 - OUT/llama_model_16k_eager_a.json OUT/llama_model_16k_eager_b.json" in calls
    assert not any("train_merge" in c or "flashgen.cli bench" in c for c in calls)  # no time left


def test_loss_spread_reports_each_runs_gap_to_the_reference(tmp_path, capsys):
    """benchmarks/loss_spread.py: per case, every run's losses and its largest and mean
    |loss - reference loss|; a run without the case says so."""
    module = repo_scripts.load("benchmarks/loss_spread.py", "bench_loss_spread")

    def write(name, backend, losses, case="1x8"):
        path = tmp_path / name
        rows = [{"case": case, "backend": backend, "losses": losses}] if losses else []
        path.write_text(json.dumps({"rows": rows}))
        return str(path)

    ref = write("ref.json", "eager", [1.0, 2.0, 3.0])
    near = write("near.json", "flashgen", [1.0, 2.5, 2.9])
    empty = write("oom.json", "eager", [])
    assert module.main([f"{ref}=ref", f"{near}=fg", f"{empty}=oom"]) == 0
    out = capsys.readouterr().out
    assert "case 1x8: reference ref" in out
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("fg"))
    assert "max 0.5000 mean 0.2000" in line
    assert "oom" in out and "(no losses)" in out
    assert module.spread([1.0, 2.0], [1.5, 2.0]) == (0.5, 0.25)
    assert module.main([empty, ref]) == 1  # no reference curve: nothing to compare with


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU exit")
def test_mask_kernels_says_it_needs_a_gpu(capsys):
    module = repo_scripts.load("benchmarks/mask_kernels.py", "bench_mask_kernels")
    assert module.main(["--only", "alibi_full"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU exit")
def test_masked_tiles_says_it_needs_a_gpu(capsys):
    module = repo_scripts.load("benchmarks/masked_tiles.py", "bench_masked_tiles")
    assert module.main(["--budget", "1"]) == 1
    assert "no CUDA device" in capsys.readouterr().err


def test_bwd_grid_table_reports_fa2_where_timed(tmp_path):
    """bwd_grid's table: the cuDNN summary always, the FA2 one only for rows that timed it."""
    module = repo_scripts.load("benchmarks/bwd_grid.py", "bench_bwd_grid")
    row = dict(shape=[1, 16, 16, 1024, 128], causal=False, ms={"cudnn": [1.0, 1.2]},
               vs_cudnn={"fast": 0.9, "fwd": 1.1})  # fmt: skip
    path = tmp_path / "bwd_grid.json"
    path.write_text(json.dumps({"rows": [row]}))
    text = module.table(str(path))
    assert "- fast: geomean 0.9x, min 0.9x over 1 shapes" in text and "FA2" not in text
    faster = dict(row, vs_fa2={"fast": 1.8, "fwd": 2.0})
    path.write_text(json.dumps({"rows": [faster, dict(faster, vs_fa2={"fast": 1.25})]}))
    text = module.table(str(path))
    assert "- fast vs FA2 (SDPA's flash backend): geomean 1.5x, min 1.25x over 2 shapes" in text
    assert "- fwd vs FA2 (SDPA's flash backend): geomean 2.0x, min 2.0x over 1 shapes" in text


def test_bwd_grid_modes_set_only_their_variables(monkeypatch):
    """bwd_grid: a mode forcing a kind leaves no other mode's variable behind."""
    module = repo_scripts.load("benchmarks/bwd_grid.py", "bench_bwd_grid_rounds")
    seen = {}

    def fake_attention(*leaves, causal):
        seen.update({n: os.environ.get(n) for n in module.ENV_NAMES})
        return leaves[0].sum() * 0

    monkeypatch.setattr("flashgen.attention", fake_attention)
    q = torch.zeros(1, 1, 4, 8)
    monkeypatch.setenv("FLASHGEN_BWD_OVERLAP", "1")
    module._grads("hopper", q, q, q, torch.zeros(()), False, grads=False)
    assert seen == {"FLASHGEN_BWD_DKDV": None, "FLASHGEN_BWD_KIND": "hopper",
                    "FLASHGEN_BWD_OVERLAP": None}  # fmt: skip
    module._grads("seq", q, q, q, torch.zeros(()), False, grads=False)
    assert seen == {"FLASHGEN_BWD_DKDV": None, "FLASHGEN_BWD_KIND": None,
                    "FLASHGEN_BWD_OVERLAP": "0"}  # fmt: skip
    module._grads("fast", q, q, q, torch.zeros(()), False, grads=False)
    assert seen == {"FLASHGEN_BWD_DKDV": None, "FLASHGEN_BWD_KIND": None,
                    "FLASHGEN_BWD_OVERLAP": None}  # fmt: skip
    strict = []
    monkeypatch.setattr(torch, "use_deterministic_algorithms", strict.append)
    module._grads("det_dkdv", q, q, q, torch.zeros(()), False, grads=False)
    assert seen["FLASHGEN_BWD_DKDV"] == "hopper" and strict == [True, False]


def test_hopper_profile_names_alibi_cases():
    """hopper_profile.py's `_alibi` cases (flashgen's ALiBi kernel, for ncu beside the plain
    one); cuDNN has no such case, and the name says so before anything launches."""
    module = repo_scripts.load("benchmarks/hopper_profile.py", "bench_hopper_profile_cases")
    case = module.parse_case("d64_4k_causal_alibi")
    assert case["alibi"] and case["causal"] and case["head_dim"] == 64 and case["seq"] == 4096
    assert not module.parse_case("d64_4k")["alibi"]
    with pytest.raises(ValueError, match="flashgen's kernel only"):
        module.parse_case("cudnn_d64_4k_alibi")
    shipped = module.parse_case("d128_16k_gqa_shipped")  # the run time's config, records and all
    assert shipped["shipped"] and not shipped["persistent"] and shipped["kv_heads"] == 8
    assert module.parse_case("d128_16k_persistent")["persistent"]
    with pytest.raises(ValueError, match="flashgen's kernel only"):
        module.parse_case("cudnn_d128_16k_shipped")


@pytest.mark.parametrize(
    "config",
    ["64:2,2,1,168,1,0,0,1,64,1,1,0", "64:2,2,1", "128:2,2,1,168,1,0,0,1,1,1,0,1,0,1,0,0"],
    ids=["block_m-in-a-flag", "too-few", "too-many"],
)
def test_hopper_bwd_refuses_a_config_string_out_of_order(config, capsys):
    """A field out of place (HopperBwdConfig's positional block_m where DQ_TMA goes) or a wrong
    count is a usage error before anything runs, not a silently different config."""
    module = repo_scripts.load("benchmarks/hopper_bwd.py", "bench_hopper_bwd_configs")
    with pytest.raises(SystemExit) as exit_:
        module.main(["--configs", config])
    assert exit_.value.code == 2
    assert "C,B,S,R then up to 11 fields" in capsys.readouterr().err


def test_bwd_variants_parses_and_applies_a_vary(capsys):
    """bwd_variants.py's --vary: fields of HopperBwdConfig replaced in the shipped config of
    each (head dim, causal) it names; a variant the config class refuses there is left out
    with the class's reason; a malformed --vary is a usage error naming it."""
    from flashgen.core.spec import KernelSpec
    from flashgen.kernels import hopper_bwd

    module = repo_scripts.load("benchmarks/bwd_variants.py", "bench_bwd_variants")
    vary = module.parse_vary("t1=dq_turns:1,ds_bufs:1@128f")
    assert vary.fields == (("dq_turns", True), ("ds_bufs", 1))
    assert vary.applies(128, False) and not vary.applies(128, True)
    assert not vary.applies(64, False)
    first = module.parse_vary("first=dq_first:1")
    cfgs, refused = module.variants(128, False, [vary, first])
    shipped = hopper_bwd.shipped_config(KernelSpec(128, False, "bfloat16", "bwd"))
    assert cfgs["shipped"] == shipped and list(cfgs)[0] == "shipped"
    assert cfgs["t1"] == dataclasses.replace(shipped, dq_turns=True, ds_bufs=1)
    assert shipped.dq_turns  # dQ's product first is refused in turns
    assert "first" not in cfgs and "dq_first" in refused["first"]
    split = module.parse_vary("split=dq_split:2,dq_first:1")  # refused: dQ first is one chunk
    cfgs, refused = module.variants(128, False, [split])
    assert "split" not in cfgs and "dq_first" in refused["split"]
    cfgs, refused = module.variants(64, True, [vary, first])
    assert "t1" not in cfgs and cfgs["first"].dq_first and not refused
    causal = KernelSpec(128, True, "bfloat16", "bwd")
    short, _ = module.variants(128, True, [], 1024, 1)  # what an MHA call of 1k keys runs
    assert short["shipped"] == hopper_bwd.shipped_config(causal, 1024, 1)
    grouped, _ = module.variants(128, True, [], 1024, 4)
    assert grouped["shipped"] == hopper_bwd.shipped_config(causal, 1024, 4)
    assert short["shipped"] != grouped["shipped"]  # SHORT_MHA_CONFIGS lists (128, causal)
    deep = module.parse_vary("deep=num_buf:4,kv_bufs:2@128")  # past 227 KB of shared memory
    cfgs, refused = module.variants(128, True, [deep])
    assert list(cfgs) == ["shipped"] and "shared memory" in refused["deep"]
    for bad, words in (("x", "NAME=FIELD"), ("a=nope:1", "nope"), ("a=dq_turns:2", "flag"),
                       ("a=ds_bufs:two", "integer"), ("a=ds_bufs:2@d128", "head dim")):  # fmt: skip
        with pytest.raises(ValueError, match=words):
            module.parse_vary(bad)
    with pytest.raises(SystemExit) as exit_:
        module.main(["--vary", "a=nope:1"])
    assert exit_.value.code == 2 and "nope" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        module.main([])
    assert "no --vary" in capsys.readouterr().err


def test_variants_are_checked_once_per_shipped_config(capsys, monkeypatch):
    """bwd_variants.checked_variants (both variants scripts): a key's check runs once, its
    refusals are recorded, variants that failed are dropped (the shipped config never is);
    failed_checks lists the failures."""
    module = repo_scripts.load("benchmarks/bwd_variants.py", "bench_bwd_variants_checks")
    report = dict(refused={}, checks={})
    runs = []

    def run_check():
        runs.append(1)
        return {"shipped": False, "a": True, "b": False}

    found = {"shipped": 0, "a": 1, "b": 2}
    for _ in range(2):
        got = module.checked_variants(report, "k", found, {"c": "too big"}, run_check)
        assert got == {"shipped": 0, "a": 1}
    assert runs == [1] and report["refused"] == {"k": {"c": "too big"}}
    assert "left out" in capsys.readouterr().out
    monkeypatch.setattr(module.scripts, "run_meta", lambda device: {"device": device})
    assert module.failed_checks(report) == [("k", "shipped"), ("k", "b")]
    assert report["meta"] == {"device": "cuda"}


def test_fwd_variants_configs_reference_and_usage(capsys):
    """fwd_variants.py: --vary over HopperConfig fields applied to the config a shape runs
    (`hopper.config_for`), the fit test and the config class refusing variants with their
    reasons; its float64 reference (softcap, ALiBi, causal, GQA) against a direct computation;
    rows summarised per head dim and softcap or ALiBi; bad options are usage errors naming
    them."""
    from flashgen.core.spec import KernelSpec
    from flashgen.kernels import hopper

    module = repo_scripts.load("benchmarks/fwd_variants.py", "bench_fwd_variants")
    parse = module._bwd_variants().parse_vary
    from flashgen.core.hopper_config import HopperConfig

    b2 = parse("b2=num_buf:2@64", HopperConfig)
    bad = parse("bad=num_buf:7", HopperConfig)
    spec = KernelSpec(64, True, "bfloat16", "fwd", softcap=True)
    cfgs, refused = module.variants(spec, 4096, [b2, bad])
    assert cfgs["shipped"] == hopper.config_for(spec, 4096) and list(cfgs)[0] == "shipped"
    assert cfgs["b2"] == dataclasses.replace(cfgs["shipped"], num_buf=2)
    assert "num_buf" in refused["bad"]
    cfgs, _ = module.variants(KernelSpec(128, True, "bfloat16", "fwd"), 4096, [b2])
    assert list(cfgs) == ["shipped"]  # @64 only
    huge = parse("huge=num_buf:4,block_m:192,consumers:3@128", HopperConfig)
    cfgs, refused = module.variants(KernelSpec(128, False, "bfloat16", "fwd"), 4096, [huge])
    assert "huge" in refused and "huge" not in cfgs

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 7, 16, generator=gen)
    k, v = (torch.randn(1, 2, 7, 16, generator=gen) for _ in range(2))
    out, lse = module.reference(q, k, v, True, 5.0)
    s = q.double() @ k.double().repeat_interleave(2, 1).transpose(-1, -2) / 4.0
    s = (5.0 * torch.tanh(s / 5.0)).masked_fill(torch.ones(7, 7).triu(1).bool(), -math.inf)
    assert torch.allclose(lse, torch.logsumexp(s, -1))
    assert torch.allclose(out, torch.softmax(s, -1) @ v.double().repeat_interleave(2, 1))
    # ALiBi: the slopes (one per query head, [B, Hq] as the kernel reads them) times j - i
    slopes = module.slopes_for(q, True)
    assert slopes.shape == (1, 4) and module.slopes_for(q, False) is None
    out, lse = module.reference(q, k, v, True, None, slopes)
    s = q.double() @ k.double().repeat_interleave(2, 1).transpose(-1, -2) / 4.0
    s = s + slopes.double()[0, :, None, None] * (
        torch.arange(7.0)[None, :] - torch.arange(7.0)[:, None]
    )
    s = s.masked_fill(torch.ones(7, 7).triu(1).bool(), -math.inf)
    assert torch.allclose(lse, torch.logsumexp(s, -1))
    assert torch.allclose(out, torch.softmax(s, -1) @ v.double().repeat_interleave(2, 1))

    rows = [dict(shape=[1, 2, 2, 8, d], softcap=cap, ratio={"b2": r})
            for d, cap, r in ((64, None, 0.5), (64, None, 2.0), (64, 30.0, 0.9))]  # fmt: skip
    rows.append(dict(shape=[1, 2, 2, 8, 128], softcap=None, alibi=True, ratio={"b2": 1.1}))
    summary = module._bwd_variants().summarise(rows, module.label)
    for start in ("b2 at head dim 64: shipped / variant geomean 1.0000",
                  "b2 at head dim 64 softcap 30.0: shipped / variant geomean 0.9",
                  "b2 at head dim 128 alibi: shipped / variant geomean 1.1"):  # fmt: skip
        assert sum(line.startswith(start) for line in summary) == 1, (start, summary)
    for argv, words in ((["--vary", "a=nope:1"], "nope"), ([], "no --vary"),
                        (["--vary", "a=num_buf:2", "--softcap", "-1"], "positive"),
                        (["--vary", "a=num_buf:2", "--only-softcap"], "needs --softcap"),
                        (["--vary", "a=num_buf:2", "--alibi", "--softcap", "30"], "not with --softcap"),
                        (["--vary", "a=num_buf:2", "--shapes", "99"], "--shapes"),
                        (["--vary", "a=num_buf:2", "--check-dtypes", "float32"], "--check-dtypes")):  # fmt: skip
        with pytest.raises(SystemExit) as exit_:
            module.main(argv)
        assert exit_.value.code == 2 and words in capsys.readouterr().err, argv


def test_vendor_grid_control_spread_and_usage(capsys):
    """vendor_grid.py --control: cuDNN timed twice, the two rows' ratio per shape summarised
    as its range over the grid (medians and paired); it needs sdpa_cudnn among --impls."""
    module = repo_scripts.load("benchmarks/vendor_grid.py", "bench_vendor_grid_control")
    rows = [
        {"fwd_control": 0.99, "fwd_control_paired": 1.0, "fwd_bwd_control": 1.02},
        {"fwd_control": 1.03, "fwd_control_paired": 0.995, "fwd_bwd_control": 0.98,
         "fwd_bwd_control_paired": 1.01},
        {},  # a row timed without the control
    ]  # fmt: skip
    assert module.control_spread(rows) == {
        "fwd": (0.99, 1.03), "fwd paired": (0.995, 1.0), "fwd+bwd": (0.98, 1.02),
        "fwd+bwd paired": (1.01, 1.01),
    }  # fmt: skip
    assert module.control_spread([{}]) == {}
    assert module._control(rows[0]) == "; A/A 0.990x / 1.020x" and module._control({}) == ""
    with pytest.raises(SystemExit) as exit_:
        module.main(["--impls", "op,sdpa_flash", "--control"])
    assert exit_.value.code == 2 and "add sdpa_cudnn" in capsys.readouterr().err


def test_vendor_grid_pairs_each_rounds_readings():
    """vendor_grid.py's paired ratio: the median of the rounds' own ratios (the fastest SDPA
    backend's reading over the op's), None unless both have one reading a round."""
    module = repo_scripts.load("benchmarks/vendor_grid.py", "bench_vendor_grid_paired")
    # the medians' ratio is 1.0 / 2.0 here; the rounds' ratios are 1.0, 0.5 and 2.0
    assert module.paired_ratio([1.0, 1.0, 4.0], [1.0, 2.0, 2.0]) == 1.0
    assert module.paired_ratio([1.0, 3.0, 2.0], [1.0, 3.0, 2.0]) == 1.0
    assert module.paired_ratio([2.0, 2.0, 2.0], [1.0, 1.0, 4.0]) == 2.0
    assert module.paired_ratio(None, [1.0]) is None
    assert module.paired_ratio([1.0, 2.0], [1.0]) is None


def _compiled_smoke(capsys, script: str, *argv: str) -> str:
    """benchmarks/<script>.py's main(["--smoke", *argv]) with Dynamo's caches reset around it
    (each script compiles models of its own), its exit status 0 asserted; what it printed."""
    module = repo_scripts.load(f"benchmarks/{script}.py", f"bench_{script}_smoke")
    torch._dynamo.reset()
    try:
        assert module.main(["--smoke", *argv]) == 0
    finally:
        torch._dynamo.reset()
    return capsys.readouterr().out


@pytest.mark.parametrize("inference", [False, True], ids=["training", "inference"])
def test_llama_block_smoke(capsys, inference):
    """benchmarks/llama_block.py on the CPU (--smoke): the block compiled both ways, checked
    against float32 and timed; --inference runs it under torch.no_grad, forward only, so the
    compiled graph has no backward and its timing no fwd_bwd row."""
    out = _compiled_smoke(capsys, "llama_block", *(["--inference"] if inference else []))
    assert "check ok=True replaced=1" in out
    assert out.count("inductor ") == (1 if inference else 2)
    assert ("fwd_bwd" in out) is not inference


@pytest.mark.parametrize(
    "argv",
    [["bloom"], ["llama"], ["bert", "--attn", "sdpa"], ["deepseek_v3", "--attn", "eager"],
     ["t5", "--attn", "eager"], ["bert", "--attn", "eager", "--attn-dropout", "0.1"]],
    ids=lambda a: "-".join(a),
)  # fmt: skip
def test_hf_padded_smoke(capsys, argv):
    """benchmarks/hf_padded.py on the CPU (--smoke): a left-padded HF model compiled both ways,
    its attention replaced (BLOOM: its ALiBi read as a bias beside the padding; BERT: its
    bidirectional mask as the padding per key; DeepSeek-V3: latent attention, its values of
    another head dim; T5's encoder: its relative position bias and the padding as one additive
    mask; BERT's eager attention with attention dropout: its additive padding read one row, per
    key, and no check against float32), checked against float32 and timed forward and
    forward+backward."""
    out = _compiled_smoke(capsys, "hf_padded", "--family", *argv)
    assert "check ok=True replaced=1" in out
    if "--attn-dropout" in argv:
        assert "False + add mask per key + dropout 0.1" in out, out
    elif argv[0] == "bert":
        assert "False + bool mask per key" in out, out
    if argv[0] == "t5":
        assert "False + add mask" in out, out
    if argv[0] == "deepseek_v3":
        assert "values of head dim" in out, out
    assert out.count("inductor ") == 2 and "fwd_bwd" in out


def test_swin_train_smoke(capsys):
    """benchmarks/swin_train.py on the CPU (--smoke): a small HF Swin v2 compiled both ways,
    every site replaced (the per-head factor into q, the shifted block's mask per window),
    its output and parameter gradients checked against float32 and timed forward and in
    training."""
    out = _compiled_smoke(capsys, "swin_train")
    assert "check ok=True replaced=4 kept=0" in out, out
    assert out.count("1 x per head") == 4 and "train " in out and "fwd " in out, out


def test_alibi_decode_smoke(capsys):
    """benchmarks/alibi_decode.py on the CPU (--smoke): ALiBi over a KV cache (a decode step and
    a 4-row draft) compiled both ways, the site replaced (bottom-right causal + ALiBi, which
    the decode kernels run), checked against float32 eager and timed."""
    out = _compiled_smoke(capsys, "alibi_decode")
    assert out.count("replaced 1 ") == 2 and out.count("ok=True") == 2, out


def test_transformer_masks_smoke(capsys):
    """benchmarks/transformer_masks.py on the CPU (--smoke): nn.Transformer with a causal
    tgt_mask and padding masks compiled both ways, its three attention sites replaced, checked
    against float32 (a random-weighted loss: the model ends in a LayerNorm) and timed."""
    out = _compiled_smoke(capsys, "transformer_masks")
    assert "check ok=True replaced=3" in out
    assert out.count("inductor ") == 2 and "fwd_bwd" in out


def test_masks_ab_alternates_trees_and_checks_once(tmp_path):
    """benchmarks/masks_ab.sh with `timeout` stubbed (it logs the tree on PYTHONPATH and the
    masks.py arguments, and prints a row as masks.py does): old and new alternate REPS times,
    each run in its own process with its tree first on PYTHONPATH, only the new tree's first
    run checks against float64, and each run's rows are printed, cut to the ratio."""
    import shutil
    import subprocess

    tree, stubs, out = tmp_path / "tree", tmp_path / "stubs", tmp_path / "out"
    for folder in (tree / "benchmarks", stubs, out):
        folder.mkdir(parents=True)
    shutil.copy(repo_scripts.ROOT / "benchmarks" / "masks_ab.sh", tree / "benchmarks")
    (stubs / "timeout").write_text(
        '#!/bin/bash\necho "$PYTHONPATH $*" >> "$CALLS"\n'
        'echo "name=r b=4 hq=16 dir=fwd flashgen_ms=1.0 sdpa_ms=2.0 ratio_vs_plain=0.5 '
        'speedup_vs_sdpa=2.0"\n'
    )
    (stubs / "timeout").chmod(0o755)
    env = dict(PATH=f"{stubs}:/usr/bin:/bin", CALLS=str(tmp_path / "calls"))
    done = subprocess.run(
        ["bash", "benchmarks/masks_ab.sh", "/OLD", "/NEW", str(out), "a,b", "1,2,1,64,16", "2"],
        cwd=tree, env=env, check=True, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    calls = (tmp_path / "calls").read_text().splitlines()
    assert [c.split()[0] for c in calls] == ["/tmp/site:/OLD", "/tmp/site:/NEW"] * 2
    assert ["--no-check" in c for c in calls] == [True, False, True, True]
    assert all("--only a,b" in c and "--shape 1,2,1,64,16" in c for c in calls)
    assert f"--out {out}/masks_new_2.csv" in calls[3]
    assert done.stdout.count("name=r fwd flashgen_ms=1.0 ratio=0.5") == 4


def test_bwd_thread_splits_the_grad_call_on_the_cpu(tmp_path):
    """bwd_thread.py on CPU tensors (Triton's interpreter; the engine runs CPU graphs on the
    calling thread, so the figures mean nothing): every case and mode reported, flashgen's and
    the identity node's spans present and adding up to at most the whole call, and
    `_PlainAttention.backward` itself again afterwards."""
    import json

    from flashgen.runtime import autograd as fg_autograd

    before = fg_autograd._PlainAttention.__dict__["backward"]
    module = repo_scripts.load("benchmarks/bwd_thread.py", "bench_bwd_thread")
    out = tmp_path / "t.json"
    argv = ["--device", "cpu", "--calls", "2", "--rounds", "1", "--shape", "1,1,16,16"]
    assert module.main([*argv, "--out", str(out)]) == 0
    assert fg_autograd._PlainAttention.__dict__["backward"] is before
    cases = json.loads(out.read_text())["cases"]
    modes = ("threads", "calling_thread")
    names = ("flashgen", "sdpa", "sdpa+identity")
    assert set(cases) == {f"{n} [{m}]" for n in names for m in modes}
    for mode in modes:
        assert set(cases[f"sdpa [{mode}]"]) == {"total"}
        for name in ("flashgen", "sdpa+identity"):
            parts = cases[f"{name} [{mode}]"]
            assert set(parts) == {"total", "enter", "body", "leave"}
            assert parts["body"] > 0 and parts["enter"] + parts["body"] + parts["leave"] <= (
                parts["total"] * 1.001 + 1.0
            )
