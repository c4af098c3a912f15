"""The tuner end to end on the CPU: Triton's interpreter checks the candidates, the cost model
ranks them, real SQLite / PostgreSQL databases hold the trials, records and Optuna studies.

Specs are tiny (head dim 16, forward) and trial counts small, so the module runs in well under
three minutes on one core. PostgreSQL cases are marked `postgres` and each creates its own
database inside FLASHGEN_TEST_PG_URL's server.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import subprocess
import sys

import pytest

from flashgen.cli import main as cli_main
from flashgen.core.config import TileConfig
from flashgen.core.spec import KernelSpec
from flashgen.db import connect
from flashgen.db.records import TuningRecord
from flashgen.hardware.sram import KNOWN_GPUS, current_device, fits
from flashgen.runtime.lookup import current_fingerprint
from flashgen.tune import bench, evaluate, history, sdpa, search, studies, tasks
from flashgen.tune import space as search_space

H200 = KNOWN_GPUS["nvidia-h200"]
SPEC = KernelSpec(16, False, "float16", "fwd")
BUCKET = (64, 64)
TASK = tasks.Task(SPEC, BUCKET)


@pytest.fixture
def sqlite_url(tmp_path):
    return f"sqlite:///{tmp_path / 'tuning.sqlite3'}"


class Spy:
    """Wraps a real evaluator and remembers what reached it (it still does all the work)."""

    def __init__(self, inner, fail_on: TileConfig | None = None) -> None:
        self.inner = inner
        self.measured = inner.measured
        self.started: list[TileConfig] = []
        self.finished: list[TileConfig] = []
        self.fail_on = fail_on

    def start(self, task, cfg):
        self.started.append(cfg)
        self.inner.start(task, cfg)

    def finish(self, task, cfg):
        self.finished.append(cfg)
        if cfg == self.fail_on:
            raise RuntimeError("injected failure for this config")
        return self.inner.finish(task, cfg)

    def close(self):
        self.inner.close()


def _tune(db, *, device=H200, settings=None, evaluator=None, task=TASK, on_event=None):
    evaluator = evaluator or evaluate.ModelledEvaluator(device)
    return search.tune_task(
        task,
        db=db,
        storage=studies.open_storage(db),
        evaluator=evaluator,
        device=device,
        env=current_fingerprint(device),
        settings=settings or tasks.Settings(trials=4, patience=None, seed=3),
        on_event=on_event,
    )


def _tune_on_this_gpu(url, spec, seq, settings, *, compile_workers):
    """`_tune` of the task (spec, (seq, seq)) into a new database at `url`, measured on this
    machine's GPU (MeasuredEvaluator, warmup 5, rep 20, closed afterwards) for the GPU tests:
    (db, device, evaluator, result)."""
    device = current_device()
    db = connect(url)
    task = tasks.Task(spec, (seq, seq))
    evaluator = evaluate.MeasuredEvaluator(compile_workers=compile_workers, warmup=5, rep=20)
    try:
        result = _tune(db, device=device, task=task, evaluator=evaluator, settings=settings)
    finally:
        evaluator.close()
    return db, device, evaluator, result


def _study(db, task=TASK, device=H200):
    import optuna

    name = studies.study_name(task.spec, task.bucket, current_fingerprint(device).key())
    return optuna.load_study(study_name=name, storage=studies.open_storage(db))


def test_pipeline_writes_modelled_record_and_trials(db_url):
    db = connect(db_url)
    result = _tune(db)
    assert result.best_config is not None and math.isfinite(result.best_ms)
    assert result.evaluated == 4 and not result.measured
    env = current_fingerprint(H200)
    rec = db.get(SPEC, BUCKET, env)
    assert rec is not None and rec.measured is False
    assert rec.config == result.best_config and rec.time_ms == pytest.approx(result.best_ms)
    assert fits(SPEC, rec.config, H200)
    trials = db.trials(SPEC, BUCKET, env)
    ok = [t for t in trials if t.status == "ok"]
    assert len(ok) == 4 and min(t.time_ms for t in ok) == pytest.approx(rec.time_ms)
    # The winner really is correct: re-check it against the float64 reference.
    shape = bench.check_shape(SPEC, BUCKET, interpret=True)
    assert bench.check(SPEC, rec.config, shape, "cpu").ok
    # The study persists beside the records (SQLite file / PostgreSQL): a re-run resumes it.
    again = _tune(db, settings=tasks.Settings(trials=2, patience=None, seed=4))
    assert again.evaluated == 2
    assert len([t for t in db.trials(SPEC, BUCKET, env) if t.status == "ok"]) == 6
    assert again.best_ms <= result.best_ms
    from optuna.trial import TrialState

    complete = [t for t in again.study.trials if t.state == TrialState.COMPLETE]
    assert len(complete) >= 6  # the first run's trials are in the resumed study


def test_seeds_come_first(sqlite_url):
    """Defaults table, then this bucket's best from another environment (GPU), then this
    GPU's best for the other 16-bit dtype, then this GPU's best at a neighbouring bucket."""
    db = connect(sqlite_url)
    env = current_fingerprint(H200)
    other_gpu = dataclasses.replace(env, gpu_name="NVIDIA A100-SXM4-80GB", capability="8.0")
    neighbour = TileConfig(32, 16, 2, 2)
    foreign = TileConfig(16, 32, 2, 3)
    sibling = TileConfig(32, 32, 2, 1)
    db.upsert_best(TuningRecord(SPEC, (128, 128), env, neighbour, 1.0, measured=False))
    db.upsert_best(TuningRecord(SPEC, BUCKET, other_gpu, foreign, 1.0))
    db.upsert_best(TuningRecord(SPEC.sibling(), (256, 256), env, sibling, 1.0))
    result = _tune(db, settings=tasks.Settings(trials=4, patience=None, model_seeds=0))
    from flashgen.hardware.tiles import default_config

    first = [
        TileConfig(**t.params) for t in sorted(result.study.trials, key=lambda t: t.number)[:4]
    ]
    assert first == [default_config(SPEC, H200), foreign, sibling, neighbour]


def test_default_seed_can_be_left_out(sqlite_url):
    """`Settings(default_seed=False)`: the defaults table's config is not enqueued (what the
    tuner benchmark measures the search without); records still come first, and the result
    still names the default config."""
    from flashgen.hardware.tiles import default_config

    db = connect(sqlite_url)
    env = current_fingerprint(H200)
    neighbour = TileConfig(32, 16, 2, 2)
    assert neighbour != default_config(SPEC, H200)
    db.upsert_best(TuningRecord(SPEC, (128, 128), env, neighbour, 1.0, measured=False))
    settings = tasks.Settings(trials=1, patience=None, model_seeds=0, default_seed=False)
    result = _tune(db, settings=settings)
    [first] = result.study.trials[:1]
    assert TileConfig(**first.params) == neighbour
    assert result.default_config == default_config(SPEC, H200)


class Retimer(Spy):
    """An evaluator whose second reading (the end-of-search confirmation) reverses the first:
    the model's favourite now reads slowest, each time above every first reading."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.retimed: list[list[TileConfig]] = []

    def retime(self, task, cfgs):
        self.retimed.append(list(cfgs))
        return {cfg: 10.0 - i for i, cfg in enumerate(cfgs)}


