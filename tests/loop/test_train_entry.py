"""`python train.py` as a user runs it: a SIGKILLed run resumes, a sweep's jobs compare side by side.

The policy is the tiny random MoE (its replies are garbage, so every trial scores 0 and steps skip their
update: these tests are about the run's bookkeeping, the learning is `make demo`'s and test_demo.py's).
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.docker
REPO = pathlib.Path(__file__).resolve().parents[2]
TASK = "ratelimit-slow-rates-never-refill"


def train_argv(model_dir, runs, aim, *extra: str) -> list[str]:
    return [
        sys.executable,
        str(REPO / "train.py"),
        f"model.path={model_dir}",
        f"tasks.ids=[{TASK}]",
        "tasks.eval_split=null",
        "rollout.group_size=2",
        "rollout.concurrency=2",
        "rollout.retries=0",
        f"rollout.runs_dir={runs}",
        "harness.step_limit=2",
        "proxy.max_response_tokens=24",
        "engine.max_len=2048",
        "engine.max_running=4",
        "train.max_tokens=2048",
        "train.checkpoint.every=1",
        "loop.validate_every=0",
        f"tracking.repo={aim}",
        "loop.trial_texts=false",
        *extra,
    ]


def user_env() -> dict[str, str]:
    """The environment of a user's CPU machine: one JAX device (the suite's 8 forced CPU devices dropped)."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "").replace("--xla_force_host_platform_device_count=8", "").strip()
    )
    return env


