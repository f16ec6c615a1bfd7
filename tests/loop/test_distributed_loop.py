"""The RL loop on 2 processes × 4 CPU devices (process 0 leads, process 1 follows its trainer calls) against
the same loop on 1 process × 8 devices; a killed follower; the resume after it (distributed_loop_run.py).

Tolerance of the parameters after the 2 loop steps, 2 × 4 vs 1 × 8 (the same batches, fp32, the same mesh
shape; only the reduction order across the process boundary differs): 1e-8 absolute, as the one-step
equality test of tests/train/test_distributed.py (two AdamW steps at lr 1e-3).
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
]  # three loop runs of 2 steps with Docker trials (~4 min each)

HERE = pathlib.Path(__file__).resolve().parent
RUNNER = HERE / "distributed_loop_run.py"
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
import distributed_loop_run  # noqa: E402
import processes  # noqa: E402
from processes import free_port  # noqa: E402

TIMEOUT_S = 900


def launch(n: int, model_dir, run_dir: pathlib.Path, *extra: str) -> list[subprocess.Popen]:
    """`n` processes of the loop on one fresh port; with n = 1, one process on 8 CPU devices."""
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8" if n == 1 else "",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    port = free_port()
    return [
        subprocess.Popen(
            [sys.executable, str(RUNNER), str(model_dir), str(run_dir), "--process-id", str(i)]
            + ["--num-processes", str(n), "--port", str(port), *extra],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]


def finish(procs: list[subprocess.Popen], timeout: float = TIMEOUT_S) -> list[tuple[int, str, str]]:
    return processes.finish(procs, timeout)


def succeeded(results: list[tuple[int, str, str]]) -> list[dict]:
    for i, (code, _, err) in enumerate(results):
        assert code == 0, f"process {i}: {err[-4000:]}"
    return [json.loads(out.strip().splitlines()[-1]) for _, out, _ in results]


def params_at(run_dir: pathlib.Path, model_dir, step: int) -> list[np.ndarray]:
    """The parameters of the checkpoint of loop step `step`, restored on this process's 8 devices."""
    from legorl_jax.config import CheckpointConfig
    from legorl_jax.model.checkpoint_io import load_hf
    from legorl_jax.model.sharding import make_mesh, rules_from_config
    from legorl_jax.train.checkpoint import Checkpointer
    from legorl_jax.train.step import Trainer

    config = distributed_loop_run.config_for(
        run_dir, distributed_loop_run.parse([str(model_dir), str(run_dir)])
    )
    trainer = Trainer(
        load_hf(str(model_dir), "float32"),
        config.algo,
        config.train,
        mesh=make_mesh(config.mesh),
        rules=rules_from_config(config.mesh),
    )
    settings = CheckpointConfig(directory=str(run_dir / "checkpoints"), ignore_on_resume=["*"])
    with Checkpointer(settings, run_config={}) as checkpointer:
        restored = checkpointer.restore(trainer.abstract_state(), step=step)
    return [np.asarray(x) for x in jax.tree.leaves(restored.state.params)]


@pytest.fixture(scope="module")
def reference(loop_model_dir, tmp_path_factory):
    """The loop's 2 steps on 1 process × 8 devices."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    (result,) = succeeded(finish(launch(1, loop_model_dir, run_dir)))
    assert [r["trained"] for r in result["records"]] == [True, True]
    return params_at(run_dir, loop_model_dir, 2)


def assert_same_parameters(got: list[np.ndarray], expected: list[np.ndarray]) -> None:
    assert len(got) == len(expected)
    for theirs, mine in zip(got, expected, strict=True):
        np.testing.assert_allclose(theirs, mine, atol=1e-8, rtol=0)


def test_the_loop_on_2_processes_ends_with_the_parameters_of_1_process_x_8_and_only_process_0_opens_trials(
    loop_model_dir, reference, tmp_path
):
    run_dir = tmp_path / "runs" / "two"
    aim = tmp_path / "aim"
    lead, follow = succeeded(finish(launch(2, loop_model_dir, run_dir, "--aim", str(aim))))
    assert [(r["step"], r["trained"]) for r in lead["records"]] == [(0, True), (1, True)]
    assert lead["version"] == "step-000002"  # the engine on process 0 serves the gathered weights
    assert all(r["metrics"]["align/routing_coverage"] == 1.0 for r in lead["records"])
    assert follow == {"imported": []}  # no proxy, sandbox, engine or Aim module was even loaded there
    for step in (0, 1):
        trials = sorted(p.name for p in (run_dir / "trials" / f"step_{step}").iterdir())
        assert trials == ["ratelimit-slow-rates-never-refill-0", "ratelimit-slow-rates-never-refill-1"]
    runs = [p for p in (aim / ".aim" / "meta" / "chunks").iterdir()] if (aim / ".aim").exists() else []
    assert len(runs) == 1, runs  # one Aim run: process 0's
    assert_same_parameters(params_at(run_dir, loop_model_dir, 2), reference)


def test_a_killed_follower_stops_process_0_naming_it_and_resume_continues_to_the_same_parameters(
    loop_model_dir, reference, tmp_path
):
    run_dir = tmp_path / "runs" / "killed"
    # Each scripted reply takes 3 s: step 1's rollouts last over 10 s, so the kill below lands in step 1.
    procs = launch(2, loop_model_dir, run_dir, "--delay-s", "3")
    deadline = time.monotonic() + TIMEOUT_S
    while not (run_dir / "checkpoints" / "1").is_dir():  # step 0 saved: process 0 is in step 1's rollouts
        assert time.monotonic() < deadline and procs[0].poll() is None, "step 0 was never saved"
        time.sleep(0.5)
    procs[1].send_signal(signal.SIGKILL)
    killed = time.monotonic()
    ((code0, out0, err0),) = finish(procs[:1])
    finish(procs[1:])
    assert "records" not in out0  # process 0 never got to the end of its loop
    from legorl_jax.train.distributed import PEER_LOST_EXIT

    assert time.monotonic() - killed < distributed_loop_run.PEER_TIMEOUT_S + 60  # not a hang
    assert code0 == PEER_LOST_EXIT, err0[-3000:]
    assert "lost peer process 1 of 2: no heartbeat for" in err0

    lead, _ = succeeded(finish(launch(2, loop_model_dir, run_dir, "--resume")))
    assert lead["start_step"] == 1 and [r["step"] for r in lead["records"]] == [1]
    assert_same_parameters(params_at(run_dir, loop_model_dir, 2), reference)