def test_confirmation_retimes_the_finalists_and_supersedes_their_record(sqlite_url):
    db = connect(sqlite_url)
    evaluator = Retimer(evaluate.ModelledEvaluator(H200))
    settings = tasks.Settings(trials=5, patience=None, seed=3, confirm=3)
    result = _tune(db, settings=settings, evaluator=evaluator)
    [finalists] = evaluator.retimed
    assert len(finalists) == 3
    assert result.best_config == finalists[-1] and result.best_ms == 8.0
    assert result.confirmed == {cfg: 10.0 - i for i, cfg in enumerate(finalists)}
    # The record is the confirmed winner at its confirmed time, though the first readings of
    # the finalists (which it supersedes) were all lower.
    rec = db.get(SPEC, BUCKET, current_fingerprint(H200))
    assert (rec.config, rec.time_ms) == (finalists[-1], 8.0)
    # confirm below 2 (or an evaluator without `retime`) leaves the search's readings alone.
    evaluator = Retimer(evaluate.ModelledEvaluator(H200))
    again = _tune(
        connect(f"{sqlite_url}-2"),
        settings=dataclasses.replace(settings, confirm=0),
        evaluator=evaluator,
    )
    assert evaluator.retimed == [] and again.confirmed == {} and again.best_ms < 8.0


def test_pruned_configs_never_reach_the_compiler(sqlite_url, monkeypatch):
    """With a small shared-memory budget most configs do not fit: they must be told PRUNED
    without being rendered, compiled or run."""
    small = dataclasses.replace(H200, smem_optin_bytes=12 * 1024)
    import flashgen.kernels.codegen as codegen

    rendered: list[KernelSpec] = []
    real_render = codegen.render
    monkeypatch.setattr(codegen, "render", lambda spec: rendered.append(spec) or real_render(spec))
    checked: list[TileConfig] = []
    real_check = bench.check
    monkeypatch.setattr(
        bench,
        "check",
        lambda spec, cfg, *a, **k: checked.append(cfg) or real_check(spec, cfg, *a, **k),
    )
    db = connect(sqlite_url)
    spy = Spy(evaluate.ModelledEvaluator(small))
    result = _tune(
        db,
        device=small,
        evaluator=spy,
        settings=tasks.Settings(trials=5, patience=None, model_seeds=0),
    )
    assert result.pruned > 0
    assert spy.finished and all(fits(SPEC, c, small) for c in spy.started + spy.finished)
    assert checked and all(fits(SPEC, c, small) for c in checked)
    pruned = [t for t in db.trials(SPEC, BUCKET) if t.status == "pruned"]
    assert len(pruned) == result.pruned
    assert not any(t.config in checked for t in pruned)
    assert set(rendered) <= {SPEC}


