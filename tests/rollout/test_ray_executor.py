"""Trials on Ray nodes: a real local Ray cluster of two nodes (the second its own raylet process,
`ray.cluster_utils.Cluster`), the real proxy, real Docker sandboxes, the real verifier; the engine scripted.

Both nodes share this machine's Docker daemon (a second daemon needs its own storage and network setup the
test machine does not give every test run); each node still builds or finds the task image itself.
"""

from __future__ import annotations

import asyncio
import json
import socket

import pytest
from scripted_engine import ScriptedEngine
from test_builtin_rollout import fix_script, rollout_config

from legorl_jax.config import RayConfig, RolloutConfig
from legorl_jax.harness import get_harness
from legorl_jax.proxy.archive import read_archive
from legorl_jax.rollout import collect
from legorl_jax.rollout.ray_executor import TRIAL_RESOURCE, RayExecutor
from legorl_jax.types import Outcome

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402


def start_cluster(nodes: int, trials_per_node: int = 1) -> Cluster:
    resources = {TRIAL_RESOURCE: trials_per_node} if trials_per_node else {}
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "resources": resources, "include_dashboard": False},
    )
    try:
        for _ in range(nodes - 1):
            cluster.add_node(num_cpus=1, resources=resources)
        cluster.wait_for_nodes()
    except BaseException:
        cluster.shutdown()
        raise
    return cluster


def ray_config(tmp_path, cluster: Cluster, **kw) -> RolloutConfig:
    base = rollout_config(tmp_path, **kw)
    return RolloutConfig(
        **{
            **base.__dict__,
            "executor": "ray",
            "trials_per_node": 1,
            "ray": RayConfig(address=cluster.address),
        }
    )


def test_bad_ray_config_is_a_clear_error_naming_the_value():
    with pytest.raises(ValueError, match="trials_per_node.*0"):
        RolloutConfig(executor="ray", trials_per_node=0)
    with pytest.raises(ValueError, match="executor.*'dask'"):
        RolloutConfig(executor="dask")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"127.0.0.1:{port}"
    with pytest.raises(ConnectionError, match=f"'{address}' is unreachable"):
        asyncio.run(RayExecutor.start(RolloutConfig(executor="ray", ray=RayConfig(address=address))))
    with pytest.raises(ValueError, match="host:port.*'nowhere'"):
        asyncio.run(RayExecutor.start(RolloutConfig(executor="ray", ray=RayConfig(address="nowhere"))))


def test_a_cluster_without_trial_slots_is_refused_naming_its_address():
    cluster = start_cluster(nodes=1, trials_per_node=0)
    try:
        config = RolloutConfig(executor="ray", ray=RayConfig(address=cluster.address))
        with pytest.raises(ValueError, match=f"{cluster.address}.*declares the 'legorl_trial'.*got 1 nodes"):
            asyncio.run(RayExecutor.start(config))
        assert not ray.is_initialized()
    finally:
        cluster.shutdown()


@pytest.mark.docker
async def test_trials_run_on_both_nodes_and_their_archives_come_back(
    two_tasks, tokenizer, proxy_on, tmp_path
):
    engine = ScriptedEngine(tokenizer, lambda prompt, rid: fix_for(two_tasks, tokenizer, prompt, rid))
    engine.max_len = 8192
    proxy = await proxy_on(engine, context_length=8192)
    cluster = start_cluster(nodes=2)
    try:
        config = ray_config(tmp_path, cluster)
        executor = await RayExecutor.start(config)
        try:
            assert len({s.where for s in executor.slots}) == 2
            batch = await collect(
                two_tasks,
                group_size=2,
                harness=get_harness("builtin"),
                proxy=proxy,
                config=config,
                executor=executor,
            )
        finally:
            await executor.close()
    finally:
        cluster.shutdown()
    assert [t.outcome for t in batch.trajectories] == [Outcome.SUBMITTED] * 4
    assert all(t.reward == 1.0 and len(t.sequences) == 1 for t in batch.trajectories)
    places = set()
    for t in batch.trajectories:
        folder = tmp_path / "runs" / "t" / "trials" / "step_0" / t.trial_id
        attempt = json.loads((folder / "attempt_0" / "attempt.json").read_text())
        places.add(attempt["where"])
        assert attempt["outcome"] == "submitted" and attempt["reward"] == 1.0
        assert "diff --git" in (folder / "attempt_0" / "diff.patch").read_text()
        assert json.loads((folder / "attempt_0" / "verifier.json").read_text())["reward"] == 1.0
        recorded, arrays = read_archive(folder / "attempt_0")
        assert (
            recorded["trial_id"] == t.trial_id
            and arrays[0]["token_ids"].tolist() == t.sequences[0].token_ids.tolist()
        )
    assert len(places) == 2  # two trials at a time, one slot per node: both nodes ran trials


def fix_for(tasks, tokenizer, prompt, rid) -> str:
    """The next tool call of the fix of whichever task the prompt is about (the proxy's request id is
    `<session>-<turn>`)."""
    text = tokenizer.decode(prompt)
    task = next(t for t in tasks if t.problem_statement.strip().splitlines()[0] in text)
    script = fix_script(task)
    return script[min(int(rid.rsplit("-", 1)[1]), len(script) - 1)]


@pytest.mark.docker
@pytest.mark.slow
async def test_a_node_killed_mid_trial_gives_retried_node_failures_and_a_finished_run(
    two_tasks, tokenizer, proxy_on, tmp_path
):
    engine = ScriptedEngine(
        tokenizer, lambda prompt, rid: fix_for(two_tasks, tokenizer, prompt, rid), delay_s=1.0
    )
    engine.max_len = 8192
    proxy = await proxy_on(engine, context_length=8192)
    cluster = start_cluster(nodes=2)
    try:
        config = ray_config(tmp_path, cluster, retries=1)
        executor = await RayExecutor.start(config)
        try:
            run = asyncio.ensure_future(
                collect(
                    two_tasks,
                    group_size=1,
                    harness=get_harness("builtin"),
                    proxy=proxy,
                    config=config,
                    executor=executor,
                )
            )
            while len({c["session_id"] for c in engine.calls}) < 2:  # a trial is running on each node
                await asyncio.sleep(0.1)
            (worker_node,) = cluster.worker_nodes
            cluster.remove_node(worker_node, allow_graceful=False)  # its raylet and workers are killed
            batch = await asyncio.wait_for(run, timeout=600)
            assert executor.live_slots == 1
        finally:
            await executor.close()
    finally:
        cluster.shutdown()
    assert [t.outcome for t in batch.trajectories] == [
        Outcome.SUBMITTED
    ] * 2  # the run finished, nothing lost
    summaries = [
        json.loads((tmp_path / "runs" / "t" / "trials" / "step_0" / t.trial_id / "trial.json").read_text())
        for t in batch.trajectories
    ]
    assert sorted(s["dropped_attempts"] for s in summaries) == [[], ["node_failed"]]
    retried = next(s for s in summaries if s["dropped_attempts"])
    folder = tmp_path / "runs" / "t" / "trials" / "step_0" / retried["trial_id"]
    first = json.loads((folder / "attempt_0" / "attempt.json").read_text())
    second = json.loads((folder / "attempt_1" / "attempt.json").read_text())
    assert first["outcome"] == "node_failed" and second["outcome"] == "submitted"
    assert first["where"] != second["where"]  # retried on the other node
