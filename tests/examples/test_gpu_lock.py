"""examples/common.py's --gpu-lock: runs sharing one GPU warm up together and time alone."""

from __future__ import annotations

import fcntl
import importlib.util
import sys
import threading
import time
from pathlib import Path

import pytest
import repo_scripts
import torch

COMMON = Path(__file__).resolve().parents[2] / "examples" / "common.py"


@pytest.fixture(scope="module")
def common():
    return repo_scripts.load("examples/common.py", "examples_common")


def _can(handle, how) -> bool:
    """Whether another holder (its own open file: flock is per open file) could take it now."""
    try:
        fcntl.flock(handle, how | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(handle, fcntl.LOCK_UN)
    return True


def test_warm_up_is_shared_and_timed_steps_exclusive(common, tmp_path):
    path = tmp_path / "gpu.lock"
    other = open(path, "a")  # noqa: SIM115
    seen = []

    def step(_batch):
        seen.append((_can(other, fcntl.LOCK_SH), _can(other, fcntl.LOCK_EX)))
        return torch.tensor(1.0)

    lock = common.GpuLock(str(path))
    out = common.train(step, [0], warmup=2, steps=3, tokens_per_step=4, device="cpu", lock=lock)
    # Warm-up: others may share (compile alongside) but not time; timed: nobody else at all.
    assert seen == [(True, False)] * 2 + [(False, False)] * 3
    assert out["losses"] == [1.0] * 5 and out["tokens_per_s"] > 0
    assert _can(other, fcntl.LOCK_EX)  # released at the end


def test_timed_steps_wait_for_every_shared_holder(common, tmp_path):
    """A run whose warm-up is done does not time while another run still compiles (holds the
    lock shared); it times as soon as that one lets go."""
    path = tmp_path / "gpu.lock"
    compiling = open(path, "a")  # noqa: SIM115
    fcntl.flock(compiling, fcntl.LOCK_SH)
    warmed = threading.Event()
    calls = []

    def step(_batch):
        calls.append(1)
        if len(calls) == 1:
            warmed.set()
        return torch.tensor(0.5)

    lock = common.GpuLock(str(path))
    run = threading.Thread(target=common.train, args=(step, [0]),
                           kwargs=dict(warmup=1, steps=2, tokens_per_step=1, device="cpu",
                                       lock=lock))  # fmt: skip
    run.start()
    assert warmed.wait(60)
    time.sleep(0.3)  # ample for two more steps, were they not blocked
    assert len(calls) == 1 and run.is_alive()
    fcntl.flock(compiling, fcntl.LOCK_UN)
    run.join(60)
    assert not run.is_alive() and len(calls) == 3


def test_without_a_path_nothing_is_locked(common):
    lock = common.GpuLock(None)
    lock.shared(), lock.exclusive(), lock.release()  # no file, no effect


@pytest.mark.parametrize("name", ["train_hf_llama", "train_nanogpt", "vision_encoder"])
def test_training_examples_take_the_flag(name, monkeypatch):
    monkeypatch.syspath_prepend(str(COMMON.parent))
    spec = importlib.util.spec_from_file_location(f"example_{name}", COMMON.parent / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)  # imports examples/common.py as "common"
        args = module.parse(["--gpu-lock", "/tmp/x.lock", "--smoke"])
    finally:
        sys.modules.pop("common", None)
    assert args.gpu_lock == "/tmp/x.lock"