def test_failing_candidate_costs_only_that_trial(sqlite_url):
    from flashgen.hardware.tiles import default_config

    db = connect(sqlite_url)
    bad = default_config(SPEC, H200)  # the first trial: the study must go on after it
    spy = Spy(evaluate.ModelledEvaluator(H200), fail_on=bad)
    result = _tune(db, evaluator=spy, settings=tasks.Settings(trials=4, patience=None))
    assert result.evaluated == 4 and result.failed == 1
    assert result.best_config is not None and result.best_config != bad
    failed = [t for t in db.trials(SPEC, BUCKET) if t.status == "failed"]
    assert [t.config for t in failed] == [bad] and "injected failure" in failed[0].error
    assert math.isinf(result.default_ms) and math.isnan(result.gain)


def test_wrong_result_is_recorded_as_wrong(sqlite_url, monkeypatch):
    """A kernel whose output disagrees with the reference is 'wrong', never timed or stored."""
    import flashgen.kernels.fwd as fwd
    from flashgen.hardware.tiles import default_config

    real_forward = fwd.forward
    bad = default_config(SPEC, H200)  # always tried first

    def broken(q, k, v, *, causal, scale, config=None):
        out, lse = real_forward(q, k, v, causal=causal, scale=scale, config=config)
        return (out + 0.5 if config == bad else out), lse

    monkeypatch.setattr(fwd, "forward", broken)
    db = connect(sqlite_url)
    result = _tune(db, settings=tasks.Settings(trials=4, patience=None))
    wrong = [t for t in db.trials(SPEC, BUCKET) if t.status == "wrong"]
    assert [t.config for t in wrong] == [bad] and wrong[0].time_ms is None
    assert "out: max error" in wrong[0].error
    assert result.best_config is not None and result.best_config != bad
    assert all(r.config != bad for r in db.records(SPEC))


def test_interrupt_keeps_finished_trials(db_url):
    db = connect(db_url)
    seen = []

    def stop_after_two(event):
        seen.append(event)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(tasks.Interrupted) as info:
        _tune(db, on_event=stop_after_two, settings=tasks.Settings(trials=10, patience=None))
    partial = info.value.result
    assert partial.interrupted and partial.evaluated == 2
    env = current_fingerprint(H200)
    assert len([t for t in db.trials(SPEC, BUCKET, env) if t.status == "ok"]) == 2
    rec = db.get(SPEC, BUCKET, env)
    assert rec is not None and rec.config == partial.best_config
    from optuna.trial import TrialState

    states = [t.state for t in partial.study.trials]
    assert states.count(TrialState.COMPLETE) == 2 and TrialState.RUNNING not in states


def test_a_ctrl_c_whose_exception_was_lost_still_stops_the_search(sqlite_url):
    """The tuner's SIGINT handler remembers the signal (`flashgen.tune.interrupts`): where its
    KeyboardInterrupt is swallowed (C code clearing any error), the search stops at the next
    candidate with what it finished, as after a Ctrl-C that got through."""
    import signal

    from flashgen.tune import interrupts

    db = connect(sqlite_url)
    seen = []

    def swallowed_after_two(event):
        seen.append(event)
        if len(seen) == 2:
            with contextlib.suppress(KeyboardInterrupt):  # what a careless extension does
                interrupts._on_sigint(signal.SIGINT, None)

    interrupts.reset()
    try:
        with pytest.raises(tasks.Interrupted) as info:
            _tune(
                db, on_event=swallowed_after_two, settings=tasks.Settings(trials=10, patience=None)
            )
    finally:
        interrupts.reset()
    partial = info.value.result
    assert partial.interrupted and partial.evaluated == 2
    env = current_fingerprint(H200)
    assert len([t for t in db.trials(SPEC, BUCKET, env) if t.status == "ok"]) == 2


