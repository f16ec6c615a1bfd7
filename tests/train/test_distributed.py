"""The trainer over several processes: mesh.distributed validation, the peer watchdog, and real runs of 2
processes × 4 CPU devices on 127.0.0.1 (gloo) against the 1 process × 8 devices of this test process.

Tolerance of the 2 × 4 vs 1 × 8 step (fp32, the same mesh shape, only the reduction order across the
process boundary differs): metrics, loss and gradient norm to 1e-6 absolute, updated parameters to 1e-8
absolute (one AdamW step at lr 1e-3), AdamW first moments (= the gradients) to 1e-5 of each leaf's scale.
Measured: loss and gradient norm bitwise equal, metrics 3e-8, parameters 1.2e-10, moments 1.4e-7.
"""

import filecmp
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import optax
import pytest
import tiny_run
from processes import finish, free_port

from legorl_jax.config import CheckpointConfig, DistributedConfig, MeshConfig
from legorl_jax.model import init_policy
from legorl_jax.model.sharding import make_mesh, rules_from_config
from legorl_jax.train import distributed
from legorl_jax.train.checkpoint import Checkpointer
from legorl_jax.train.publish import export_hf
from legorl_jax.train.step import Trainer

WORKER = pathlib.Path(__file__).parent / "multiprocess_run.py"
REPO = pathlib.Path(__file__).parents[2]
sys.path.insert(0, str(WORKER.parent))
import multiprocess_run  # noqa: E402


def launch(n: int, out: pathlib.Path, *extra: str) -> list[subprocess.Popen]:
    """`n` worker processes on one fresh port; each gets its own CPU device count (not conftest's 8)."""
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    port = free_port()
    return [
        subprocess.Popen(
            [sys.executable, str(WORKER), "--process-id", str(i), "--num-processes", str(n)]
            + ["--port", str(port), "--out", str(out), *extra],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]


# ------------------------------------------------------------------------------------------------------
# mesh.distributed


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"coordinator_address": "10.0.0.1"}, "coordinator_address must be host:port, got '10.0.0.1'"),
        ({"coordinator_address": "host:99999"}, "coordinator_address must be host:port, got 'host:99999'"),
        ({"num_processes": 0}, "num_processes must be a positive int, got 0"),
        ({"process_id": -1}, "process_id must be an int >= 0, got -1"),
        ({"num_processes": 2, "process_id": 2}, "process_id=2 is not below num_processes=2"),
        ({"local_device_ids": [0, -1]}, "local_device_ids must be ints >= 0, got [0, -1]"),
        ({"cpu_devices": 0}, "cpu_devices must be a positive int, got 0"),
        ({"peer_timeout_s": 0}, "peer_timeout_s must be a positive number of seconds, got 0"),
        ({"enabled": "yes"}, "enabled must be true or false, got 'yes'"),
    ],
)
def test_mesh_distributed_rejects_bad_settings_naming_the_value(fields, message):
    with pytest.raises(ValueError, match=re.escape("mesh.distributed." + message)):
        DistributedConfig(**fields)


def test_a_disabled_mesh_distributed_is_one_process_and_leaves_jax_alone():
    processes = distributed.initialize(MeshConfig().distributed)
    assert (processes.process_id, processes.num_processes, processes.is_main) == (0, 1, True)
    assert processes.watchdog is None and jax.process_count() == 1
    with pytest.raises(TypeError, match="DistributedConfig, got MeshConfig"):
        distributed.initialize(MeshConfig())


# ------------------------------------------------------------------------------------------------------
# the watchdog, against a fake of the coordination service's key-value store (an outside boundary)


class FakeStore:
    def __init__(self):
        self.values, self.down = {}, False

    def key_value_set(self, key, value, allow_overwrite=False):
        if self.down:
            raise RuntimeError("UNAVAILABLE: connection refused")
        self.values[key] = value

    def key_value_try_get(self, key):
        if self.down:
            raise RuntimeError("UNAVAILABLE: connection refused")
        if key not in self.values:
            raise RuntimeError(f"NOT_FOUND: {key}")
        return self.values[key]

    def blocking_key_value_get(self, key, timeout_ms):
        return self.values[key]  # the tests read only what was sent


