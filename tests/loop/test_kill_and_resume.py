"""Fault injection:
a run killed with SIGKILL at a random point of a step, then resumed (killed_run.py: the real
run, the rollouts' replies scripted by trial). Afterwards every step's metrics row is there once, every trial
of every step is archived once (the killed step's partial archive kept aside), and the parameters equal an
uninterrupted run's, whose batches are the same. A restart without `resume` is refused with nothing touched.

One seed of the sync loop runs in the default suite (~3 min quiet, with the uninterrupted run it compares
with); the async seed and more seeds of both are `slow`.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.docker
HERE = pathlib.Path(__file__).resolve().parent
SCRIPT = HERE / "killed_run.py"
TASK = "ratelimit-slow-rates-never-refill"
STEPS = 4


def user_env() -> dict[str, str]:
    """One JAX device, as on a user's machine (the suite's 8 forced CPU devices dropped)."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "").replace("--xla_force_host_platform_device_count=8", "").strip()
    )
    return env


def argv(model_dir, folder, mode, *extra) -> list[str]:
    return [
        sys.executable,
        str(SCRIPT),
        str(model_dir),
        str(folder),
        "--steps",
        str(STEPS),
        "--mode",
        mode,
        *extra,
    ]


def finished(model_dir, folder, mode, *extra) -> dict:
    out = subprocess.run(
        argv(model_dir, folder, mode, *extra), capture_output=True, text=True, timeout=1500, env=user_env()
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


_REFERENCE: dict[str, dict] = {}


@pytest.fixture(scope="module")
def reference(loop_model_dir, tmp_path_factory):
    """The uninterrupted run of each mode, made once."""

    def of(mode: str) -> dict:
        if mode not in _REFERENCE:
            _REFERENCE[mode] = finished(loop_model_dir, tmp_path_factory.mktemp("ref") / mode, mode)
        return _REFERENCE[mode]

    return of


def kill_at_a_random_point_of_a_step(model_dir, folder, mode, seed, log_path) -> float:
    """Starts the run and, once step 1 is checkpointed (`checkpoints/2`), kills it -9 at a seeded random point
    within step 2's length (as step 1 took: step 0 also compiles); returns the delay."""
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            argv(model_dir, folder, mode),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=user_env(),
        )
    deadline = time.monotonic() + 900
    seen: dict[str, float] = {}
    while "2" not in seen:
        assert proc.poll() is None, log_path.read_text()[-3000:]
        assert time.monotonic() < deadline, "the run never checkpointed step 1"
        for step in ("1", "2"):
            if step not in seen and (folder / "checkpoints" / step).is_dir():
                seen[step] = time.monotonic()
        time.sleep(0.02)
    step_s = seen["2"] - seen.get("1", seen["2"])
    delay = random.Random(seed).uniform(0.0, max(step_s, 0.5))
    time.sleep(delay)
    assert proc.poll() is None, "the run ended before the kill: a step took longer than the next"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return delay


def snapshot(root: pathlib.Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))
    }


def check_resumed_run(folder: pathlib.Path, mode: str, resumed: dict, reference: dict) -> None:
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert sorted(r["step"] for r in rows) == list(range(STEPS))  # every step's row, once
    assert resumed["start_step"] in (2, 3)  # killed in step 2, or after its checkpoint and before its row
    assert resumed["steps"] == list(range(resumed["start_step"], STEPS)) and all(resumed["trained"])
    # Nothing trained twice and nothing lost: the same optimiser step and parameters as the uninterrupted run.
    assert resumed["optimiser_step"] == reference["optimiser_step"] == STEPS
    assert resumed["params"] == reference["params"]
    # Every trial archived once, each with its trial.json; partial archives of the killed step kept aside.
    kind = "step" if mode == "sync" else "group"
    archived = sorted(
        (p.name for p in (folder / "trials").iterdir() if "." not in p.name),
        key=lambda n: int(n.split("_")[1]),
    )
    # async: groups admitted after the last step's (ended ones kept pending in the checkpoint) may follow
    assert archived[:STEPS] == [f"{kind}_{n}" for n in range(STEPS)] and (
        mode == "async" or len(archived) == STEPS
    )
    for name in archived[:STEPS]:
        trials = sorted(p.name for p in (folder / "trials" / name).iterdir())
        assert trials == [f"{TASK}-0", f"{TASK}-1"], (name, trials)
        for trial in trials:
            summary = json.loads((folder / "trials" / name / trial / "trial.json").read_text())
            assert summary["trial_id"] == trial and summary["attempts"] == 1
    for aside in (p for p in (folder / "trials").iterdir() if "." in p.name):
        assert (
            ".abandoned-" in aside.name
            and int(aside.name.split(".")[0].split("_")[1]) >= resumed["start_step"]
        )


def kill_resume_and_check(model_dir, tmp_path, mode, seed, reference, *, check_refusal: bool) -> None:
    folder = tmp_path / "runs" / f"{mode}-{seed}"
    delay = kill_at_a_random_point_of_a_step(model_dir, folder, mode, seed, tmp_path / "first.log")
    if check_refusal:  # a restart without resume touches nothing
        before = snapshot(folder)
        out = subprocess.run(
            argv(model_dir, folder, mode), capture_output=True, text=True, timeout=600, env=user_env()
        )
        assert out.returncode != 0 and "already holds a run" in out.stderr, out.stderr[-3000:]
        assert snapshot(folder) == before
    resumed = finished(model_dir, folder, mode, "--resume")
    try:
        check_resumed_run(folder, mode, resumed, reference(mode))
    except AssertionError as exc:
        raise AssertionError(f"killed {delay:.2f} s into step 2 (seed {seed}): {exc}") from exc


@pytest.mark.slow  # ~80 s quiet per mode; tests/loop/test_train_entry.py kills a run mid-step by default
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_run_killed_at_a_random_point_resumes_to_the_uninterrupted_runs_parameters(
    loop_model_dir, tmp_path, reference, mode
):
    kill_resume_and_check(loop_model_dir, tmp_path, mode, 0, reference, check_refusal=True)


@pytest.mark.slow  # each seed: a killed run and its resume (~3 min quiet, 8 at load 14)
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_more_random_kill_points_resume_to_the_uninterrupted_runs_parameters(
    loop_model_dir, tmp_path, reference, mode, seed
):
    kill_resume_and_check(loop_model_dir, tmp_path, mode, seed, reference, check_refusal=False)


@pytest.mark.slow  # a run stopped by SIGTERM and its resume (~3 min quiet)
def test_sigterm_mid_step_exits_143_leaves_no_half_trial_and_the_run_resumes_to_the_same_parameters(
    loop_model_dir, tmp_path, reference
):
    folder = tmp_path / "runs" / "sigterm"
    log_path = tmp_path / "first.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            argv(loop_model_dir, folder, "sync"), stdout=log, stderr=subprocess.STDOUT, env=user_env()
        )
    deadline = time.monotonic() + 900
    while not (folder / "checkpoints" / "2").is_dir():
        assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
        time.sleep(0.05)
    while not any((folder / "trials" / "step_2").glob("*/attempt_0")):  # step 2's first trial is running
        assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=300) == 128 + signal.SIGTERM, log_path.read_text()[-3000:]
    assert "stopped by SIGTERM" in log_path.read_text()
    for attempt in folder.glob("trials/*/*/attempt_*"):  # the cancelled trial left no half archive
        assert (attempt.parent / "trial.json").is_file(), attempt
    resumed = finished(loop_model_dir, folder, "sync", "--resume")
    assert resumed["start_step"] == 2
    check_resumed_run(folder, "sync", resumed, reference("sync"))
