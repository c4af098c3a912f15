"""`flashgen tune --gpus`: choosing and pinning GPUs, and several workers on one SQLite database
sharing their studies through a journal file. Without a GPU the workers run the modelled
evaluator; the tests fake the parent's GPU count (`visible_gpu_count`) to start several."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from flashgen.cli import main as cli_main
from flashgen.core.spec import KernelSpec
from flashgen.db import connect
from flashgen.tune import gpus, workers

SPEC = KernelSpec(16, False, "float16", "fwd")
TINY = ["--head-dim", "16", "--dtype", "float16", "--causal", "false", "--direction", "fwd",
        "--patience", "0", "--quiet"]  # fmt: skip


def test_choose_gpus():
    assert gpus.choose_gpus("all", count=3) == [0, 1, 2]
    assert gpus.choose_gpus("2,0", count=3) == [2, 0]
    assert gpus.choose_gpus(" 1 ", count=2) == [1]
    with pytest.raises(ValueError, match="GPU 2 does not exist here: 2 visible"):
        gpus.choose_gpus("0,2", count=2)
    with pytest.raises(ValueError, match="no CUDA GPU"):
        gpus.choose_gpus("all", count=0)
    for bad in ("", "0,", "-1", "1.5", "al", "0,1,0"):
        with pytest.raises(ValueError, match="--gpus"):
            gpus.parse_gpus(bad)


def test_pins_follow_an_outer_cuda_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert workers.pins([0, 1], 1, 2) == ["0", "1"]
    assert workers.pins(None, 3, 2) == ["0", "1", "0"]  # --workers: round-robin
    assert workers.pins(None, 2, 1) == [None, None]  # one GPU or none: not pinned
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,GPU-8f1e,6")
    assert workers.pins([1, 2], 1, 3) == ["GPU-8f1e", "6"]
    assert gpus.worker_label("3") == "gpu3"
    assert gpus.worker_label("0,1") == ""


@pytest.mark.skipif(gpus.visible_gpu_count() > 0, reason="a GPU is present")
def test_gpus_without_a_gpu_is_one_line(tmp_path, capsys):
    target = tmp_path / "t.sqlite3"
    assert cli_main(["tune", "--gpus", "all", "--db", str(target), *TINY]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA GPU" in err[0] and "--workers" in err[0]
    assert not target.exists()


def _trials(url: str) -> list[tuple]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return list(
                conn.exec_driver_sql(
                    "SELECT bucket_q, status, host, block_m, block_n, num_warps, num_stages "
                    "FROM flashgen_trials"
                )
            )
    except sa.exc.OperationalError:  # not created yet
        return []
    finally:
        engine.dispose()


def test_two_faked_gpus_share_studies_in_one_sqlite_file(tmp_path, monkeypatch, capsys):
    """--gpus all with two (faked) GPUs: two pinned workers, one study per task (the trial
    budget is the run's, not each worker's), one record per task, the journal removed."""
    monkeypatch.setattr(gpus, "visible_gpu_count", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    url = f"sqlite:///{tmp_path / 'tuning.sqlite3'}"
    trials = 5
    argv = ["tune", "--gpus", "all", "--db", url, "--seq-len", "64,128", "--trials", str(trials)]
    assert cli_main(argv + TINY) == 0
    out = capsys.readouterr().out
    assert "attn_fwd_d16_full_f16" in out and "64x64" in out and "128x128" in out
    rows = _trials(url)
    hosts = {row[2].rsplit(":", 1)[-1] for row in rows}
    assert hosts == {"gpu0", "gpu1"}, hosts  # each worker ran trials, pinned to its GPU
    for bucket in (64, 128):
        evaluated = [r for r in rows if r[0] == bucket and r[1] != "pruned"]
        # Shared: the study stops at `trials` for both (plus what was in flight); two separate
        # studies would have evaluated `trials` each.
        assert trials <= len(evaluated) <= trials + 1, evaluated
    db = connect(url)
    assert {r.bucket for r in db.records(SPEC)} == {(64, 64), (128, 128)}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("flashgen-tune-")]


_FAKE_TWO_GPUS = textwrap.dedent(
    """
    import sys
    import flashgen.tune.gpus as gpus
    gpus.visible_gpu_count = lambda: 2
    from flashgen.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


@pytest.mark.skipif(sys.platform != "linux", reason="process groups as a terminal makes them")
def test_ctrl_c_stops_every_worker_and_keeps_their_trials(tmp_path):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) during a --gpus run:
    exit 130, the table printed, every finished trial kept, no worker left running."""
    url = f"sqlite:///{tmp_path / 'tuning.sqlite3'}"
    cmd = [sys.executable, "-c", _FAKE_TWO_GPUS, "tune", "--gpus", "all", "--db", url]
    cmd += ["--seq-len", "64,128,256,512", "--trials", "500", *TINY]
    env = dict(os.environ, PYTHONFAULTHANDLER="1", TMPDIR=str(tmp_path))
    env.pop("CUDA_VISIBLE_DEVICES", None)

    def restore_sigint():  # pytest-xdist ignores SIGINT; a terminal's child has the default
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True, preexec_fn=restore_sigint)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        seen: set[str] = set()
        while time.monotonic() < deadline and proc.poll() is None and len(seen) < 2:
            time.sleep(0.3)
            seen = {r[2].rsplit(":", 1)[-1] for r in _trials(url) if r[1] == "ok"}
        assert seen == {"gpu0", "gpu1"} and proc.poll() is None, (seen, proc.poll())
        kept = len(_trials(url))
        os.killpg(proc.pid, signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGABRT)
            out, err = proc.communicate(timeout=30)
            pytest.fail(f"no exit within 180 s of SIGINT; stacks:\n{err[-6000:]}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130, (proc.returncode, out[-2000:], err[-3000:])
    assert "attn_fwd_d16_full_f16" in out and "interrupted" in err
    assert "failed" not in err, err[-3000:]
    left = _group(proc.pid)
    deadline = time.monotonic() + 20  # the resource tracker leaves when its pipe closes
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = _group(proc.pid)
    assert not left, left  # no worker (or compile pool) left running
    assert len(_trials(url)) >= kept
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("flashgen-tune-")]


def _group(pgid: int) -> list[str]:
    """The command lines of the live processes in process group `pgid` (Linux /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                cmdline = Path(f"/proc/{entry}/cmdline").read_text()
                out.append(cmdline.replace("\0", " ")[:200])
        except (OSError, IndexError, ValueError):
            continue
    return out