def test_the_watchdog_names_the_peer_whose_heartbeat_stops_and_not_one_that_ended_normally():
    store = FakeStore()
    mine = distributed.PeerWatchdog(0, 3, 5.0, client=store)
    peer1 = distributed.PeerWatchdog(1, 3, 5.0, client=store)
    peer2 = distributed.PeerWatchdog(2, 3, 5.0, client=store)
    start = time.monotonic()
    for t in range(0, 6):
        peer1.check(start + t)
        if t <= 3:
            peer2.check(start + t)
        assert mine.check(start + t) is None
        if t == 3:
            peer2.stop()  # peer 2 ends normally at t = 3; peer 1 falls silent after t = 5
    assert store.values["legorl/heartbeat/2"] == "done"
    for t in range(6, 11):
        assert mine.check(start + t) is None, t  # at t = 9 peer 2 has been silent 6 s: not lost
    lost = mine.check(start + 11)
    assert lost is not None and lost[0] == 1 and "no heartbeat for 6.0 s (last heartbeat 6)" in lost[1]


def test_the_watchdog_names_a_peer_that_failed_with_its_error_at_once():
    store = FakeStore()
    mine = distributed.PeerWatchdog(0, 2, 5.0, client=store)
    peer = distributed.PeerWatchdog(1, 2, 5.0, client=store)
    start = time.monotonic()
    peer.check(start)
    assert mine.check(start) is None
    peer.fail(ValueError("train.micro_batch_rows=2 must be a multiple of the 4 batch shards"))
    peer.stop()  # the exit hook's 'done' does not overwrite the failure
    lost = mine.check(start + 0.1)  # no timeout to wait out: the peer said why it ended
    assert lost == (
        1,
        "it failed: ValueError: train.micro_batch_rows=2 must be a multiple of the 4 batch shards",
    )


def test_commands_reach_a_follower_in_order_with_their_arguments():
    from legorl_jax.train.commands import Command, Commands

    store = FakeStore()
    leader, follower = Commands(client=store), Commands(client=store)
    leader.send("start", model_dir="/models/tiny")
    leader.send(
        "save", cursor={"next_step": 1, "run_id": "r"}, weights_version="step-000001", force=False, step=1
    )
    leader.send("stop")
    assert follower.receive() == Command("start", {"model_dir": "/models/tiny"})
    assert follower.receive() == Command(
        "save",
        {
            "cursor": {"next_step": 1, "run_id": "r"},
            "weights_version": "step-000001",
            "force": False,
            "step": 1,
        },
    )
    assert follower.receive() == Command("stop", {})
    with pytest.raises(ValueError, match="command kind must be one of .* got 'restart'"):
        leader.send("restart")


def test_the_watchdog_of_a_worker_names_process_0_when_the_store_it_hosts_stops_answering():
    store = FakeStore()
    worker = distributed.PeerWatchdog(1, 2, 5.0, client=store)
    start = time.monotonic()
    assert worker.check(start) is None
    store.down = True
    assert worker.check(start + 4) is None  # within the timeout: a hiccup
    lost = worker.check(start + 6)
    assert lost is not None and lost[0] == 0 and "stopped answering" in lost[1]


# ------------------------------------------------------------------------------------------------------
# two real processes


def test_two_processes_share_process_0s_batch_build_their_own_shards_and_gather_it_back(tmp_path):
    results = finish(launch(2, tmp_path, "--collectives-only"), timeout=180)
    for i, (code, _, err) in enumerate(results):
        assert code == 0, f"process {i}: {err[-3000:]}"
    got = json.loads((tmp_path / "sum.json").read_text())
    expected = np.arange(32).reshape(8, 4)
    assert got == {
        "sum": int(expected.sum()),
        "gathered_equal": True,
        "shared_equal": True,
        "routed_experts": None,
        "local_shards": 4,  # 4 of the 8 rows' shards live in each process
    }


def test_killing_process_1_mid_step_ends_process_0_with_an_error_naming_it_within_the_timeout(tmp_path):
    procs = launch(2, tmp_path, "--collectives-only", "--die-at-step", "3")
    ((code1, _, _),) = finish(procs[1:], timeout=180)
    died = time.monotonic()
    ((code0, out0, err0),) = finish(procs[:1], timeout=180)
    assert code1 == -signal.SIGKILL
    # The watchdog's timeout, plus its polling and the process's exit: not a hang.
    assert time.monotonic() - died < multiprocess_run.PEER_TIMEOUT_S + 20
    assert "step 2" in out0 and "step 3" not in out0  # process 0 was inside step 3 when its peer died
    assert code0 == distributed.PEER_LOST_EXIT, err0[-3000:]
    assert "lost peer process 1 of 2: no heartbeat for" in err0
    assert f"peer timeout {multiprocess_run.PEER_TIMEOUT_S:g} s" in err0


