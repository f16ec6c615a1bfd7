"""Fault injection on a step's rollout over an engine fleet: two of our own servers (`legorl_jax.engine.serve`
on the tiny model) behind the real sglang-router, the real capture proxy, the built-in harness in Docker
sandboxes and the verifier. One engine is killed -9 while it holds trials in flight: every trial ends, the
attempts that failed on the dead engine are retried on the live one once the router took the dead one out
(rollout/retry.py), none is dropped for the engine's death, and the step's figures count every failed attempt
and retry."""

from __future__ import annotations

import asyncio
import signal
import sys

import pytest
from processes import free_port, start_engine_servers
from rollout_fixtures import MAX_LEN

from legorl_jax.config import EngineConfig, ProxyConfig, RolloutConfig, RouterConfig
from legorl_jax.engine import open_engine
from legorl_jax.engine.sglang_launcher import ServerProcess
from legorl_jax.harness import get_harness
from legorl_jax.monitor.rollout_metrics import rollout_metrics
from legorl_jax.proxy import CaptureProxy
from legorl_jax.rollout import collect
from legorl_jax.types import Outcome

pytest.importorskip("sglang_router", reason="needs sglang-router (pip install 'legorl_jax[test]')")
pytestmark = [pytest.mark.docker, pytest.mark.slow]


async def killed_once_busy(fleet, procs, collecting) -> ServerProcess:
    """Once an engine has a request in flight, pauses it in place (the trial is held there, no race with a
    fast decode) and kills it -9; returns the killed server."""
    while True:
        assert not collecting.done(), "the step ended before an engine could be killed mid-step"
        info = await fleet.server_info()
        # An engine that did not answer in time reports {"error": ...}: ask again.
        busy = [url for url, body in info.items() if body.get("running")]
        if busy:
            await fleet.engines[busy[0]].pause("in_place")
            victim = next(p for p in procs if p.base_url == busy[0])
            victim._signal(signal.SIGKILL)
            victim.process.wait()
            return victim
        await asyncio.sleep(0.01)


async def test_one_of_two_engines_killed_mid_step_every_trial_ends_retried_on_the_live_engine_and_counted(
    rollout_model_dir, two_tasks, tokenizer, tmp_path
):
    procs = await start_engine_servers(
        rollout_model_dir, 2, tmp_path, "--return-routed-experts", "always", max_len=MAX_LEN, min_bucket=64
    )
    engine_config = EngineConfig(
        backend="sglang",
        servers=[p.base_url for p in procs],
        router=RouterConfig(
            python=sys.executable,
            port=free_port(),
            prometheus_port=free_port(),
            health_check_interval_s=1,
            health_failure_threshold=2,
        ),
    )
    try:
        async with open_engine(engine_config, "unused") as fleet:
            proxy = CaptureProxy(
                fleet,
                tokenizer,
                ProxyConfig(
                    max_response_tokens=12,
                    max_consecutive_no_tool=2,
                    archive_dir=str(tmp_path / "proxy-archive"),
                ),
                admin_token="rollout-admin-token",
                context_length=MAX_LEN,
            )
            await proxy.start()
            collecting = asyncio.ensure_future(
                collect(
                    two_tasks,
                    group_size=2,
                    harness=get_harness("builtin"),
                    proxy=proxy,
                    step=0,
                    step_limit=4,
                    config=RolloutConfig(
                        runs_dir=str(tmp_path / "runs"),
                        experiment="t",
                        concurrency=4,
                        retries=2,
                        retry_delay_s=0,
                        retry_wait_s=60,
                    ),
                )
            )
            victim = await killed_once_busy(fleet, procs, collecting)
            try:
                batch = await asyncio.wait_for(collecting, 600)
            finally:
                await proxy.stop()
            survivor = next(p for p in procs if p is not victim)
            assert await fleet.healthy_engines() == [survivor.base_url]
    finally:
        for proc in procs:
            proc.stop(5)
    # Every trial in flight ended, in a policy outcome: none dropped for the engine's death.
    assert len(batch.trajectories) == 4
    assert batch.dropped.get(Outcome.ENGINE_FAILED.value, 0) == 0, batch.dropped
    assert all(t.outcome is not Outcome.ENGINE_FAILED for t in batch.trajectories)
    # The trials the dead engine held failed there and were retried (on the live engine: they ended).
    failed_there = [t for t in batch.trajectories if Outcome.ENGINE_FAILED.value in t.attempts]
    assert failed_there, [t.attempts for t in batch.trajectories]
    assert all(t.attempts[-1] != Outcome.ENGINE_FAILED.value for t in failed_there)
    # The step's figures count them.
    figures = rollout_metrics(batch)
    assert figures["rollout/infra_failures/engine_failed"] >= 1
    assert figures["rollout/retried"] >= 1
    assert figures["rollout/infra_failures/engine_failed"] == sum(
        t.attempts.count(Outcome.ENGINE_FAILED.value) for t in batch.trajectories
    )
