"""What Claude Code, OpenCode and Codex (npm-published native agents, run inside the sandbox) share: the
install command when missing, an idempotent install, and the tiny model's own sampling ending in a policy
outcome."""

from __future__ import annotations

import importlib
import pathlib
import subprocess
import sys

import pytest
from native_trial import trial_with_probe

from legorl_jax.harness import HarnessNotInstalled, get_harness
from legorl_jax.harness.install import install_dir
from legorl_jax.harness.native_agent import installed
from legorl_jax.types import Outcome

ROOT = pathlib.Path(__file__).parents[2]
TASK = "autocomplete-casefold-prefix"
POLICY_OUTCOMES = {Outcome.SUBMITTED, Outcome.STEP_LIMIT, Outcome.CONTEXT_OVERFLOW, Outcome.NO_TOOL_COLLAPSE,
                   Outcome.FORMAT_FAILURE}  # fmt: skip


def _names(*, installed_only: bool) -> list:
    params = []
    for name in ("claude_code", "opencode", "codex"):
        package = importlib.import_module(f"legorl_jax.harness.{name}").PACKAGE
        skip = pytest.mark.skipif(
            installed_only and installed(package) is None,
            reason=f"{name} is not installed: {package.install_command}",
        )
        params.append(pytest.param(name, marks=skip, id=name))
    return params


@pytest.mark.parametrize("name", _names(installed_only=False))
def test_without_the_install_the_harness_names_its_install_command(name, monkeypatch, tmp_path):
    monkeypatch.setenv("LEGORL_HARNESS_HOME", str(tmp_path))
    with pytest.raises(
        HarnessNotInstalled, match=rf"install it with: python tools/install_harness.py {name}$"
    ):
        get_harness(name)


@pytest.mark.harness
@pytest.mark.parametrize("name", _names(installed_only=True))
def test_installing_it_again_changes_nothing(name):
    record = (install_dir(name) / "installed.json").read_text()
    ran = subprocess.run([sys.executable, "tools/install_harness.py", name], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)  # fmt: skip
    assert ran.returncode == 0 and "is already installed" in ran.stdout, ran.stdout + ran.stderr
    assert (install_dir(name) / "installed.json").read_text() == record


@pytest.mark.harness
@pytest.mark.docker
# 3-5 min each on 2 loaded cores: the JAX engine compiles and prefills a 5k-10k-token prompt
@pytest.mark.slow
@pytest.mark.parametrize("name", _names(installed_only=True))
async def test_the_tiny_models_own_sampling_ends_in_a_policy_outcome(
    name, builtin_tasks, jax_engine, proxy_on, tmp_path
):
    task = builtin_tasks[TASK]
    proxy = await proxy_on(jax_engine, max_response_tokens=16, max_consecutive_no_tool=2)
    trajectory, record, _, _ = await trial_with_probe(task, get_harness(name), proxy, tmp_path, step_limit=3)
    log = (tmp_path / "trial" / "attempt_0" / "harness.log").read_text()
    assert trajectory.outcome in POLICY_OUTCOMES and trajectory.reward == 0.0, (
        trajectory.outcome,
        log[-3000:],
    )
    assert trajectory.sequences and trajectory.sequences[0].num_sampled > 0
    assert record["counters"]["main_calls"] >= 1