def test_process_1_follows_process_0s_updates_save_and_publish_and_the_engine_gets_the_saved_weights(
    tmp_path,
):
    results = finish(launch(2, tmp_path, "--follow"), timeout=600)
    for i, (code, _, err) in enumerate(results):
        assert code == 0, f"process {i}: {err[-3000:]}"
    led, followed = (json.loads(out.strip().splitlines()[-1]) for _, out, _ in results)
    assert led == followed == {"update": 2, "save": 1, "publish": 1, "wait": 1, "stop": 1}
    # What process 0 handed the engine: host arrays gathered from both processes, equal to what both saved.
    trainer = cpu8_trainer()
    with Checkpointer(CheckpointConfig(directory=str(tmp_path / "ckpt")), run_config={}) as ckpt:
        restored = ckpt.restore(trainer.abstract_state())
    assert restored.step == 2 and int(restored.state.step) == 2
    for saved, published in zip(
        jax.tree.leaves(restored.state.params), leaves_of(tmp_path / "published.npz"), strict=True
    ):
        np.testing.assert_array_equal(published, np.asarray(saved))


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory):
    """One 2 × 4 run of the tiny MoE's step, checkpoint and HF export (multiprocess_run.py)."""
    out = tmp_path_factory.mktemp("two-process")
    results = finish(launch(2, out), timeout=900)
    for i, (code, _, err) in enumerate(results):
        assert code == 0, f"process {i}: {err[-3000:]}"
    return out


def cpu8_trainer(mesh_config: MeshConfig | None = None) -> Trainer:
    mesh_config = MeshConfig(**multiprocess_run.MESH) if mesh_config is None else mesh_config
    algo, train = multiprocess_run.step_configs()
    return Trainer(
        init_policy(tiny_run.TINY_MOE, seed=0),
        algo,
        train,
        mesh=make_mesh(mesh_config),
        rules=rules_from_config(mesh_config),
    )


def leaves_of(npz: pathlib.Path) -> list[np.ndarray]:
    data = np.load(npz)
    return [data[f"arr_{i}"] for i in range(len(data.files))]


@pytest.mark.slow
def test_a_step_on_2_processes_x_4_devices_equals_the_step_on_1_process_x_8(two_process_run):
    summary = json.loads((two_process_run / "metrics.json").read_text())
    assert (summary["process_count"], summary["local_devices"], summary["devices"]) == (2, 4, 8)
    trainer = cpu8_trainer()
    batch, stats = multiprocess_run.packed_batch(trainer)
    state, update = trainer.update(trainer.init_state(seed=0), batch, stats)
    metrics = update.metrics

    got = summary["metrics"]
    assert got.keys() == metrics.keys()
    for key, value in metrics.items():
        assert got[key] == pytest.approx(value, abs=1e-6, nan_ok=True), key
    assert metrics["align/routing_coverage"] > 0.9  # routing replayed on both sides
    assert metrics["train/grad_norm"] > 0
    for mine, theirs in zip(
        jax.tree.leaves(state.params), leaves_of(two_process_run / "params.npz"), strict=True
    ):
        np.testing.assert_allclose(theirs, np.asarray(mine), atol=1e-8, rtol=0)
    mu = jax.tree.leaves(optax.tree_utils.tree_get(state.opt_state, "mu"))
    for mine, theirs in zip(mu, leaves_of(two_process_run / "mu.npz"), strict=True):
        mine = np.asarray(mine)
        assert np.abs(mine).max() > 0
        np.testing.assert_allclose(theirs, mine, atol=1e-5 * float(np.abs(mine).max()), rtol=0)


CONTEXT_MESH = {"fsdp": 2, "expert": 2, "context": 2}  # conf/mesh/cpu8_context.yaml


