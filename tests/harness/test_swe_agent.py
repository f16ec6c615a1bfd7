"""The real SWE-agent 1.1.0 (its own venv, from the vendored release) against the real capture proxy, its
commands run by a real SWE-ReX server inside the real agent sandbox.

The scripted engine stands in for the policy only; the proxy, SWE-agent's agent loop, tools and templates,
litellm, SWE-ReX, the sandbox and the verifier are all real. The `harness` tests skip, naming the install
command, where `python tools/install_harness.py swe_agent` has not run.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import subprocess
import sys
import tarfile

import numpy as np
import pytest
from scripted_engine import ScriptedEngine

from legorl_jax.harness import HarnessNotInstalled, LLMEndpoint, get_harness, swe_agent
from legorl_jax.tasks.agent_sandbox import agent_sandbox, agent_sandbox_spec
from legorl_jax.tasks.verifier import grade
from legorl_jax.types import Outcome

ROOT = pathlib.Path(__file__).parents[2]
TASK = "autocomplete-casefold-prefix"

needs_install = pytest.mark.skipif(
    swe_agent.installed() is None, reason=f"SWE-agent is not installed: {swe_agent.INSTALL_COMMAND}"
)


def tool_call(name: str, **arguments) -> str:
    """One tool call in the tiny template's (Qwen3 JSON) format, as the policy would sample it."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def fix_script(task) -> list[str]:
    """SWE-agent's own tools for the task's known fix: bash applies it, then submit twice (the default
    config's review_on_submit_m answers the first submit with a review checklist)."""
    return [
        tool_call("bash", command=f"git apply <<'PATCH'\n{task.patch}PATCH"),
        tool_call("submit"),
        tool_call("submit"),
    ]


@pytest.mark.harness
@pytest.mark.docker
@needs_install
async def test_a_scripted_fix_through_swe_agent_submits_scores_reward_one_and_records_every_sampled_token(
    builtin_tasks, tokenizer, proxy_on
):
    task = builtin_tasks[TASK]
    script = fix_script(task)
    engine = ScriptedEngine(tokenizer, script)
    harness = get_harness("swe_agent")
    proxy = await proxy_on(engine)
    session = proxy.open_session(task.instance_id, f"{task.instance_id}-swea")
    llm = LLMEndpoint(session.openai_base_url, session.anthropic_base_url, step_limit=10)
    spec = dataclasses.replace(agent_sandbox_spec(task, mounts=harness.mounts), user=harness.sandbox_user)
    async with agent_sandbox(task, spec=spec) as (sandbox, workspace):
        result = await harness.run(task, sandbox, llm)
        diff = await sandbox.diff(workspace.base_commit)
    closed = await proxy.close_session(session.session_id)
    assert result.exit_status is Outcome.SUBMITTED and result.steps == len(script), result.log[-3000:]
    trajectory = json.loads(result.log)
    assert trajectory["info"]["exit_status"] == "submitted"
    assert trajectory["info"]["submission"].startswith("diff --git a/typeahead/normalize.py")
    report = await grade(task, diff)
    assert report.reward == 1.0 and report.resolved and not report.tampering, report
    # Every reply is one turn on the session's main branch, each sampled token with the engine's log-prob.
    assert len(engine.calls) == len(script)
    (seq,) = closed.sequences
    sampled = seq.loss_mask == 1
    assert sampled.sum() == sum(len(tokenizer.encode(text)) + 1 for text in script)
    expected = np.asarray([-0.01 * (1 + (t % 97)) for t in seq.token_ids[sampled]], np.float32)
    np.testing.assert_allclose(seq.behaviour_logprobs[sampled], expected, rtol=0, atol=1e-7)
    assert closed.flags.raised() == (), closed.flags


@pytest.mark.harness
@needs_install
def test_installing_it_again_changes_nothing():
    record = (swe_agent.install_dir() / "installed.json").read_text()
    ran = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "install_harness.py"), "swe_agent"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    assert "is already installed" in ran.stdout
    assert (swe_agent.install_dir() / "installed.json").read_text() == record


def test_without_the_install_the_harness_names_its_install_command(monkeypatch, tmp_path):
    monkeypatch.setenv("LEGORL_HARNESS_HOME", str(tmp_path))
    with pytest.raises(HarnessNotInstalled, match=r"python tools/install_harness.py swe_agent"):
        get_harness("swe_agent")


def test_the_installer_takes_the_vendored_archive_when_it_is_there(tmp_path):
    vendored = tmp_path / "swe-agent-1.1.0.tar.gz"
    vendored.write_bytes(b"")
    assert swe_agent.choose_source(None, vendored=vendored) == (vendored, "the vendored archive")


