"""What the Claude Code and OpenCode tests share: a real trial of a harness that runs inside its sandbox.

    trajectory, record, probe, hits = await trial_with_probe(task, harness, proxy, tmp_path, step_limit=8)
    assert_every_sampled_token_recorded(trajectory, tokenizer, script)  # main-branch tokens and log-probs
    assert_only_the_proxy_was_reached(probe, hits)

`run_trial` runs the real harness in a `proxy_only` sandbox; `ProbeAfterRun` then tries, from that same
sandbox, the host's other ports and an outside address, so a test sees what the agent could have reached.
`record` is the proxy's archived `trajectory.json` of the attempt (turns, branches, counters).
"""

from __future__ import annotations

import json
import pathlib
import re

import numpy as np

from legorl_jax.config import RolloutConfig
from legorl_jax.rollout import TrialSettings, run_trial

PROBE = """
import socket, sys
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        print(target, "open")
    except OSError as exc:
        print(target, "closed", type(exc).__name__)
"""
OUTSIDE = ("1.1.1.1:443", "8.8.8.8:53")


def one_hunk_edit(patch: str) -> tuple[str, str, str]:
    """(path, old text, new text) of a patch whose one hunk removes then adds a block of lines."""
    path = re.search(r"^\+\+\+ b/(.+)$", patch, re.M).group(1)
    old = "\n".join(
        line[1:] for line in patch.splitlines() if line.startswith("-") and not line.startswith("---")
    )
    new = "\n".join(
        line[1:] for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++")
    )
    return path, old, new


def tool_call(name: str, **arguments) -> str:
    """One tool call in the tiny template's (Qwen3 JSON) format, as the policy would sample it."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


class ProbeAfterRun:
    """The real harness, then a connection probe from its own sandbox (to the host's other ports and
    outside)."""

    def __init__(self, harness, other_ports: list[int]):
        self.harness, self.other_ports = harness, other_ports
        self.name, self.network, self.mounts = harness.name, harness.network, harness.mounts
        self.sandbox_user = harness.sandbox_user
        self.output = ""

    async def run(self, task, sandbox, llm):
        result = await self.harness.run(task, sandbox, llm)
        gateway = llm.openai_base_url.removeprefix("http://").split("/", 1)[0].rsplit(":", 1)[0]
        targets = [f"{gateway}:{port}" for port in self.other_ports] + list(OUTSIDE)
        probed = await sandbox.exec(["python3", "-c", PROBE, *targets], timeout=60)
        self.output = probed.stdout + probed.stderr
        return result

    def reached(self) -> dict[str, str]:
        return dict(line.split(" ", 1) for line in self.output.strip().splitlines())


async def trial_with_probe(task, harness, proxy, tmp_path: pathlib.Path, *, step_limit: int):
    """A real trial (run_trial) of `harness` with a listener on another host port; (trajectory, record, probe,
    hits)."""
    import asyncio

    hits = []

    async def other_server(reader, writer):
        hits.append(1)
        writer.close()

    server = await asyncio.start_server(other_server, "0.0.0.0", 0)
    probe = ProbeAfterRun(harness, [server.sockets[0].getsockname()[1]])
    config = RolloutConfig(retries=0, runs_dir=str(tmp_path), experiment=harness.name, trial_timeout_s=600)
    try:
        trajectory = await run_trial(
            task,
            harness=probe,
            proxy=proxy,
            trial_id=f"{harness.name}-0",
            group_id="g",
            trial_dir=tmp_path / "trial",
            trials=TrialSettings(rollout=config, step_limit=step_limit),
        )
    finally:
        server.close()
    record = json.loads((tmp_path / "trial" / "attempt_0" / "trajectory.json").read_text())
    return trajectory, record, probe, hits


def assert_every_sampled_token_recorded(trajectory, tokenizer, script: list[str]) -> None:
    """The trajectory's one (main-branch) sequence holds every scripted reply's tokens (+ end of turn) as
    sampled, each with the scripted engine's log-prob."""
    (seq,) = trajectory.sequences
    sampled = seq.loss_mask == 1
    assert sampled.sum() == sum(len(tokenizer.encode(text)) + 1 for text in script)
    expected = np.asarray([-0.01 * (1 + (t % 97)) for t in seq.token_ids[sampled]], np.float32)
    np.testing.assert_allclose(seq.behaviour_logprobs[sampled], expected, rtol=0, atol=1e-7)


def assert_only_the_proxy_was_reached(probe: ProbeAfterRun, hits: list) -> None:
    """From the harness's sandbox neither the host's other port nor outside addresses answered."""
    reached = probe.reached()
    assert reached and all(v.startswith("closed") for v in reached.values()), probe.output
    assert hits == []


async def engine_failure_trial(task, harness, tokenizer, proxy_on, tmp_path: pathlib.Path):
    """A real trial whose engine fails every call; (trajectory, the attempt's attempt.json, the monotonic time
    of each engine call)."""
    import time

    from scripted_engine import ScriptedEngine

    from legorl_jax.engine.base import EngineError

    class Timed(ScriptedEngine):
        async def generate(self, *args, **kwargs):
            times.append(time.monotonic())
            return await super().generate(*args, **kwargs)

    times: list[float] = []
    engine = Timed(tokenizer, ["unused"])
    engine.fail_with = EngineError("the scripted engine is down")
    proxy = await proxy_on(engine)
    trajectory, _, _, _ = await trial_with_probe(task, harness, proxy, tmp_path, step_limit=8)
    attempt = json.loads((tmp_path / "trial" / "attempt_0" / "attempt.json").read_text())
    return trajectory, attempt, times
