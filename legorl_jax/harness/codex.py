"""Codex CLI (npm `@openai/codex` 0.171.0), unmodified, headless in the trial sandbox, on the Responses API.

    python tools/install_harness.py codex                # once (native_agent.install)
    harness = get_harness("codex")
    result = await harness.run(task, sandbox, llm)

Codex is a static (musl) Rust executable published as a per-platform npm package beside a thin launcher;
`native_agent.install` keeps only that executable, bind-mounted read-only at `PACKAGE.mount`, and it runs in
the sandbox's repository as

    codex exec --json --skip-git-repo-check --ephemeral --dangerously-bypass-approvals-and-sandbox
               --model <llm.model> -C <workdir> <problem statement>

configured by its own config file, `$CODEX_HOME/config.toml` (`config_toml`), written into the sandbox
before the run: one custom model provider `capture` at the session's OpenAI URL with `wire_api =
"responses"` (the proxy's `POST /v1/responses`, reached through the `proxy_only` network) and no key of
anyone's; approvals `never` and Codex's own sandbox off (`danger-full-access`), because the trial sandbox is
the sandbox (its limits stay intact) and commands must run, unasked, where the repository is; the
model's context window (`context_tokens`); web search, sub-agents, goals, apps, plugins, image generation,
hooks and update checks off, so its tools are the shell (`exec_command`, with which it also applies
`apply_patch` edits) and little else, and nothing reaches outside. No file of Codex's is changed.

Codex has no step limit of its own in `exec` mode, so a watchdog around the executable (`WATCHDOG`) counts the
tool items its `--json` event stream completes (a command, a file change, an MCP call: one per model call
that called a tool) and stops it once `llm.step_limit` of them are done. How a run ends: `turn.completed`
(a reply without a tool call ends Codex's turn) -> `submitted`, or `no_tool_collapse` when that reply was
the proxy's "Session terminated" text; stopped by the watchdog -> `step_limit`; a `turn.failed` / `error`
event carrying the proxy's context-length refusal -> `context_overflow`; a turn Codex fails on a reply cut by
its token budget (the proxy answers it `incomplete`, as OpenAI does, and Codex gives up on it: its tool call
is unreadable) -> `format_failure`, the policy's doing, kept in the loss. Anything else (a non-zero exit, a
failed turn for another reason, no events) is `HarnessCrashed` with its output.
"""

from __future__ import annotations

import json
from typing import Any

from legorl_jax.harness.base import HarnessCrashed, HarnessResult, LLMEndpoint
from legorl_jax.harness.native_agent import HOME, NativePackage, json_events, require, run_binary
from legorl_jax.types import Outcome
from legorl_jax.validate import positive_int, positive_number

PACKAGE = NativePackage(
    name="codex",
    npm_name="@openai/codex",
    version="0.171.0",
    platform_binaries={
        "x86_64": "@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex",
        "aarch64": "@openai/codex-linux-arm64/vendor/aarch64-unknown-linux-musl/bin/codex",
    },
    binary="codex",
    mount="/opt/legorl-codex",
)
INSTALL_COMMAND = PACKAGE.install_command
PROVIDER = "capture"
CODEX_HOME = f"{HOME}/.codex"
TOOL_ITEMS = ("command_execution", "file_change", "mcp_tool_call")
"""Item types of Codex's `--json` events that a model call with a tool call produces."""
CONTEXT_REFUSALS = ("maximum context length", "context_length_exceeded", "context window")
"""In the proxy's context-overflow error (session.context_message, its code), or Codex's account of it."""
INCOMPLETE = "Incomplete response returned"
"""Codex's failure on a reply the proxy marked `incomplete` (cut by its budget: `response.incomplete`)."""
TERMINATED = "Session terminated:"
"""How the proxy's reply starts after it ended the session for replies without tool calls."""
STOPPED = "legorl: stopped Codex after"
WATCHDOG = f"""
limit=$1; shift
out=$(mktemp); err=$(mktemp)
"$@" </dev/null >"$out" 2>"$err" &
pid=$!
pattern='"type":"item.completed","item":\\{{"id":"[^"]*","type":"({"|".join(TOOL_ITEMS)})"'
while kill -0 "$pid" 2>/dev/null; do
  if [ "$(grep -cE "$pattern" "$out")" -ge "$limit" ]; then
    kill "$pid"; echo "{STOPPED} $limit tool steps" >>"$err"; break
  fi
  sleep 0.1
done
wait "$pid"; code=$?
cat "$out"; cat "$err" >&2; rm -f "$out" "$err"
exit $code
"""
"""Runs the command (argv after the limit) with stdin closed (Codex reads a piped stdin as more prompt) and
stops it once `limit` tool items have completed: the step limit Codex lacks."""