def test_a_ctrl_c_lost_after_the_last_candidate_still_stops_the_run(sqlite_url, monkeypatch):
    """`runner.tune_all` asks once more after its last task: a SIGINT whose exception was lost
    after the search's last check (in the last task's bookkeeping) still ends the run as
    stopped, with every task's result, so the CLI prints them and exits 130."""
    import argparse

    from flashgen.tune import interrupts, runner

    done = []

    def last_task_loses_its_ctrl_c(task, **_):
        done.append(task)
        if len(done) == 2:
            interrupts.remember()  # the handler ran; its KeyboardInterrupt never arrived
        return f"result {len(done)}"

    monkeypatch.setattr(search, "tune_task", last_task_loses_its_ctrl_c)
    args = argparse.Namespace(workers=1, journal=None, quiet=True, seed=0, compile_workers=None)
    opts = {"trials": 3, "patience": None}
    interrupts.reset()
    try:
        with pytest.raises(runner.Stopped) as info:
            runner.tune_all(args, opts, [TASK, TASK], connect(sqlite_url), False, worker=0)
        assert info.value.results == ["result 1", "result 2"]
        interrupts.reset()
        assert runner.tune_all(args, opts, [TASK], connect(sqlite_url), False, 0) == ["result 3"]
    finally:
        interrupts.reset()


def test_the_tuner_takes_sigint_only_from_pythons_default_handler():
    """`interrupts.install` replaces Python's default SIGINT handler (the CLI's case), leaves an
    ignored SIGINT (nohup, a worker past its first Ctrl-C) ignored, and starts a run with no
    SIGINT remembered."""
    import signal

    from flashgen.tune import interrupts

    before = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        interrupts.install()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        signal.signal(signal.SIGINT, signal.default_int_handler)
        interrupts.remember()  # a Ctrl-C of an earlier run in this process is forgotten
        interrupts.install()
        assert signal.getsignal(signal.SIGINT) is interrupts._on_sigint
        assert not interrupts.interrupted()
    finally:
        signal.signal(signal.SIGINT, before)
        interrupts.reset()


def test_patience_stops_early(sqlite_url):
    db = connect(sqlite_url)
    result = _tune(db, settings=tasks.Settings(trials=40, patience=3, seed=0))
    assert result.stop_reason.startswith("no gain")
    assert result.evaluated < 40


