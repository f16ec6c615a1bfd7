"""OpenCode (npm `opencode-ai` 1.18.33), unmodified, headless inside the trial sandbox.

    python tools/install_harness.py opencode             # once (native_agent.install)
    harness = get_harness("opencode")
    result = await harness.run(task, sandbox, llm)

The native executable is bind-mounted read-only at `PACKAGE.mount` and run in the sandbox's repository as
`opencode run --model capture/<llm.model> --format json <problem statement>`, configured entirely by
`OPENCODE_CONFIG_CONTENT` (`config`): one OpenAI-compatible provider (`@ai-sdk/openai-compatible`, bundled
in the executable) at the session's OpenAI URL, reached through the `proxy_only` network, as both the model
and the small model; the `build` agent's step limit = `llm.step_limit`; bash and edits allowed, web fetches
denied; auto-update and sharing off. The environment (`ENV`) turns off models.dev fetches, LSP downloads,
default plugins, Claude Code prompt/skill imports and project config discovery, so nothing is downloaded
at trial time. OpenCode's title-generation call (system prompt "You are a title generator...") is a side
conversation by the proxy's default `side_system_prefixes`: counted in `side_calls`, kept out of training.

How a run ends: OpenCode stops at a reply without tool calls (`finish_reason: stop`) -> `submitted`, or
`no_tool_collapse` when that reply was the proxy's "Session terminated" text; when the step limit is reached
it asks the model for a text-only answer (its "maximum steps" prompt), and a model that calls tools anyway is
stopped after one step more by a watchdog around the executable (`WATCHDOG`); either way a run whose steps
reached the limit -> `step_limit`; the proxy's context-length refusal -> `context_overflow`. Its `--format
json` event stream (`step_start`, `text`, `tool_use`, `step_finish`, `error`) is the log; a non-zero exit or
an error event not explained by the proxy is `HarnessCrashed`.
"""

from __future__ import annotations

import json
from typing import Any

from legorl_jax.harness.base import HarnessCrashed, HarnessResult, LLMEndpoint
from legorl_jax.harness.native_agent import NativePackage, json_events, require, run_binary
from legorl_jax.types import Outcome
from legorl_jax.validate import positive_int, positive_number

PACKAGE = NativePackage(
    name="opencode",
    npm_name="opencode-ai",
    version="1.18.33",
    platform_binaries={
        "x86_64": "opencode-linux-x64/bin/opencode",
        "aarch64": "opencode-linux-arm64/bin/opencode",
    },
    binary="opencode",
    mount="/opt/legorl-opencode",
)
INSTALL_COMMAND = PACKAGE.install_command
PROVIDER = "capture"
ENV = {
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    "OPENCODE_DISABLE_PROJECT_CONFIG": "1",
    "OPENCODE_DISABLE_AUTOCOMPACT": "1",
}
CONTEXT_REFUSAL = "maximum context length"
"""In the proxy's context-overflow message (session.context_message)."""
TERMINATED = "Session terminated:"
STOPPED = "legorl: stopped OpenCode after"
WATCHDOG = f"""
limit=$1; shift
out=$(mktemp); err=$(mktemp)
"$@" >"$out" 2>"$err" &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
  if [ "$(grep -c '"type":"step_finish"' "$out")" -gt "$limit" ]; then
    kill "$pid"; echo "{STOPPED} $limit steps" >>"$err"; break
  fi
  sleep 0.1
done
wait "$pid"; code=$?
cat "$out"; cat "$err" >&2; rm -f "$out" "$err"
exit $code
"""
"""OpenCode's `steps` only asks the model for a text-only answer once reached (its "MAXIMUM STEPS REACHED"
message) and goes on executing the tool calls of a model that ignores it; this wrapper (argv: limit, then the
command) makes the limit hard: it stops OpenCode once more than `limit` steps have finished."""
"""How the proxy's reply starts after it ended the session for replies without tool calls."""


