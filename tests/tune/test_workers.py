"""Many tuner processes on one PostgreSQL database, and what `flashgen tune --workers N` does
when one of its workers dies.

A new database is where processes race: each creates flashgen's tables (Alembic) and Optuna's
(RDBStorage) on first use. The stress test starts a dozen real processes on a fresh real
PostgreSQL database and releases them at the same instant, after their imports, so the schema
creation overlaps as much as it can.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flashgen.db import connect
from flashgen.tune import workers as tune_workers

# One tuner's start-up on a shared database, as `flashgen tune` does it: open (and migrate) the
# tuning database, build the Optuna storage, join the study, run one trial.
_START_UP = """
import sys, time
from pathlib import Path
import optuna
from flashgen.db import connect
from flashgen.tune.studies import open_storage
url, go, index = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
deadline = time.monotonic() + 120
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.005)
db = connect(url)
storage = open_storage(db)
optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.create_study(
    storage=storage, study_name="shared", direction="minimize", load_if_exists=True
)
trial = study.ask()
study.tell(trial, float(index))
print("ok")
"""


@pytest.mark.postgres
def test_a_dozen_processes_create_the_schema_of_a_new_postgres_database_together(pg_url, tmp_path):
    import optuna

    n = 12
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _START_UP, pg_url, str(go), str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    time.sleep(1.0)  # let the imports finish, so that the database work overlaps
    go.touch()
    outputs = [p.communicate(timeout=240) for p in procs]
    failed = [(i, err[-1500:]) for i, (p, (_, err)) in enumerate(zip(procs, outputs, strict=True))
              if p.returncode]  # fmt: skip
    assert not failed, failed
    db = connect(pg_url)
    from flashgen.tune.studies import open_storage

    study = optuna.load_study(study_name="shared", storage=open_storage(db))
    assert sorted(t.value for t in study.trials) == [float(i) for i in range(n)]
    db.close()


def _tune_cmd(url: str, workers: int, trials: int) -> list[str]:
    cmd = [sys.executable, "-m", "flashgen.cli", "tune", "--db", url, "--workers", str(workers)]
    cmd += ["--head-dim", "16", "--dtype", "float16", "--causal", "false", "--seq-len", "64"]
    cmd += ["--direction", "fwd", "--trials", str(trials), "--patience", "0", "--quiet"]
    return cmd


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out += [int(c) for c in text]
    return out


@pytest.mark.postgres
@pytest.mark.skipif(
    not Path(f"/proc/self/task/{os.getpid()}/children").exists(), reason="needs Linux /proc"
)
def test_parent_fails_and_names_the_worker_that_was_killed(pg_url):
    """A worker killed from outside (as the OOM killer would): the run exits non-zero and says
    which worker died and how, instead of printing a summary and exiting 0."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.Popen(
        _tune_cmd(pg_url, workers=2, trials=6),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 120
        workers: list[int] = []
        while time.monotonic() < deadline and proc.poll() is None:
            workers = [c for c in _children(proc.pid) if b"spawn_main" in _cmdline(c)]
            if len(workers) == 2:
                break
            time.sleep(0.05)
        assert len(workers) == 2 and proc.poll() is None, (workers, proc.poll())
        os.kill(workers[1], signal.SIGKILL)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, (proc.returncode, err[-3000:])
    assert "worker 1 of 2 failed: killed by signal SIGKILL" in err, err[-3000:]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_worker_reports_its_error_and_exits_non_zero(tmp_path):
    """A worker whose work raises sends one line naming its error to the parent and exits with
    status 1 (the parent then names it; see the test above for the parent's side)."""
    import multiprocessing

    receive, report = multiprocessing.get_context("spawn").Pipe(duplex=False)
    missing = tmp_path / "no-such-dir" / "x"
    missing.parent.write_text("a file where a directory should be")
    argv = {"db": f"sqlite:///{missing / 'tuning.sqlite3'}", "quiet": True, "workers": 1}
    with pytest.raises(SystemExit) as stop:
        tune_workers.worker_main(argv, {}, [], 3, report)
    assert stop.value.code == 1
    fingerprint = receive.recv()  # first what it is (the GPU model), then what went wrong
    assert isinstance(fingerprint, dict) and fingerprint["gpu_name"]
    message = receive.recv()
    assert message.startswith("DatabaseError: cannot open tuning database"), message


def test_failure_lines_name_each_worker_and_its_error():
    lines = tune_workers.worker_failures(
        exitcodes=[0, 1, -signal.SIGKILL, 1, 130],
        reports={1: "DatabaseError: cannot open tuning database sqlite:///x: locked"},
    )
    assert lines == [
        "worker 1 of 5 failed: DatabaseError: cannot open tuning database sqlite:///x: locked",
        "worker 2 of 5 failed: killed by signal SIGKILL",
        "worker 3 of 5 failed: exit status 1",
    ]  # 130: stopped by Ctrl-C, not a failure
    assert tune_workers.worker_failures(exitcodes=[0, 0], reports={}) == []


def test_a_run_whose_parent_lost_its_ctrl_c_still_reads_as_stopped():
    """Where the parent's KeyboardInterrupt got lost (`flashgen.tune.interrupts`), the run still
    ends as stopped by Ctrl-C (exit 130) when the handler remembered it or a worker exited 130,
    and only then."""
    from flashgen.tune import interrupts

    interrupts.reset()
    try:
        assert tune_workers._stopped(True, [0, 0])
        assert not tune_workers._stopped(False, [0, 0, 1])
        assert tune_workers._stopped(False, [0, 130])
        interrupts.remember()
        assert tune_workers._stopped(False, [0, 0])
    finally:
        interrupts.reset()