def aim_runs(repo: pathlib.Path) -> list[dict]:
    code = textwrap.dedent(f"""
        import json
        from legorl_jax.monitor.aim_tracker import read_repo, finish_aim
        out = []
        for run in read_repo({str(repo)!r}).iter_runs():
            metrics = {{m.name: [int(s) for s in m.data.items_list()[0]] for m in run.metrics()}}
            steps = metrics.get("rollout/trials")
            out.append({{"hash": run.hash, "name": run.name, "experiment": run.experiment, "steps": steps}})
        finish_aim()
        print(json.dumps(out))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_run_killed_mid_step_resumes_with_nothing_lost_and_nothing_trained_twice(loop_model_dir, tmp_path):
    runs, aim = tmp_path / "runs", tmp_path / "aim"
    argv = train_argv(loop_model_dir, runs, aim, "rollout.experiment=killed", "loop.steps=3")
    folder = runs / "killed"
    log = (tmp_path / "first.log").open("w")
    first = subprocess.Popen(
        argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=user_env()
    )
    deadline = time.monotonic() + 900
    # Kill once step 0 is checkpointed and step 1's trials are being archived: mid-step.
    while not (
        (folder / "checkpoints" / "1").is_dir() and any((folder / "trials" / "step_1").glob("*/attempt_0"))
    ):
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "the first run never reached step 1"
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    # On a busy host the poll can land after step 1 was checkpointed too: the kill is then in step 2.
    saved = max(int(p.name) for p in (folder / "checkpoints").iterdir() if p.name.isdigit())
    assert saved in (1, 2), f"the first run was not killed mid-run: checkpoint {saved} on disk"
    killed_dir = folder / "trials" / f"step_{saved}"
    killed_trials = sorted(p.name for p in killed_dir.iterdir()) if killed_dir.is_dir() else []
    assert killed_trials or saved == 2

    second = subprocess.run(
        [*argv, "resume=true"], cwd=REPO, capture_output=True, text=True, timeout=1200, env=user_env()
    )
    assert second.returncode == 0, second.stderr[-4000:]
    assert f"resumed at step {saved}" in second.stdout

    # Nothing lost: the killed step's trials are kept aside, every step's metrics are there exactly once.
    aside = [p for p in (folder / "trials").iterdir() if p.name.startswith(f"step_{saved}.abandoned-")]
    assert [sorted(p.name for p in a.iterdir()) for a in aside] == ([killed_trials] if killed_trials else [])
    assert sorted(
        p.name for p in (folder / "trials").iterdir() if p.name.startswith("step_") and "." not in p.name
    ) == ["step_0", "step_1", "step_2"]
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    # Nothing trained twice: the optimiser stepped once per step that updated, across both processes.
    updates = sum(1 for r in rows if not r["metrics"]["loop/skipped_update"])
    meta = json.loads((folder / "checkpoints" / "3" / "meta" / "metadata").read_text())
    assert meta["cursor"]["next_step"] == 3
    assert sorted(int(p.name) for p in (folder / "checkpoints").iterdir() if p.name.isdigit())[-1] == 3
    (run,) = aim_runs(aim)  # the resumed job continued the same Aim run
    # Aim keeps a re-done step's first values too (when the kill came after that step was logged).
    assert sorted(set(run["steps"])) == [0, 1, 2] and meta["cursor"]["run_id"] == run["hash"]
    assert meta["cursor"]["optimiser_step"] == updates


@pytest.mark.slow  # two whole jobs (~2 min quiet); compare's table itself is tests/monitor/test_compare.py
def test_a_two_job_sweep_makes_two_aim_runs_that_compare_puts_side_by_side(loop_model_dir, tmp_path):
    runs, aim = tmp_path / "runs", tmp_path / "aim"
    argv = train_argv(
        loop_model_dir,
        runs,
        aim,
        "rollout.experiment=sweep",
        "loop.steps=1",
        "train.learning_rate=1e-3,2e-3",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )
    argv.insert(2, "-m")  # Hydra's flags come before the overrides
    out = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=1800, env=user_env())
    assert out.returncode == 0, out.stderr[-4000:]
    assert sorted(p.name for p in runs.iterdir()) == ["sweep-0", "sweep-1"]
    found = aim_runs(aim)
    assert sorted(r["name"] for r in found) == ["train.learning_rate=0.001", "train.learning_rate=0.002"]
    assert {r["experiment"] for r in found} == {"sweep"}

    compare = subprocess.run(
        [
            sys.executable,
            "-m",
            "legorl_jax.monitor.compare",
            "--repo",
            str(aim),
            "--png",
            str(tmp_path / "curves.png"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert compare.returncode == 0, compare.stderr[-3000:]
    lines = compare.stdout.splitlines()
    assert "train.learning_rate" in lines[0]  # the one config field in which the runs differ
    rows = [line for line in lines if line.startswith("| train.learning_rate=0.00")]
    assert len(rows) == 2 and "| 0.001 |" in rows[0] and "| 0.002 |" in rows[1]
    assert (tmp_path / "curves.png").stat().st_size > 1000


@pytest.mark.slow  # ~40 s; tests/loop/test_async_loop.py kills an async run in the default suite
def test_an_async_run_killed_with_trials_in_flight_resumes_with_nothing_trained_twice(
    loop_model_dir, tmp_path
):
    runs, aim = tmp_path / "runs", tmp_path / "aim"
    argv = train_argv(
        loop_model_dir,
        runs,
        aim,
        "rollout.experiment=async",
        "loop.steps=3",
        "loop.mode=async",
        "loop.max_staleness=1",
    )
    folder = runs / "async"
    log = (tmp_path / "first.log").open("w")
    first = subprocess.Popen(
        argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=user_env()
    )
    deadline = time.monotonic() + 900
    while not (folder / "checkpoints" / "1" / "meta").is_dir():  # killed once step 0 is checkpointed
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "the first run never checkpointed step 0"
        time.sleep(0.2)
    time.sleep(1.0)  # let the checkpoint's files land (the meta directory appears first)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    cursor = json.loads((folder / "checkpoints" / "1" / "meta" / "metadata").read_text())["cursor"]
    assert cursor["mode"] == "async" and cursor["next_step"] == 1
    started = [n for n in cursor["in_flight"] if (folder / "trials" / f"group_{n}").is_dir()]

    second = subprocess.run(
        [*argv, "resume=true"], cwd=REPO, capture_output=True, text=True, timeout=1200, env=user_env()
    )
    assert second.returncode == 0, second.stderr[-4000:]
    assert "resumed at step 1" in second.stdout
    # The groups in flight at the checkpoint were set aside and run again; the ended ones were trained.
    assert cursor["in_flight"] or cursor["pending"]  # max_staleness 1: the next step's group was admitted
    for n in started:  # archived in part before the kill: kept aside, never trained
        assert list((folder / "trials").glob(f"group_{n}.abandoned-*"))
    for n in cursor["in_flight"]:
        assert (folder / "trials" / f"group_{n}" / f"{TASK}-0" / "trial.json").is_file()  # run again
    if cursor["pending"]:
        assert f"resumed {len(cursor['pending'])} ended, untrained groups" in second.stdout + second.stderr
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    updates = sum(1 for r in rows if not r["metrics"]["loop/skipped_update"])
    meta = json.loads((folder / "checkpoints" / "3" / "meta" / "metadata").read_text())
    assert meta["cursor"]["optimiser_step"] == updates  # nothing trained twice across the two processes
    assert all(r["metrics"]["loop/stale_groups"] == 0 for r in rows)