def _toml(value: Any) -> str:
    """A TOML value of a string, bool or int (JSON's string escapes are TOML's basic-string escapes)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(str(value), ensure_ascii=False)


class CodexHarness:
    """Codex CLI in the trial sandbox (module docstring)."""

    name = "codex"
    network = "proxy_only"
    """It runs its tools where it runs, in the sandbox, and calls the model from there."""
    sandbox_user = None

    def __init__(self, *, timeout_s: float = 1800.0, context_tokens: int = 32768, max_retries: int = 1):
        self.root = require(PACKAGE)
        self.timeout_s = float(positive_number("timeout_s", timeout_s, unit="seconds"))
        self.context_tokens = positive_int("context_tokens", context_tokens)
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
        self.max_retries = max_retries

    @property
    def mounts(self) -> dict[str, str]:
        """Read-only mounts the trial sandbox needs: the executable's folder."""
        return {PACKAGE.mount: str(self.root / "bin")}

    def config(self, llm: LLMEndpoint) -> dict[str, Any]:
        """Codex's settings (module docstring): top-level keys, then one table per section."""
        return {
            "model": llm.model,
            "model_provider": PROVIDER,
            "approval_policy": "never",
            "sandbox_mode": "danger-full-access",
            "web_search": "disabled",
            "check_for_update_on_startup": False,
            "model_context_window": self.context_tokens,
            "features": {
                "goals": False,
                "apps": False,
                "plugins": False,
                "image_generation": False,
                "skill_search": False,
                "tool_suggest": False,
                "sleep_tool": False,
                "shell_snapshot": False,
                "computer_use": False,
                "browser_use": False,
                "hooks": False,
            },
            "agents": {"enabled": False},
            "analytics": {"enabled": False},
            f"model_providers.{PROVIDER}": {
                "name": "legorl capture proxy",
                "base_url": llm.openai_base_url,
                "wire_api": "responses",
                "request_max_retries": self.max_retries,
                "stream_max_retries": self.max_retries,
                # The proxy answers a stream once the reply is complete: idle for the whole generation.
                "stream_idle_timeout_ms": int(self.timeout_s * 1000),
            },
        }

    def config_toml(self, llm: LLMEndpoint) -> str:
        """`config` as Codex's `config.toml`."""
        lines, tables = [], []
        for key, value in self.config(llm).items():
            if isinstance(value, dict):
                tables.append(f"\n[{key}]")
                tables += [f"{k} = {_toml(v)}" for k, v in value.items()]
            else:
                lines.append(f"{key} = {_toml(value)}")
        return "\n".join(lines + tables) + "\n"

    async def run(self, task: Any, sandbox: Any, llm: LLMEndpoint) -> HarnessResult:
        await sandbox.write_file(f"{CODEX_HOME}/config.toml", self.config_toml(llm))
        argv = ["exec", "--json", "--skip-git-repo-check", "--ephemeral",
                "--dangerously-bypass-approvals-and-sandbox", "--model", llm.model, "-C", task.workdir,
                task.problem_statement]  # fmt: skip
        watch = ("bash", "-c", WATCHDOG, "codex-watchdog", str(llm.step_limit))
        done = await run_binary(sandbox, PACKAGE, argv, env={"CODEX_HOME": CODEX_HOME, "NO_COLOR": "1"},
                                workdir=task.workdir, timeout=self.timeout_s, wrapper=watch)  # fmt: skip
        output = f"{done.stdout}\n--- stderr ---\n{done.stderr}"
        if done.timed_out:
            raise HarnessCrashed(f"Codex ran past its {self.timeout_s:.0f} s limit:\n{output[-4000:]}")
        return result_of(done.exit_code, done.stdout, output)


def result_of(exit_code: int, stdout: str, output: str) -> HarnessResult:
    """How a Codex run ended (module docstring)."""
    events = json_events(stdout)
    items = [e.get("item") or {} for e in events if e.get("type") == "item.completed"]
    tools = [i for i in items if i.get("type") in TOOL_ITEMS]
    messages = [str(i.get("text", "")) for i in items if i.get("type") == "agent_message"]
    finished = any(e.get("type") == "turn.completed" for e in events)
    failures = [e for e in events if e.get("type") in ("turn.failed", "error")]
    failed_turn = any(e.get("type") == "turn.failed" for e in events)
    steps = len(tools) + int(finished)
    features = {
        "turns": float(steps),
        "tool_calls": float(len(tools)),
        "commands": float(sum(i.get("type") == "command_execution" for i in tools)),
        "edits": float(sum(i.get("type") == "file_change" for i in tools)),
    }
    if STOPPED in output:
        return HarnessResult(Outcome.STEP_LIMIT, len(tools), output, features)
    failed = " ".join(json.dumps(e) for e in failures)
    if (failed_turn or not finished) and any(r in failed for r in CONTEXT_REFUSALS):
        return HarnessResult(Outcome.CONTEXT_OVERFLOW, steps, output, features)
    if failed_turn and INCOMPLETE in failed:
        return HarnessResult(Outcome.FORMAT_FAILURE, steps, output, features)
    if failed_turn or exit_code != 0 or not finished:
        raise HarnessCrashed(
            f"Codex exited {exit_code} with {len(failures)} failure event(s):\n{output[-4000:]}"
        )
    if messages and messages[-1].startswith(TERMINATED):
        return HarnessResult(Outcome.NO_TOOL_COLLAPSE, steps, output, features)
    return HarnessResult(Outcome.SUBMITTED, steps, output, features)