class OpenCodeHarness:
    """OpenCode in the trial sandbox (module docstring)."""

    name = "opencode"
    network = "proxy_only"
    """It runs its tools where it runs, in the sandbox, and calls the model from there."""
    sandbox_user = None

    def __init__(
        self,
        *,
        timeout_s: float = 1800.0,
        command_timeout_s: float = 120.0,
        context_tokens: int = 32768,
        output_tokens: int = 4096,
    ):
        self.root = require(PACKAGE)
        self.timeout_s = float(positive_number("timeout_s", timeout_s, unit="seconds"))
        self.command_timeout_s = float(
            positive_number("command_timeout_s", command_timeout_s, unit="seconds")
        )
        self.context_tokens = positive_int("context_tokens", context_tokens)
        self.output_tokens = positive_int("output_tokens", output_tokens)

    @property
    def mounts(self) -> dict[str, str]:
        """Read-only mounts the trial sandbox needs: the executable's folder."""
        return {PACKAGE.mount: str(self.root / "bin")}

    def config(self, llm: LLMEndpoint) -> dict[str, Any]:
        """OpenCode's config document (module docstring)."""
        model = {"name": llm.model, "tool_call": True,
                 "limit": {"context": self.context_tokens, "output": self.output_tokens}}  # fmt: skip
        return {
            "$schema": "https://opencode.ai/config.json",
            "provider": {
                PROVIDER: {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "legorl capture proxy",
                    "options": {"baseURL": llm.openai_base_url, "apiKey": llm.api_key},
                    "models": {llm.model: model},
                }
            },
            "model": f"{PROVIDER}/{llm.model}",
            "small_model": f"{PROVIDER}/{llm.model}",
            "agent": {"build": {"steps": llm.step_limit}},
            "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny"},
            "autoupdate": False,
            "share": "disabled",
        }

    def env(self, llm: LLMEndpoint) -> dict[str, str]:
        return {
            **ENV,
            "OPENCODE_CONFIG_CONTENT": json.dumps(self.config(llm)),
            "OPENCODE_EXPERIMENTAL_BASH_DEFAULT_TIMEOUT_MS": str(int(self.command_timeout_s * 1000)),
        }

    async def run(self, task: Any, sandbox: Any, llm: LLMEndpoint) -> HarnessResult:
        argv = ["run", "--model", f"{PROVIDER}/{llm.model}", "--format", "json", task.problem_statement]
        watch = ("bash", "-c", WATCHDOG, "opencode-watchdog", str(llm.step_limit))
        done = await run_binary(sandbox, PACKAGE, argv, env=self.env(llm), workdir=task.workdir,
                                timeout=self.timeout_s, wrapper=watch)  # fmt: skip
        output = f"{done.stdout}\n--- stderr ---\n{done.stderr}"
        if done.timed_out:
            raise HarnessCrashed(f"OpenCode ran past its {self.timeout_s:.0f} s limit:\n{output[-4000:]}")
        return _result(done.exit_code, done.stdout, output, llm.step_limit)


def _result(exit_code: int, stdout: str, output: str, step_limit: int) -> HarnessResult:
    events = json_events(stdout)
    steps = sum(e.get("type") == "step_finish" for e in events)
    errors = [e for e in events if e.get("type") == "error"]
    texts = [str(e.get("part", {}).get("text", "")) for e in events if e.get("type") == "text"]
    tools = [e for e in events if e.get("type") == "tool_use"]
    features = {"turns": float(steps), "tool_calls": float(len(tools))}
    if STOPPED in output:
        return HarnessResult(Outcome.STEP_LIMIT, steps, output, features)
    if any(CONTEXT_REFUSAL in json.dumps(e) for e in errors) or (
        exit_code != 0 and CONTEXT_REFUSAL in output
    ):
        return HarnessResult(Outcome.CONTEXT_OVERFLOW, steps, output, features)
    if errors or exit_code != 0 or not events:
        raise HarnessCrashed(
            f"OpenCode exited {exit_code} with {len(errors)} error event(s):\n{output[-4000:]}"
        )
    if texts and texts[-1].startswith(TERMINATED):
        status = Outcome.NO_TOOL_COLLAPSE
    elif steps >= step_limit:
        status = Outcome.STEP_LIMIT
    else:
        status = Outcome.SUBMITTED
    return HarnessResult(status, steps, output, features)
