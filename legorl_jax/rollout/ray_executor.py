"""Trials on Ray nodes (`rollout.executor: ray`): one slot actor per trial a node may run at once.

    executor = await RayExecutor.start(cfg.rollout)     # connects to rollout.ray.address, or starts Ray here
    batch = await collect(tasks, ..., executor=executor)
    await executor.close()

What runs where. The orchestrator (this process) keeps the capture proxy, the sessions, the outcome rules,
the retries and the archive: the proxy writes each session's record into the run folder, and the attempt's
files (diff, harness log, verifier verdict) come back as the slot's return value and are written here.
Each Ray node runs `trials_per_node` slot actors (`executor.LocalSlot` made a Ray actor, each holding one
`legorl_trial` resource and no CPU, pinned to its node); one attempt runs in one slot from start to end:
the task's image on that node's Docker daemon (built from the offline base image, once per node:
`images.py` checks the daemon and locks per tag), the agent sandbox and the harness (which reaches its
session on the proxy's address: a proxy_only sandbox through the node's relay to
`SandboxSpec.proxy_host`), then grading.

A node that dies takes its slots with it: the call in flight raises `NodeLost`, the attempt is
`node_failed` (an infrastructure failure, counted and retried in a slot of another node), and every slot
of that node leaves the pool (an idle one of the same node would take the retry and fail it again); the run
goes on with the others. With no slot left the run stops with an error. The containers the lost node's slots
left on its Docker daemon (stopped when their owner died, not removed) are removed from here when that
daemon is reachable from this process (a `tcp://` / `ssh://` `DOCKER_HOST`, or a socket of this same
machine), found by their owner labels (sandbox/reaper.py); otherwise that node's next sandbox start reaps
them (its reaper removes what dead processes of its machine left).
A local cluster (`rollout.ray.address` empty) is one node in this machine, started with the dashboard off.

What Ray prints here. The workers' output stays in each node's session folder (`log_to_driver=False`; the
run's log names it). Ray's driver still prints the cluster's error messages (a node marked dead, a raylet
terminated with the last lines of its state dump): the same message is published more than once for one
death (when the raylet exits and again when the node is marked dead, further apart than Ray's own
5 s de-duplication window), so `_print_each_error_once` wraps Ray's printer to print each one once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator
from typing import Any

from legorl_jax.config import RolloutConfig
from legorl_jax.rollout.executor import Attempt, LocalSlot, NodeLost, Slot, Work
from legorl_jax.tasks.report import VerifierError, VerifierReport
from legorl_jax.tasks.schema import Task
from legorl_jax.tasks.task_image import ImageError

log = logging.getLogger(__name__)

TRIAL_RESOURCE = "legorl_trial"
"""The Ray resource a node declares per trial it may run (`ray start --resources='{"legorl_trial": 4}'`)."""


class _RaySlot:
    """A slot actor seen from the orchestrator: its calls, their cancellation, and its death."""

    def __init__(self, actor: Any, where: str):
        self.actor, self.where, self.dead = actor, where, False
        self.owner: dict[str, str] = {}  # LocalSlot.owner() of the actor, read once it is placed

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        import ray

        ref = getattr(self.actor, method).remote(*args, **kwargs)
        try:
            return await ref
        except asyncio.CancelledError:  # the attempt timed out: stop its sandbox on the node too
            ray.cancel(ref)
            raise
        except ray.exceptions.RayTaskError as exc:  # our code raised on the node: raise it here
            if isinstance(exc.cause, (ImageError, VerifierError)):
                raise exc.cause from None
            raise
        except ray.exceptions.RayError as exc:
            self.dead = True
            raise NodeLost(
                f"the Ray node {self.where} was lost during {method}: {type(exc).__name__}"
            ) from exc

    async def ensure_image(self, task: Task) -> None:
        await self._call("ensure_image", task)

    async def work(self, task: Task, work: Work) -> Attempt:
        attempt: Attempt = await self._call("work", task, work)
        return attempt

    async def grade(self, task: Task, diff: str, work: Work) -> VerifierReport:
        report: VerifierReport = await self._call("grade", task, diff, work)
        return report


_SEEN_ERRORS: set[str] = set()
"""The raylet error messages printed so far by this process (`_print_each_error_once`)."""


def _print_each_error_once() -> None:
    """Makes the Ray driver print each raylet error message once (module docstring). Ray's thread that
    listens for them calls `ray._private.worker.print_to_stdstream` by its module name, so the wrapper is
    installed there; idempotent; where a Ray version has no such printer nothing changes."""
    from ray._private import worker

    printer = getattr(worker, "print_to_stdstream", None)
    if printer is None or getattr(printer, "legorl_once", False):
        return

    def once(data: dict[str, Any], ignore_prefix: bool) -> None:
        if data.get("pid") == "raylet":
            fresh = [line for line in data.get("lines", []) if line not in _SEEN_ERRORS]
            _SEEN_ERRORS.update(fresh)
            if not fresh:
                return
            data = {**data, "lines": fresh}
        printer(data, ignore_prefix)

    once.legorl_once = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = once


def _reap_lost(owners: list[dict[str, str]], where: str) -> list[str]:
    """Removes the containers the lost slots `owners` left on their node's daemon, where this process can
    reach it (module docstring); returns their names. Synchronous; never raises (logs instead)."""
    import docker

    from legorl_jax.sandbox import reaper

    removed: list[str] = []
    for owner in owners:
        docker_host = owner.get("docker_host", "")
        remote = docker_host.startswith(("tcp://", "ssh://", "http://", "https://"))
        if not remote and owner.get(reaper.OWNER_HOST) != reaper.host_id():
            log.info(
                "the lost Ray node %s's Docker daemon (%s) is not reachable from here: its next sandbox "
                "start reaps what its trials left",
                where,
                docker_host or "its default socket",
            )
            continue
        try:
            client = (
                docker.DockerClient(base_url=docker_host, timeout=30)
                if docker_host
                else docker.from_env(timeout=30)
            )
            try:
                removed += reaper.reap_owned_by(client, owner)
            finally:
                client.close()
        except Exception as exc:  # noqa: BLE001 - the node is lost; its next start reaps what is left
            log.warning("could not reap the lost Ray node %s's containers on %s: %r", where, docker_host, exc)
    if removed:
        log.info("reaped %d containers the lost Ray node %s left: %s", len(removed), where, removed)
    return removed


def _check_reachable(address: str, timeout_s: float) -> None:
    """A clear error now rather than Ray's retries when nothing listens at `address` (`auto` is Ray's)."""
    if address == "auto":
        return
    hostport = address.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"rollout.ray.address must be host:port, ray://host:port or auto, got {address!r}")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConnectionError(f"rollout.ray.address {address!r} is unreachable: {exc}") from exc


class RayExecutor:
    """Slots on the nodes of a Ray cluster (module docstring). Make one with `start`."""

    def __init__(self, slots: list[_RaySlot], *, started_ray: bool):
        self.slots = slots
        self._free: asyncio.Queue[_RaySlot | None] = asyncio.Queue()
        for slot in slots:
            self._free.put_nowait(slot)
        self._started_ray = started_ray
        self.reaped: dict[str, list[str]] = {}
        """Per lost node, the containers its slots left that were removed from here (module docstring)."""

    @classmethod
    async def start(cls, config: RolloutConfig) -> RayExecutor:
        """Connects to `config.ray.address` (or starts a one-node Ray here) and places the slot actors:
        `config.trials_per_node` on every alive node that declares `legorl_trial` (at most what it
        declares). Raises ConnectionError for an unreachable address and ValueError for a cluster whose
        nodes declare no trial slot."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        address = config.ray.address
        _print_each_error_once()
        if address:
            _check_reachable(address, config.ray.connect_timeout_s)
            context = ray.init(address=address, include_dashboard=False, log_to_driver=False)
        else:
            context = ray.init(
                num_cpus=config.ray.node_cpus,
                resources={TRIAL_RESOURCE: config.trials_per_node},
                include_dashboard=False,
                log_to_driver=False,
            )
        session = getattr(context, "address_info", {}).get("session_dir")
        if session:  # each node writes its raylet's and workers' logs under its own session folder
            log.info("Ray node logs: %s/logs on each node", session)
        try:
            nodes = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get(TRIAL_RESOURCE, 0) >= 1]
            if not nodes:
                raise ValueError(
                    f"no alive node of the Ray cluster at {address or 'this machine'!r} declares the "
                    f"{TRIAL_RESOURCE!r} resource (got {len(ray.nodes())} nodes): start each node with "
                    f"ray start --resources='{{\"{TRIAL_RESOURCE}\": N}}'"
                )
            actor_class = ray.remote(LocalSlot)
            slots = []
            for node in nodes:
                per_node = min(config.trials_per_node, int(node["Resources"][TRIAL_RESOURCE]))
                where = f"{node['NodeManagerAddress']}/{node['NodeID'][:8]}"
                for _ in range(per_node):
                    actor = actor_class.options(
                        num_cpus=0,
                        resources={TRIAL_RESOURCE: 1},
                        max_restarts=0,
                        scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
                    ).remote()
                    slots.append(_RaySlot(actor, where))
            owners = await asyncio.gather(*(slot.actor.owner.remote() for slot in slots))
            for slot, owner in zip(slots, owners, strict=True):
                slot.owner = owner
            log.info("Ray trial slots: %d on %d nodes", len(slots), len(nodes))
        except BaseException:
            ray.shutdown()
            raise
        return cls(slots, started_ray=not address)

    @property
    def live_slots(self) -> int:
        return sum(not s.dead for s in self.slots)

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[Slot]:
        while True:
            slot = await self._free.get() if self.live_slots else None
            if slot is None:  # every slot is gone: pass the news on to the next waiter
                self._free.put_nowait(None)
                raise RuntimeError("every Ray node that ran trials is gone: no trial slot is left")
            if not slot.dead:  # else: a slot of a node found lost while it waited in the pool
                break
        try:
            yield slot
        finally:
            if not slot.dead:
                self._free.put_nowait(slot)
            else:
                lost = [other for other in self.slots if other.where == slot.where]
                for other in lost:  # the node is lost: none of its slots takes another attempt
                    other.dead = True
                if slot.where not in self.reaped:  # once per node: what its slots left on its daemon goes
                    self.reaped[slot.where] = []
                    self.reaped[slot.where] = await asyncio.to_thread(
                        _reap_lost, [o.owner for o in lost if o.owner], slot.where
                    )
                if self.live_slots == 0:
                    self._free.put_nowait(None)
                else:
                    log.warning("the Ray node %s is lost; %d trial slots left", slot.where, self.live_slots)

    async def close(self) -> None:
        """Removes the slot actors and disconnects (stopping Ray when this executor started it)."""
        import ray

        for slot in self.slots:
            with contextlib.suppress(Exception):
                ray.kill(slot.actor)
        ray.shutdown()
