"""Trials on Ray nodes: a real local Ray cluster of two nodes (the second its own raylet process,
`ray.cluster_utils.Cluster`), the real proxy, real Docker sandboxes, the real verifier; the engine scripted.

In the default suite both nodes share this machine's Docker daemon; each node still builds or finds the task
image itself. The `slow` test gives the second node a Docker daemon of its own, as on a real cluster: a second
dockerd on this machine (`tools/second_dockerd.sh`, driven by `tests/second_daemon.py`; needs root), fresh
for the test (the `second_daemon` fixture), holding only the base image loaded from the first at the start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import threading
import time

import pytest
from scripted_engine import ScriptedEngine
from second_daemon import SecondDaemon, add_node_on
from test_builtin_rollout import fix_script, rollout_config

from legorl_jax.config import RayConfig, RolloutConfig
from legorl_jax.harness import get_harness
from legorl_jax.proxy.archive import read_archive
from legorl_jax.rollout import TrialSettings, collect
from legorl_jax.rollout.ray_executor import TRIAL_RESOURCE, RayExecutor
from legorl_jax.types import Outcome

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402


def start_cluster(nodes: int, trials_per_node: int = 1, second_daemon: SecondDaemon | None = None) -> Cluster:
    """`nodes` nodes; with `second_daemon`, the nodes after the head run their trials on it."""
    resources = {TRIAL_RESOURCE: trials_per_node} if trials_per_node else {}
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "resources": resources, "include_dashboard": False},
    )
    try:
        for _ in range(nodes - 1):
            if second_daemon is None:
                cluster.add_node(num_cpus=1, resources=resources)
            else:
                add_node_on(cluster, second_daemon, num_cpus=1, resources=resources)
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


async def test_when_one_slot_finds_its_node_lost_no_other_slot_of_that_node_takes_a_retry():
    from legorl_jax.rollout.ray_executor import _RaySlot

    # Slots without actors: the pool's bookkeeping only (a lost node is what _call marks on a Ray error).
    a1, a2, b1 = (
        _RaySlot(None, "10.0.0.1/aaaa"),
        _RaySlot(None, "10.0.0.1/aaaa"),
        _RaySlot(None, "10.0.0.2/bbbb"),
    )
    executor = RayExecutor([a1, a2, b1], started_ray=False)
    async with executor.slot() as slot:
        assert slot is a1
        slot.dead = True  # its call raised NodeLost
    assert executor.live_slots == 1 and a2.dead
    async with executor.slot() as retry:
        assert retry is b1  # not a2, queued before it but on the lost node
    b1.dead = True  # the last node lost too: no slot is left, said at once rather than waited for
    with pytest.raises(RuntimeError, match="no trial slot is left"):
        async with executor.slot():
            pass


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
            batch = await collect_both_tasks(two_tasks, proxy, config, executor)
        finally:
            await executor.close()
    finally:
        cluster.shutdown()
    places = check_archives(batch, tmp_path, trials=4)
    assert len(set(places.values())) == 2  # two trials at a time, one slot per node: both nodes ran trials


async def collect_both_tasks(two_tasks, proxy, config, executor):
    """A group of 2 trials of each task with the built-in harness, run by `executor`."""
    return await collect(
        two_tasks,
        group_size=2,
        harness=get_harness("builtin"),
        proxy=proxy,
        trials=TrialSettings(rollout=config),
        executor=executor,
    )


def check_archives(batch, tmp_path, trials: int) -> dict[str, str]:
    """Every trial submitted a fix with reward 1 and its attempt's files came back complete; returns where
    each trial ran (`attempt.json`'s `where`) by trial id."""
    assert [t.outcome for t in batch.trajectories] == [Outcome.SUBMITTED] * trials
    assert all(t.reward == 1.0 and len(t.sequences) == 1 for t in batch.trajectories)
    places = {}
    for t in batch.trajectories:
        folder = tmp_path / "runs" / "t" / "trials" / "step_0" / t.trial_id
        attempt = json.loads((folder / "attempt_0" / "attempt.json").read_text())
        places[t.trial_id] = attempt["where"]
        assert attempt["outcome"] == "submitted" and attempt["reward"] == 1.0
        assert "diff --git" in (folder / "attempt_0" / "diff.patch").read_text()
        assert json.loads((folder / "attempt_0" / "verifier.json").read_text())["reward"] == 1.0
        recorded, arrays = read_archive(folder / "attempt_0")
        assert (
            recorded["trial_id"] == t.trial_id
            and arrays[0]["token_ids"].tolist() == t.sequences[0].token_ids.tolist()
        )
    return places


class DaemonEvents:
    """The container creations and image tags a daemon reports while this watches, read live: a daemon
    keeps only its last 256 events for a later `since` query, and other tests share the first daemon."""

    def __init__(self, client):
        self._stream = client.api.events(
            filters={"type": ["container", "image"], "event": ["create", "tag"]}, decode=True
        )
        self.events: list[dict] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        with contextlib.suppress(Exception):  # the stream ends in an error when `stop` closes it
            self.events.extend(self._stream)

    def stop(self) -> None:
        time.sleep(1)  # events of the last moments still on their way
        self._stream.close()
        self._reader.join(timeout=10)

    def sandboxes(self) -> list[dict[str, str]]:
        """The labels of every sandbox container (agent or verifier) created."""
        labels = [e["Actor"]["Attributes"] for e in self.events if e.get("Type") == "container"]
        return [a for a in labels if a.get("legorl.role") in ("agent", "verifier")]

    def tags(self) -> list[str]:
        """Every image name tagged, once per tagging."""
        return [e["Actor"]["Attributes"]["name"] for e in self.events if e.get("Type") == "image"]


def image_tags(client, repository: str) -> set[str]:
    return {tag for image in client.images.list(name=repository) for tag in image.tags}


@pytest.mark.docker
@pytest.mark.slow
async def test_trials_on_a_node_with_its_own_docker_daemon_run_there_and_come_back(
    two_tasks, tokenizer, proxy_on, tmp_path, second_daemon
):
    from legorl_jax.sandbox import daemon

    first, second = daemon.client(), second_daemon.client()
    assert first.images.get("legorl-base:latest").id == second.images.get("legorl-base:latest").id
    assert all(not image_tags(second, t.image.rsplit(":", 1)[0]) for t in two_tasks)
    engine = ScriptedEngine(tokenizer, lambda prompt, rid: fix_for(two_tasks, tokenizer, prompt, rid))
    engine.max_len = 8192
    proxy = await proxy_on(engine, context_length=8192)
    on_first_daemon, on_second_daemon = DaemonEvents(first), DaemonEvents(second)
    cluster = start_cluster(nodes=2, second_daemon=second_daemon)
    try:
        (node2,) = cluster.worker_nodes
        config = ray_config(tmp_path, cluster)
        executor = await RayExecutor.start(config)
        try:
            # The slot actors' pids: the owner label of every container they create.
            pid_of = {
                s.where: str(await s.actor.__ray_call__.remote(lambda _: os.getpid())) for s in executor.slots
            }
            batch = await collect_both_tasks(two_tasks, proxy, config, executor)
        finally:
            await executor.close()
    finally:
        cluster.shutdown()
        on_first_daemon.stop()
        on_second_daemon.stop()
    places = check_archives(batch, tmp_path, trials=4)
    (on_second,) = [w for w in pid_of if w.endswith(node2.node_id[:8])]
    (on_first,) = set(pid_of) - {on_second}
    assert set(places.values()) == {on_first, on_second}  # both nodes ran trials
    task_of = {t.trial_id: t.task_id for t in batch.trajectories}

    # Each node's sandboxes ran on its own daemon: an agent and a verifier container per trial it ran,
    # created by its slot's process, and none of the other node's.
    for events, where, other in (
        (on_first_daemon, on_first, on_second),
        (on_second_daemon, on_second, on_first),
    ):
        created = events.sandboxes()
        assert not [c for c in created if c["legorl.owner_pid"] == pid_of[other]]
        ours = sorted(
            (c["legorl.role"], c["legorl.task"]) for c in created if c["legorl.owner_pid"] == pid_of[where]
        )
        ran = [task_of[trial] for trial, w in places.items() if w == where]
        assert ours == sorted([("agent", t) for t in ran] + [("verifier", t) for t in ran]), where

    # The task images: on the second daemon built once per task its node ran (none was there before), under
    # the same content-hash tag as on the first (the base image was loaded, so it has the same id there).
    ran_on = {w: {task_of[trial] for trial, p in places.items() if p == w} for w in (on_first, on_second)}
    tagged = on_second_daemon.tags()
    for t in two_tasks:
        repository = t.image.rsplit(":", 1)[0]
        tags = image_tags(second, repository)
        if t.instance_id not in ran_on[on_second]:
            assert not tags
            continue
        (built,) = tags - {t.image}
        assert t.image in tags and tagged.count(built) == 1, (tags, tagged)
        if t.instance_id in ran_on[on_first]:
            assert built in image_tags(first, repository)


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
    from legorl_jax.monitor.rollout_metrics import rollout_metrics

    m = rollout_metrics(batch)  # counted where users look, though the retry made the trial good
    assert m["rollout/infra_failures/node_failed"] == 1 and m["rollout/retried"] == 1
    assert "rollout/dropped/node_failed" not in m


@pytest.mark.docker
@pytest.mark.slow
async def test_a_killed_nodes_containers_on_its_own_docker_daemon_are_reaped_once_the_loss_is_handled(
    two_tasks, tokenizer, proxy_on, tmp_path, second_daemon
):
    engine = ScriptedEngine(
        tokenizer, lambda prompt, rid: fix_for(two_tasks, tokenizer, prompt, rid), delay_s=1.0
    )
    engine.max_len = 8192
    proxy = await proxy_on(engine, context_length=8192)
    second = second_daemon.client()
    cluster = start_cluster(nodes=2, second_daemon=second_daemon)
    try:
        (node2,) = cluster.worker_nodes
        config = ray_config(tmp_path, cluster, retries=1)
        executor = await RayExecutor.start(config)
        try:
            (lost,) = [s for s in executor.slots if s.where.endswith(node2.node_id[:8])]
            owned = {"label": [f"legorl.owner_pid={lost.owner['legorl.owner_pid']}"]}
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
            # The node's slot has a sandbox running on the node's own daemon: kill the node mid-trial.
            while not second.api.containers(filters=owned):
                assert not run.done(), "the run ended before the second node ran a sandbox"
                await asyncio.sleep(0.1)
            cluster.remove_node(node2, allow_graceful=False)  # its raylet and workers are killed
            batch = await asyncio.wait_for(run, timeout=600)
            assert executor.live_slots == 1
        finally:
            await executor.close()
    finally:
        cluster.shutdown()
    assert [t.outcome for t in batch.trajectories] == [Outcome.SUBMITTED] * 2
    assert rollout_metrics_of(batch)["rollout/infra_failures/node_failed"] == 1
    # What the dead slot left on the node's daemon (its container, stopped as its owner died) was removed
    # when the loss was handled, not left for a next start of that node.
    assert executor.reaped[lost.where], executor.reaped
    assert second.api.containers(all=True, filters=owned) == []


def rollout_metrics_of(batch) -> dict[str, float]:
    from legorl_jax.monitor.rollout_metrics import rollout_metrics

    return rollout_metrics(batch)


@pytest.mark.slow
def test_a_killed_nodes_raylet_dump_is_printed_once_into_the_runs_log():
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(__file__), "ray_node_lost_log.py")
    out = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=400, check=False)
    log = out.stdout + out.stderr
    assert out.returncode == 0 and "DONE" in out.stdout, log[-4000:]
    assert "NODE MARKED DEAD" in out.stdout, log[-4000:]
    # Ray publishes the terminated raylet's message (with its state dump's last lines) again when the node
    # is marked dead: the run's log holds it, and each dump line, once.
    assert log.count("Raylet is terminated") == 1, log[-6000:]
    assert log.count("[state-dump] DebugString() time ms") == 1, log[-6000:]
