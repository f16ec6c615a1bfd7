"""Fault injection on a whole loop step over an engine fleet: the run as `train.py` builds it
(`run.build_parts`, `run_loop`) with `engine.servers` two of our own servers on the tiny MoE behind the real
sglang-router; one engine is killed -9 while it holds a trial in flight. The step ends, the dead engine's
trials are retried on the live one (none dropped for its death), the weights are published to the live
engine, and the step's row in `metrics.jsonl` counts the failures and retries."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
import sys

import pytest
from processes import free_port, start_engine_servers

from legorl_jax.config import (
    Config,
    EngineConfig,
    LoopConfig,
    MeshConfig,
    RolloutConfig,
    RouterConfig,
    TasksConfig,
    TrackingConfig,
    TrainConfig,
)
from legorl_jax.engine.sglang_client import SGLangEngine
from legorl_jax.engine.sglang_launcher import ServerProcess

pytest.importorskip("sglang_router", reason="needs sglang-router (pip install 'legorl_jax[test]')")
pytestmark = pytest.mark.docker  # ~40 s on the loaded 2-core machine: in the default suite
MAX_LEN = 2048
TASK = "ratelimit-slow-rates-never-refill"


async def kill_once_busy(procs, running) -> ServerProcess:
    """Once an engine has a request in flight, pauses it in place (its trial held there) and kills it -9."""
    clients = {p.base_url: SGLangEngine(p.base_url) for p in procs}
    try:
        while True:
            assert not running.done(), "the step ended before an engine could be killed mid-step"
            for proc in procs:
                info = await clients[proc.base_url].server_info()
                if info["running"]:
                    await clients[proc.base_url].pause("in_place")
                    proc._signal(signal.SIGKILL)
                    proc.process.wait()
                    return proc
            await asyncio.sleep(0.01)
    finally:
        for client in clients.values():
            await client.close()


async def test_one_of_two_engines_killed_mid_step_the_step_ends_with_every_trial_retried_and_counted(
    loop_model_dir, tmp_path
):
    from legorl_jax.run import build_parts, run_loop

    procs = await start_engine_servers(
        loop_model_dir, 2, tmp_path, "--return-routed-experts", "always", max_len=MAX_LEN, min_bucket=64
    )
    config = Config(
        tasks=TasksConfig(ids=[TASK], eval_split=None),
        rollout=RolloutConfig(
            group_size=2,
            concurrency=2,
            retries=2,
            retry_delay_s=0,
            retry_wait_s=60,
            runs_dir=str(tmp_path / "runs"),
            experiment="fleet",
            trial_timeout_s=300,
        ),
        train=TrainConfig(max_tokens=MAX_LEN),
        engine=EngineConfig(
            backend="sglang",
            servers=[p.base_url for p in procs],
            router=RouterConfig(
                python=sys.executable,
                port=free_port(),
                prometheus_port=free_port(),
                health_check_interval_s=1,
                health_failure_threshold=2,
            ),
        ),
        tracking=TrackingConfig(backend="none"),
        mesh=MeshConfig(devices=[0]),  # one device, as on a user's machine (the suite forces 8)
        loop=LoopConfig(steps=1, mode="sync", validate_every=0, trial_texts=False, publish="disk"),
    )
    config = dataclasses.replace(
        config,
        model=dataclasses.replace(config.model, path=str(loop_model_dir)),
        proxy=dataclasses.replace(
            config.proxy, context_length=MAX_LEN, max_response_tokens=12, max_consecutive_no_tool=2
        ),
    )
    try:
        async with build_parts(config) as built:
            running = asyncio.ensure_future(
                run_loop(built.parts, built.state, start_step=built.start_step, cursor=built.cursor)
            )
            victim = await kill_once_busy(procs, running)
            (record,) = await asyncio.wait_for(running, 900)
            survivor = next(p for p in procs if p is not victim)
            assert await built.parts.publisher.engine.healthy_engines() == [survivor.base_url]
    finally:
        for proc in procs:
            proc.stop(5)
    assert record.step == 0
    (row,) = [
        json.loads(line) for line in (tmp_path / "runs" / "fleet" / "metrics.jsonl").read_text().splitlines()
    ]
    figures = row.get("metrics", row)
    # Every trial ended, none dropped for the engine's death; the failures and retries are in the step's row.
    assert figures.get("rollout/dropped/engine_failed", 0) == 0, figures
    assert figures["rollout/infra_failures/engine_failed"] >= 1, figures
    assert figures["rollout/retried"] >= 1, figures
    trials = list((tmp_path / "runs" / "fleet" / "trials").rglob("trial.json"))
    summaries = [json.loads(t.read_text()) for t in trials]
    assert len(summaries) == 2 and all(s["outcome"] != "engine_failed" for s in summaries), summaries
