"""Claude Code (npm `@anthropic-ai/claude-code` 2.1.197), unmodified, headless inside the trial sandbox.

    python tools/install_harness.py claude_code          # once (native_agent.install)
    harness = get_harness("claude_code")
    result = await harness.run(task, sandbox, llm)

The native executable is bind-mounted read-only at `PACKAGE.mount` and run in the sandbox's repository as

    claude -p <problem statement> --model <llm.model> --output-format json --bare --tools Bash,Read,Edit,Write
           --dangerously-skip-permissions --max-turns <llm.step_limit> --no-session-persistence

with `ANTHROPIC_BASE_URL` = the session's Anthropic URL (reached through the `proxy_only` network), every
model tier (`ANTHROPIC_MODEL`, the small/fast model, sub-agents) set to `llm.model`, and non-essential
traffic, auto-update, telemetry and error reporting off (`ENV`). `--bare` skips hooks, plugins, CLAUDE.md
discovery and background prefetches; `--tools` keeps only the tools a sandboxed fix needs (no web, no
sub-agents, so no mid-conversation system message). `IS_SANDBOX=1` lets `--dangerously-skip-permissions`
run as root too. Whatever side calls Claude Code still makes (a one-word quota probe, small-model calls)
carry a system prompt other than the agent's and land on side branches of the proxy session, counted in
`side_calls` and kept out of training.

How a run ends (the JSON result's `subtype`): `success` -> `submitted` (a reply without a tool call ends
Claude Code's loop), or `no_tool_collapse` when that reply was the proxy's "Session terminated" text;
`error_max_turns` -> `step_limit`; the proxy's context-length refusal -> `context_overflow` (Claude Code
stops at once: `is_error` true, `terminal_reason` `prompt_too_long`). Anything else (no JSON, a non-zero
exit without a result, another subtype or error) is `HarnessCrashed` with its output.
"""

from __future__ import annotations

import json
from typing import Any

from legorl_jax.harness.base import HarnessCrashed, HarnessResult, LLMEndpoint
from legorl_jax.harness.native_agent import NativePackage, require, run_binary
from legorl_jax.types import Outcome
from legorl_jax.validate import is_int, positive_number

PACKAGE = NativePackage(
    name="claude_code",
    npm_name="@anthropic-ai/claude-code",
    version="2.1.197",
    platform_binaries={
        "x86_64": "@anthropic-ai/claude-code-linux-x64/claude",
        "aarch64": "@anthropic-ai/claude-code-linux-arm64/claude",
    },
    binary="claude",
    mount="/opt/legorl-claude-code",
)
INSTALL_COMMAND = PACKAGE.install_command
TOOLS = "Bash,Read,Edit,Write"
ENV = {
    "IS_SANDBOX": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
}
PROMPT_TOO_LONG = "prompt_too_long"
"""The result's `terminal_reason` when Claude Code stopped on the proxy's context-length refusal (it reads the
"prompt is too long: N tokens > M maximum" part of the proxy's message and prints its own account)."""
TERMINATED = "Session terminated:"
"""How the proxy's reply starts after it ended the session for replies without tool calls."""


class ClaudeCodeHarness:
    """Claude Code in the trial sandbox (module docstring)."""

    name = "claude_code"
    network = "proxy_only"
    """It runs its tools where it runs, in the sandbox, and calls the model from there."""
    sandbox_user = None

    def __init__(self, *, tools: str = TOOLS, bare: bool = False, timeout_s: float = 1800.0,
                 command_timeout_s: float = 120.0, max_retries: int = 2):  # fmt: skip
        self.root = require(PACKAGE)
        if not isinstance(bare, bool):
            raise ValueError(f"bare must be true or false, got {bare!r}")
        self.bare = bare
        if not is_int(max_retries) or max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
        self.max_retries = max_retries
        if not isinstance(tools, str) or not tools or " " in tools:
            raise ValueError(f"tools must be a comma-separated list of Claude Code tool names, got {tools!r}")
        self.tools = tools
        self.timeout_s = float(positive_number("timeout_s", timeout_s, unit="seconds"))
        self.command_timeout_s = float(
            positive_number("command_timeout_s", command_timeout_s, unit="seconds")
        )

    @property
    def mounts(self) -> dict[str, str]:
        """Read-only mounts the trial sandbox needs: the executable's folder."""
        return {PACKAGE.mount: str(self.root / "bin")}

    def argv(self, task: Any, llm: LLMEndpoint) -> list[str]:
        return [
            "-p",
            task.problem_statement,
            "--model",
            llm.model,
            "--output-format",
            "json",
            *(["--bare"] if self.bare else []),
            "--tools",
            self.tools,
            "--dangerously-skip-permissions",
            "--max-turns",
            str(llm.step_limit),
            "--no-session-persistence",
        ]

    def env(self, llm: LLMEndpoint) -> dict[str, str]:
        ms = str(int(self.command_timeout_s * 1000))
        return {
            **ENV,
            "ANTHROPIC_BASE_URL": llm.anthropic_base_url,
            "ANTHROPIC_API_KEY": llm.api_key,
            "ANTHROPIC_MODEL": llm.model,
            "ANTHROPIC_SMALL_FAST_MODEL": llm.model,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": llm.model,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": llm.model,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": llm.model,
            "CLAUDE_CODE_SUBAGENT_MODEL": llm.model,
            "BASH_DEFAULT_TIMEOUT_MS": ms,
            "BASH_MAX_TIMEOUT_MS": ms,
            # A failed model call already drops the trial (the proxy flags engine_failed), so Claude Code's
            # default retries (10, backing off: about 3 minutes) would only hold the sandbox.
            "CLAUDE_CODE_MAX_RETRIES": str(self.max_retries),
        }

    async def run(self, task: Any, sandbox: Any, llm: LLMEndpoint) -> HarnessResult:
        done = await run_binary(
            sandbox,
            PACKAGE,
            self.argv(task, llm),
            env=self.env(llm),
            workdir=task.workdir,
            timeout=self.timeout_s,
        )
        output = f"{done.stdout}\n--- stderr ---\n{done.stderr}"
        if done.timed_out:
            raise HarnessCrashed(f"Claude Code ran past its {self.timeout_s:.0f} s limit:\n{output[-4000:]}")
        return _result(done.exit_code, done.stdout, output)


def _result(exit_code: int, stdout: str, output: str) -> HarnessResult:
    try:
        result = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        result = None
    if not isinstance(result, dict) or result.get("type") != "result":
        raise HarnessCrashed(f"Claude Code exited {exit_code} without a JSON result:\n{output[-4000:]}")
    subtype, text = result.get("subtype"), str(result.get("result") or "")
    steps = int(result.get("num_turns") or 0)
    if subtype == "error_max_turns":
        status = Outcome.STEP_LIMIT
    elif result.get("terminal_reason") == PROMPT_TOO_LONG:
        status = Outcome.CONTEXT_OVERFLOW
    elif subtype == "success" and not result.get("is_error"):
        status = Outcome.NO_TOOL_COLLAPSE if text.startswith(TERMINATED) else Outcome.SUBMITTED
    else:
        raise HarnessCrashed(
            f"Claude Code ended with subtype {subtype!r} (is_error={result.get('is_error')!r}, "
            f"exit {exit_code}): "
            f"{text[:2000]}\n{output[-3000:]}"
        )
    return HarnessResult(exit_status=status, steps=steps, log=output, features={"turns": float(steps)})