def test_cli_help_and_tiny_run(sqlite_url, capsys):
    help_out = subprocess.run(
        [sys.executable, "-m", "flashgen.cli", "tune", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert help_out.returncode == 0 and "--pending" in help_out.stdout
    assert "interpreter" in help_out.stdout
    argv = ["tune", "--head-dim", "16", "--dtype", "float16", "--causal", "false"]
    argv += ["--seq-len", "64,100", "--direction", "fwd", "--trials", "3", "--quiet"]
    assert cli_main(argv + ["--db", sqlite_url]) == 0
    out = capsys.readouterr()
    assert out.err == ""  # --quiet: no banner, no bars; the summary is on stdout
    assert "attn_fwd_d16_full_f16" in out.out and "64x64" in out.out and "128x128" in out.out
    assert "modelled" in out.out
    db = connect(sqlite_url)
    assert {r.bucket for r in db.records(SPEC)} == {(64, 64), (128, 128)}


def test_cli_tunes_mask_tensor_kernels(sqlite_url, capsys):
    """`flashgen tune --attn-mask add --lengths` tunes the kernel HF's additive key padding
    runs (its record under that spec; the candidates checked with a mask:
    `flashgen.tune.bench.bench_mask`); --pending refuses the flag like the other kinds."""
    argv = ["tune", "--head-dim", "16", "--dtype", "float16", "--causal", "false", "--seq-len",
            "64", "--direction", "fwd", "--attn-mask", "add", "--lengths", "--trials", "2",
            "--quiet", "--db", sqlite_url]  # fmt: skip
    assert cli_main(argv) == 0
    assert "attn_fwd_d16_fulllenbias_f16" in capsys.readouterr().out
    spec = KernelSpec(16, False, "float16", "fwd", lengths=True, attn_mask="add")
    assert [r.bucket for r in connect(sqlite_url).records(spec)] == [(64, 64)]
    assert cli_main(["tune", "--pending", "--attn-mask", "bool", "--db", sqlite_url]) == 2
    assert "--attn-mask" in capsys.readouterr().err


def test_cli_pending_tunes_and_clears(sqlite_url, capsys):
    db = connect(sqlite_url)
    db.record_pending(SPEC, (32, 32))
    argv = ["tune", "--pending", "--trials", "2", "--quiet", "--db", sqlite_url]
    assert cli_main(argv) == 0
    assert db.pending() == []
    assert [r.bucket for r in db.records(SPEC)] == [(32, 32)]
    assert "32x32" in capsys.readouterr().out


def test_cost_model_favourites_are_seeded(sqlite_url):
    db = connect(sqlite_url)
    space_ = search_space.Space(SPEC, H200)
    favourites = search_space.model_ranked(TASK, H200, space_.fitting(), 2)
    result = _tune(db, settings=tasks.Settings(trials=3, patience=None, model_seeds=2))
    first = [
        TileConfig(**t.params) for t in sorted(result.study.trials, key=lambda t: t.number)[:3]
    ]
    assert set(favourites) <= set(first) and len(favourites) == 2
    assert result.best_config == favourites[0]  # the modelled evaluator agrees with itself


@pytest.mark.postgres
def test_two_worker_processes_share_one_postgres_study(pg_url):
    url = pg_url
    cmd = [sys.executable, "-m", "flashgen.cli", "tune", "--db", url, "--workers", "2"]
    cmd += ["--head-dim", "16", "--dtype", "float16", "--causal", "false"]
    cmd += ["--seq-len", "64", "--direction", "fwd", "--trials", "6", "--patience", "0"]
    cmd += ["--quiet"]
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=150, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "attn_fwd_d16_full_f16" in proc.stdout
    import optuna

    db = connect(url)
    storage = studies.open_storage(db)
    [name] = [
        n
        for n in optuna.get_all_study_names(storage)
        if n.startswith(f"flashgen:{SPEC.uri()}:64x64:")
    ]
    study = optuna.load_study(study_name=name, storage=storage)
    evaluated = [t for t in study.trials if t.user_attrs.get("evaluated")]
    workers = {t.user_attrs["worker"] for t in evaluated}
    assert len(workers) == 2, workers
    fresh = [t for t in evaluated if not t.user_attrs.get("duplicate")]
    configs = [tuple(t.params[p] for p in search_space.PARAMS) for t in fresh]
    # Both workers stop once the study holds 6 evaluated configs; a config rarely runs
    # twice (both workers asked it in the same instant).
    assert len(set(configs)) >= 6 and len(configs) <= 9, configs
    [rec] = [r for r in db.records(SPEC) if r.bucket == BUCKET]
    assert rec.measured is False


@pytest.mark.postgres
def test_stale_trial_of_a_dead_worker_is_retried(pg_url):
    """A worker that asked a trial and died: its heartbeat goes stale, the next worker fails it
    and runs the same config again (RetryHeartbeatStaleTrialCallback)."""
    import time

    import optuna
    from optuna.trial import TrialState

    url = pg_url
    db = connect(url)
    storage = studies.open_storage(db, heartbeat_interval=1, grace_period=2)
    env = current_fingerprint(H200)
    name = studies.study_name(SPEC, BUCKET, env.key())
    study = optuna.create_study(storage=storage, study_name=name, direction="minimize")
    orphan = TileConfig(32, 32, 2, 2)
    study.enqueue_trial(orphan.as_dict())
    with studies.optuna_quiet():
        dead = study.ask()
        search_space.Space(SPEC, H200).suggest(dead)
        storage.record_heartbeat(dead._trial_id)
    time.sleep(3)
    search.tune_task(
        TASK,
        db=db,
        storage=storage,
        evaluator=evaluate.ModelledEvaluator(H200),
        device=H200,
        env=env,
        settings=tasks.Settings(trials=3, patience=None),
    )
    trials = optuna.load_study(study_name=name, storage=storage).trials
    assert trials[dead.number].state == TrialState.FAIL
    rerun = [
        t
        for t in trials[dead.number + 1 :]
        if t.state == TrialState.COMPLETE and t.params == orphan.as_dict()
    ]
    assert rerun, [(t.number, t.state, t.params) for t in trials]


@pytest.mark.gpu
def test_gpu_measured_tuning_with_compile_pool(sqlite_url):
    """On the GPU: candidates compile in worker processes, are checked and timed; the record is
    measured and the compile workers really ran (warm_stats)."""
    spec = KernelSpec(64, True, "float16", "fwd")
    settings = tasks.Settings(trials=4, patience=None, lookahead=2)
    db, device, evaluator, result = _tune_on_this_gpu(
        sqlite_url, spec, 256, settings, compile_workers=2
    )
    assert result.measured and result.evaluated == 4
    assert evaluator.warm_stats["ok"] >= 3, evaluator.warm_stats
    rec = db.get(spec, (256, 256), current_fingerprint(device))
    assert rec is not None and rec.measured and rec.time_ms > 0 and rec.tflops > 0


def test_ctrl_c_on_the_cli_keeps_trials_and_exits_130(sqlite_url):
    """SIGINT to a running `flashgen tune`: exit status 130, finished trials and the best so far
    are in the database."""
    import signal
    import time

    import sqlalchemy as sa

    cmd = [sys.executable, "-m", "flashgen.cli", "tune", "--db", sqlite_url, "--quiet"]
    # Three more buckets after SPEC/BUCKET (tasks run in the order given), so that the run is
    # still going when the signal comes.
    cmd += ["--head-dim", "16", "--dtype", "float16", "--causal", "false"]
    cmd += ["--seq-len", "64,128,256,512"]
    cmd += ["--direction", "fwd", "--trials", "500", "--patience", "0"]
    # PYTHONFAULTHANDLER: if the process ever hangs after SIGINT, the SIGABRT below makes it
    # print every thread's stack into `err`, so the failure says where it stuck.
    env = dict(os.environ, PYTHONFAULTHANDLER="1")

    # pytest-xdist's workers ignore SIGINT, and an ignored signal stays ignored across exec:
    # Python then installs no KeyboardInterrupt handler, and the child would run to its end and
    # exit 0. Ctrl-C in a terminal reaches a process with the default disposition and SIGINT
    # unblocked (a signal mask is inherited across exec too): restore both.
    def as_from_a_terminal():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=as_from_a_terminal,
    )
    engine = sa.create_engine(sqlite_url)
    deadline = time.monotonic() + 90
    seen = 0
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.3)
            try:
                with engine.connect() as conn:
                    seen = conn.exec_driver_sql(
                        "SELECT count(*) FROM flashgen_trials WHERE status = 'ok'"
                    ).scalar()
            except sa.exc.OperationalError:  # table not created yet
                continue
            if seen >= 3:
                break
        assert seen >= 3 and proc.poll() is None, (
            seen,
            proc.poll(),
            proc.stderr.read() if proc.poll() is not None else "",
        )
        # (how the child holds SIGINT, for the message below should it not stop)
        held = _signal_lines(proc.pid)
        proc.send_signal(signal.SIGINT)
        # It exits within seconds; the limit only separates "slow on a loaded machine" from "hung".
        try:
            out, err = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            out, err = proc.communicate(timeout=30)
            pytest.fail(f"no exit within 240 s of SIGINT; stacks:\n{err[-6000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
        engine.dispose()
    assert proc.returncode == 130, (proc.returncode, held, out[-2000:], err[-2000:])
    assert "interrupted" in err
    db = connect(sqlite_url)
    ok = [t for t in db.trials(SPEC, BUCKET) if t.status == "ok"]
    assert len(ok) >= 3
    # (not db.get(..., current_fingerprint()): the environment key includes the template hash,
    # which this test process may have computed before a template edit)
    [rec] = [r for r in db.records(SPEC) if r.bucket == BUCKET]
    assert rec.time_ms == pytest.approx(min(t.time_ms for t in ok)) and not rec.measured


def _signal_lines(pid: int) -> str:
    """A process's signal masks (blocked, ignored, caught; Linux's /proc), or '' elsewhere."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return " ".join(
                line.strip() for line in status if line.startswith(("SigBlk", "SigIgn", "SigCgt"))
            )
    except OSError:
        return ""


@pytest.mark.parametrize("direction", ["fwd", "bwd"])
def test_compile_pool_plumbing_contains_worker_failures(direction):
    """The compile pool's plumbing (spawned workers, pickled specs and configs, futures, the
    backward's extra forward compile and per-task set-up) works here too; without CUDA every
    worker compile fails, and that is reported, never raised, and costs the candidate only."""
    task = tasks.Task(TASK.spec.with_direction(direction), TASK.bucket)
    evaluator = evaluate.MeasuredEvaluator(compile_workers=1, compile_timeout_s=120)
    try:
        evaluator.warm_up()
        assert evaluator.warm_stats["error"] == 0, evaluator.warm_stats  # every worker started
        outcomes = []
        for cfg in (TileConfig(32, 32, 4, 2), TileConfig(32, 32, 4, 1)):
            evaluator.start(task, cfg)
        for cfg in (TileConfig(32, 32, 4, 2), TileConfig(32, 32, 4, 1)):
            outcomes.append(evaluator.finish(task, cfg))
    finally:
        evaluator.close()
    assert all(o.status == "failed" and not o.ok for o in outcomes)
    assert evaluator.warm_stats["error"] == 2 and evaluator.warm_stats["first_error"]
    assert not evaluator._futures  # nothing submitted twice or left behind


def test_lookahead_fills_the_first_round_but_not_past_the_patience():
    """The cost model seeds the whole first round of compiles; no more candidates are asked
    ahead than the early stop could still use (their compiles would be thrown away)."""
    from flashgen.core.config import TileConfig
    from flashgen.tune.bench import Outcome

    settings = tasks.Settings(trials=40, patience=5, lookahead=14)
    assert settings.n_model_seeds() == 14 and settings.n_seeds() == 24
    assert tasks.Settings(lookahead=1).n_model_seeds() == 3
    cfgs = [TileConfig(64, 64, 4, s) for s in (1, 2, 3, 4, 5)]
    known = {cfgs[0]: (0, Outcome("ok", time_ms=1.0))}
    assert history.ahead(known, settings) == 5
    known.update({c: (i + 1, Outcome("ok", time_ms=2.0)) for i, c in enumerate(cfgs[1:4])})
    assert history.ahead(known, settings) == 2
    assert history.ahead(known, tasks.Settings(patience=None, lookahead=14)) == 14


class Comparer(Spy):
    """A 'measured' evaluator on the CPU: the interpreter checks flashgen's candidates, the
    real `sdpa.check_sdpa` checks each SDPA backend against the float64 reference on the CPU
    (flash has a CPU kernel, cuDNN refuses), and times are given: what `compare_impls` must
    turn into the record's winner and ratio."""

    def __init__(self, inner, times) -> None:
        super().__init__(inner)
        self.measured = True
        self.times = times
        self.compared: list = []

    def compare(self, task, cfg, impls):
        self.compared.append((cfg, tuple(impls)))
        shape = bench.check_shape(task.spec, task.bucket, interpret=True)
        times, why = {"flashgen": self.times["flashgen"]}, {}
        for impl in impls:
            outcome = sdpa.check_sdpa(task.spec, impl, shape, "cpu")
            times[impl] = self.times[impl] if outcome.ok else math.inf
            if not outcome.ok:
                why[impl] = outcome.error
        return times, why


def test_check_sdpa_uses_the_float64_reference(monkeypatch):
    for spec in (SPEC, SPEC.with_direction("bwd")):
        shape = bench.check_shape(spec, BUCKET, interpret=True)
        assert sdpa.check_sdpa(spec, "sdpa_flash", shape, "cpu").ok
        refused = sdpa.check_sdpa(spec, "sdpa_cudnn", shape, "cpu")
        assert refused.status == "failed" and refused.error
    # A backend that computes the wrong thing is "wrong", never timed.
    from flashgen.runtime import vendor

    real = vendor.sdpa
    monkeypatch.setattr(vendor, "sdpa", lambda *a, **kw: real(*a, **kw) * 1.01)
    bench._CHECK_CASE.clear()
    assert sdpa.check_sdpa(SPEC, "sdpa_flash", bench.check_shape(SPEC, BUCKET, interpret=True),
                            "cpu").status == "wrong"  # fmt: skip


def test_pick_impl():
    assert sdpa.pick_impl({}) == (None, None)
    assert sdpa.pick_impl({"flashgen": 2.0, "sdpa_cudnn": math.inf}) == ("flashgen", None)
    impl, ratio = sdpa.pick_impl({"flashgen": 2.0, "sdpa_cudnn": 1.6, "sdpa_flash": 3.0})
    assert impl == "sdpa_cudnn" and ratio == pytest.approx(1.25)
    assert sdpa.pick_impl({"flashgen": 1.0, "sdpa_flash": 1.0}) == ("flashgen", 1.0)


@pytest.mark.parametrize(
    "times, winner, ratio",
    [
        ({"flashgen": 2.0, "sdpa_cudnn": 1.0, "sdpa_flash": 1.6, "sdpa_efficient": 5.0},
         "sdpa_flash", 1.25),  # cuDNN refuses on the CPU: flash wins, flashgen is runner-up
        ({"flashgen": 1.0, "sdpa_cudnn": 1.0, "sdpa_flash": 1.5, "sdpa_efficient": 5.0},
         "flashgen", 1.5),
    ],
    ids=["sdpa-wins", "flashgen-wins"],
)  # fmt: skip
def test_the_record_names_the_winner_and_keeps_flashgens_config(sqlite_url, times, winner, ratio):
    db = connect(sqlite_url)
    evaluator = Comparer(evaluate.ModelledEvaluator(H200), times)
    result = _tune(
        db, settings=tasks.Settings(trials=3, patience=None, seed=3), evaluator=evaluator
    )
    rec = db.get(SPEC, BUCKET, current_fingerprint(H200))
    [(compared_cfg, impls)] = evaluator.compared
    assert compared_cfg == rec.config == result.best_config  # flashgen's own best is kept
    assert impls == ("sdpa_cudnn", "sdpa_flash", "sdpa_efficient")
    assert (rec.impl, rec.impl_ratio) == (winner, pytest.approx(ratio))
    assert (result.impl, result.impl_ratio) == (winner, pytest.approx(ratio))
    assert result.impl_times["sdpa_cudnn"] == math.inf and "sdpa_cudnn" in result.impl_notes
    from flashgen.tune.summary import format_summary

    assert f"{winner} {ratio:.2f}x" in format_summary([result])
    # Without SDPA backends to time (--no-sdpa) the record says nothing about a winner.
    other = connect(f"{sqlite_url}-2")
    evaluator = Comparer(evaluate.ModelledEvaluator(H200), times)
    settings = tasks.Settings(trials=2, patience=None, impls=())
    result = _tune(other, settings=settings, evaluator=evaluator)
    rec = other.get(SPEC, BUCKET, current_fingerprint(H200))
    assert evaluator.compared == [] and (rec.impl, rec.impl_ratio) == ("flashgen", None)
    assert "flashgen (not compared)" in format_summary([result])


@pytest.mark.gpu
def test_gpu_tuning_compares_with_sdpa_backends(sqlite_url):
    """On the GPU the end of a task times the SDPA backends against flashgen's best and the
    record names the winner with a ratio >= 1; cuDNN or flash accepts a bf16 hd64 case."""
    spec = KernelSpec(64, True, "bfloat16", "bwd")
    settings = tasks.Settings(trials=2, patience=None)
    db, device, _, result = _tune_on_this_gpu(sqlite_url, spec, 512, settings, compile_workers=0)
    rec = db.get(spec, (512, 512), current_fingerprint(device))
    assert rec.compared and rec.impl_ratio >= 1.0 and rec.impl == result.impl
    assert math.isfinite(result.impl_times["flashgen"])
    assert math.isfinite(result.impl_times["sdpa_cudnn"]) or math.isfinite(
        result.impl_times["sdpa_flash"]
    )


def test_both_evaluators_implement_the_protocol():
    from flashgen.hardware.sram import current_device

    modelled = evaluate.ModelledEvaluator(current_device())
    measured = evaluate.MeasuredEvaluator(compile_workers=0)
    for evaluator in (modelled, measured):
        assert isinstance(evaluator, evaluate.Evaluator)
        evaluator.close()
    assert not isinstance(object(), evaluate.Evaluator)


def test_runtime_launcher_times_the_hopper_forward_where_the_run_time_takes_it(monkeypatch):
    """The implementation comparison times what the op would launch: for a forward the Hopper
    family takes, `fwd.forward` without the record's portable config (which that family does
    not use); otherwise, and for every backward, the candidate launcher with the config."""
    import torch

    from flashgen.kernels import fwd, hopper
    from flashgen.tune import bench

    calls = []
    monkeypatch.setattr(fwd, "forward", lambda *a, **kw: calls.append(kw) or "ran")
    spec = KernelSpec(64, False, "float32", "fwd")
    cfg = TileConfig(16, 16, 1, 1)
    q = k = v = torch.zeros(1, 1, 16, 64)
    asked = []
    for taken in (True, False):
        monkeypatch.setattr(
            hopper, "choose", lambda *a, taken=taken, **kw: asked.append(kw) or taken
        )
        calls.clear()
        assert bench.runtime_launcher(spec, cfg, q, k, v)() == "ran"
        assert ("config" in calls[0]) is not taken
        if not taken:
            assert calls[0]["config"] == cfg
    # a mask spec is timed with a key-padding mask (`bench_mask`): asked as one
    assert [kw.get("per_key") for kw in asked] == [False, False]
    masked = KernelSpec(64, False, "float32", "fwd", attn_mask="bool")
    bench.runtime_launcher(masked, cfg, q, k, v)()
    assert asked[-1]["per_key"] is True and calls[-1]["mask"].dtype == torch.bool
    monkeypatch.setattr(hopper, "choose", lambda *a: pytest.fail("asked for a backward"))
    back = bench.runtime_launcher(KernelSpec(64, False, "float32", "bwd"), cfg, q, k, v, q, q, q)
    assert callable(back)


def test_runtime_launcher_times_the_hopper_backward_where_the_run_time_takes_it(monkeypatch):
    """A backward shape that the hopper kind takes by default (`bwd_kind.auto_hopper`) is
    compared with SDPA as that kind, not as the split kind the tuner searched configs for."""
    import torch

    from flashgen.kernels import bwd, bwd_kind
    from flashgen.tune import bench

    calls = []
    monkeypatch.setattr(bwd, "backward", lambda *a, **kw: calls.append(kw) or "ran")
    spec = KernelSpec(128, False, "bfloat16", "bwd")
    cfg = TileConfig(64, 64, 4, 2)
    q = torch.zeros(1, 2, 16, 128)
    asked = []
    for taken in (True, False):
        asked.clear()
        monkeypatch.setattr(
            bwd_kind, "auto_hopper", lambda *a, taken=taken: asked.append(a) or taken
        )
        calls.clear()
        assert bench.runtime_launcher(spec, cfg, q, q, q, q, q, q)() == "ran"
        assert asked == [(False, None, spec, 16, 1)]
        if taken:
            assert calls[0]["kind"] == "hopper" and calls[0]["deterministic"] is False
        else:
            assert calls[0]["kind"] == bwd_kind.resolve_kind(False, None, spec)
        assert calls[0]["config"] == cfg