@pytest.mark.slow
def test_a_context_parallel_step_on_2_processes_equals_the_step_on_1_process(tmp_path):
    """Rows split along their tokens over a context axis whose two devices sit in different processes
    (the K/V all-gather crosses processes): the same step as one process's 8 devices."""
    results = finish(launch(2, tmp_path, "--mesh", json.dumps(CONTEXT_MESH)), timeout=900)
    for i, (code, _, err) in enumerate(results):
        assert code == 0, f"process {i}: {err[-3000:]}"
    summary = json.loads((tmp_path / "metrics.json").read_text())
    assert (summary["process_count"], summary["devices"]) == (2, 8)
    trainer = cpu8_trainer(MeshConfig(**CONTEXT_MESH))
    batch, stats = multiprocess_run.packed_batch(trainer)
    state, update = trainer.update(trainer.init_state(seed=0), batch, stats)
    for key, value in update.metrics.items():
        assert summary["metrics"][key] == pytest.approx(value, abs=1e-6, nan_ok=True), key
    assert update.metrics["align/routing_coverage"] > 0.9
    # The dK / dV reduce-scatter crosses processes (gloo) here, so sums meet in another order than on one
    # process: first moments to 1e-5 of their scale; weights to 1e-6 (an Adam step of lr 1e-3 whose
    # m / sqrt(v) moved by 1e-3 where a gradient element is near zero; measured 1.7e-7).
    mu = jax.tree.leaves(optax.tree_utils.tree_get(state.opt_state, "mu"))
    for mine, theirs in zip(mu, leaves_of(tmp_path / "mu.npz"), strict=True):
        mine = np.asarray(mine)
        np.testing.assert_allclose(theirs, mine, atol=1e-5 * float(np.abs(mine).max()), rtol=0)
    for mine, theirs in zip(jax.tree.leaves(state.params), leaves_of(tmp_path / "params.npz"), strict=True):
        np.testing.assert_allclose(theirs, np.asarray(mine), atol=1e-6, rtol=0)


@pytest.mark.slow
def test_a_checkpoint_saved_by_2_processes_restores_on_2_and_resharded_on_1(two_process_run, tmp_path):
    summary = json.loads((two_process_run / "metrics.json").read_text())
    assert summary["restored_equal"] and summary["restored_on_mesh"]  # restored by the 2 processes
    saved = leaves_of(two_process_run / "params.npz")
    # Restored by this one process onto another layout: fsdp 4 × tensor 2, no expert axis.
    trainer = cpu8_trainer(MeshConfig(fsdp=4, tensor=2))
    with Checkpointer(CheckpointConfig(directory=str(two_process_run / "ckpt")), run_config={}) as ckpt:
        restored = ckpt.restore(trainer.abstract_state())
    assert restored.step == 1 and restored.cursor == {"next_step": 1}
    for leaf, expected in zip(jax.tree.leaves(restored.state.params), saved, strict=True):
        np.testing.assert_array_equal(np.asarray(leaf), expected)
    w = restored.state.params["runs"][0]["layers"]["mlp"]["gate_proj"][...]
    assert dict(w.sharding.mesh.shape) == {"data": 1, "fsdp": 4, "tensor": 2, "expert": 1}
    # ... and trains on from there, as the 2-process run would.
    batch, stats = multiprocess_run.packed_batch(trainer)
    metrics = trainer.update(restored.state, batch, stats)[1].metrics
    assert metrics["train/step"] == 2.0 and np.isfinite(metrics["train/loss"])


@pytest.mark.slow
def test_publishing_from_2_processes_writes_the_same_hf_directory_as_from_1(two_process_run, tmp_path):
    trainer = cpu8_trainer()
    with Checkpointer(CheckpointConfig(directory=str(two_process_run / "ckpt")), run_config={}) as ckpt:
        state = ckpt.restore(trainer.abstract_state()).state
    mine = export_hf(
        trainer.policy_of(distributed.gather_params(state.params)), tmp_path, "hf", dtype="float32"
    )
    theirs = two_process_run / "hf"
    names = sorted(p.name for p in theirs.iterdir())
    assert names == sorted(p.name for p in mine.iterdir()) and "model.safetensors" in names
    match, mismatch, errors = filecmp.cmpfiles(theirs, mine, names, shallow=False)
    assert (mismatch, errors) == ([], []), (mismatch, errors)