def test_without_a_vendored_archive_the_installer_takes_the_upstream_release_tag(tmp_path):
    source, what = swe_agent.choose_source(None, vendored=tmp_path / "swe-agent-1.1.0.tar.gz")
    assert source == "https://github.com/SWE-agent/SWE-agent/archive/refs/tags/v1.1.0.tar.gz"
    assert what == "the upstream release tag v1.1.0"


def test_a_given_source_wins_over_the_vendored_archive(tmp_path):
    vendored = tmp_path / "swe-agent-1.1.0.tar.gz"
    vendored.write_bytes(b"")
    given = tmp_path / "tree"
    assert swe_agent.choose_source(given, vendored=vendored) == (given, "the given source")


def test_a_failed_download_names_the_url_and_the_offline_alternative(tmp_path):
    # A file:// URL that does not exist fails in urllib like an unreachable host, without the network.
    url = (tmp_path / "missing" / "v1.1.0.tar.gz").as_uri()
    with pytest.raises(SystemExit, match=r"downloading SWE-agent 1\.1\.0 from file://.*--source"):
        swe_agent._download(url, tmp_path)


def test_a_downloaded_release_archive_unpacks_into_the_source_tree(tmp_path):
    tree = tmp_path / "SWE-agent-1.1.0"
    for folder in ("sweagent", "config", "tools"):
        (tree / folder).mkdir(parents=True)
    (tree / "sweagent" / "__init__.py").write_text("VERSION = '1.1.0'\n")
    archive = tmp_path / "v1.1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tree, arcname=tree.name)
    (tmp_path / "fetched").mkdir()
    fetched = swe_agent._download(archive.as_uri(), tmp_path / "fetched")
    (tmp_path / "install").mkdir()
    swe_agent._unpack(fetched, tmp_path / "install" / "src")
    src = tmp_path / "install" / "src"
    assert (src / "sweagent" / "__init__.py").read_text() == "VERSION = '1.1.0'\n"
    assert (src / "trajectories").is_dir()


@pytest.mark.harness
@pytest.mark.docker
@needs_install
@pytest.mark.parametrize(
    ("reply", "step_limit", "status"),
    [
        pytest.param(  # ~13 s: ten replies without a tool call
            "The bug is in the prefix matching; I would lowercase both sides.",
            10,
            "format_failure",
            marks=pytest.mark.slow,
        ),
        (tool_call("bash", command="ls"), 2, "step_limit"),
    ],
)
async def test_its_own_exits_map_to_policy_outcomes(
    builtin_tasks, tokenizer, proxy_on, reply, step_limit, status
):
    task = builtin_tasks[TASK]
    engine = ScriptedEngine(tokenizer, [reply])
    harness = get_harness("swe_agent")
    proxy = await proxy_on(engine, max_consecutive_no_tool=10)
    session = proxy.open_session(task.instance_id, f"{task.instance_id}-{status}")
    llm = LLMEndpoint(session.openai_base_url, session.anthropic_base_url, step_limit=step_limit)
    spec = dataclasses.replace(agent_sandbox_spec(task, mounts=harness.mounts), user=harness.sandbox_user)
    async with agent_sandbox(task, spec=spec) as (sandbox, _):
        result = await harness.run(task, sandbox, llm)
    await proxy.close_session(session.session_id)
    assert result.exit_status is Outcome(status), json.loads(result.log)["info"]
    assert 1 <= result.steps <= max(step_limit, 4)


@pytest.mark.harness
@pytest.mark.docker
@needs_install
async def test_the_rollout_runs_swe_agent_in_a_root_sandbox_and_scores_the_fix(
    builtin_tasks, tokenizer, proxy_on, tmp_path
):
    from legorl_jax.config import RolloutConfig
    from legorl_jax.rollout import TrialSettings, run_trial
    from legorl_jax.types import Outcome

    task = builtin_tasks[TASK]
    proxy = await proxy_on(ScriptedEngine(tokenizer, fix_script(task)))
    config = RolloutConfig(retries=0, runs_dir=str(tmp_path), experiment="swea")
    trajectory = await run_trial(
        task,
        harness=get_harness("swe_agent"),
        proxy=proxy,
        trial_id="swea-0",
        group_id="g",
        trial_dir=tmp_path / "trial",
        trials=TrialSettings(rollout=config, step_limit=10),
    )
    assert trajectory.outcome is Outcome.SUBMITTED and trajectory.reward == 1.0, trajectory.timings
    assert (
        trajectory.features["turns"] == 3
        and (tmp_path / "trial" / "attempt_0" / "harness.log").stat().st_size > 0
    )
