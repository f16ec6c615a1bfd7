"""The mini-swe-agent harness: the real `mini-swe-agent` 2.4.x package, its commands run in our sandbox.

    result = await MiniSweAgentHarness().run(task, sandbox, llm)

What runs is the package's own `DefaultAgent` with its own `LitellmModel` (tool-calling mode: one `bash`
tool) and the prompt templates of one of its shipped configs (`benchmarks/swebench.yaml` by default); the
adapter only configures them (harness-native: no source is patched):

- the model: `openai/<llm.model>` at `llm.openai_base_url` with `llm.api_key`, `cost_tracking:
  ignore_errors` and `cost_limit: 0` (litellm knows no price for our policy and would raise),
  `step_limit: llm.step_limit`, the request timeout;
- the environment: `SandboxEnvironment`, a mini-swe-agent Environment whose `execute` runs each command
  as `sandbox.exec([*interpreter, command], timeout, workdir=task.workdir, env)` with the config's
  interpreter (`bash -c`) and variables, and reports it the way the package's `DockerEnvironment` does:
  `{"output", "returncode", "exception_info"}`, a timed-out command as return code -1 with the reason in
  `exception_info`, and `Submitted` when the output's first line is `COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`
  and the command exited 0. Our sandbox gives stdout and stderr apart; the observation is stdout followed
  by stderr (docker's merged stream interleaves them). swebench.yaml's `BASH_ENV=/root/.bashrc` (conda
  activation in SWE-bench images) is left out where the sandbox's user cannot read that file, as bash
  would otherwise print "Permission denied" into every observation.

mini-swe-agent's loop is synchronous, so each run gets its own thread (not the event loop's default
executor, which the proxy and the rollout need while many trials run); each command is handed back to the
event loop with `asyncio.run_coroutine_threadsafe`. Cancelling `run` (the trial's wall-clock limit) cancels
the command in flight and stops the agent before its next one.

How a run ends (`exit_status` of the agent -> ours): `Submitted` -> `submitted`; `LimitsExceeded` (and
`TimeExceeded`, only if a config sets a wall-time limit) -> `step_limit`; `RepeatedFormatError` ->
`format_failure`, or `no_tool_collapse` when the proxy had ended the session (its "Session terminated"
reply is what the agent failed to parse); the proxy's `context_length_exceeded` refusal -> `context_overflow`
(litellm raises it as `ContextWindowExceededError` when the message has OpenAI's wording, which the agent
gives up on at once, else as a `BadRequestError` carrying that code, which the agent retries first).
A `SandboxError` from a command passes through unchanged (the sandbox failed, not the harness); anything
else the agent raises (a model call it could not survive, an unknown exit status) is `HarnessCrashed`
naming the exception type and message.

It runs in this process: its dependencies resolve with ours (pyproject's `harness` extra), installed by
`python tools/install_harness.py mini_swe_agent`; without it, constructing the harness raises
`HarnessNotInstalled` with that command.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import json
import logging
import os
import platform
import re
import sys
import threading
from typing import Any

from legorl_jax.harness.base import HarnessCrashed, HarnessNotInstalled, HarnessResult, LLMEndpoint
from legorl_jax.sandbox.base import SandboxError
from legorl_jax.types import Outcome
from legorl_jax.validate import positive_number

REQUIRED_VERSION = "2.4."
INSTALL_COMMAND = f"{sys.executable} tools/install_harness.py mini_swe_agent"
SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
TERMINATED_PREFIX = "Session terminated:"
TEST_COMMAND = re.compile(r"\b(pytest|py\.test|unittest|tox|nose2?)\b")
# Past a command's own timeout, how long to wait for the event loop to hand its result back before
# calling the loop gone (a thread must never block forever on a loop that stopped).
BRIDGE_GRACE_S = 300.0
# The agent's own retries of a failed model call (tenacity, 4-60 s apart; the package default is 10). The
# proxy answers a retried request idempotently; a dead engine should end the trial in minutes, not an hour.
MODEL_ATTEMPTS = "3"

_EXIT_STATUSES = {
    "Submitted": Outcome.SUBMITTED,
    "LimitsExceeded": Outcome.STEP_LIMIT,
    "TimeExceeded": Outcome.STEP_LIMIT,
    "RepeatedFormatError": Outcome.FORMAT_FAILURE,
}


def _import_mini() -> Any:
    """The `minisweagent` package, imported with its start-up quiet and litellm kept offline."""
    # litellm fetches a price list from the internet on import unless told to use its packaged copy, and
    # mini prints a banner on import; both are read at import time, so they are set before it.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    os.environ.setdefault("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", MODEL_ATTEMPTS)
    try:
        import litellm
        import minisweagent
        import minisweagent.agents.default
        import minisweagent.config
        import minisweagent.exceptions
        import minisweagent.models.litellm_model
    except ImportError as exc:
        raise HarnessNotInstalled(
            f"mini-swe-agent is not installed in {sys.prefix} ({exc}); install it with: {INSTALL_COMMAND}"
        ) from None
    # else it prints a "Provider List" banner to stdout on every model call
    litellm.suppress_debug_info = True
    if "LITELLM_LOG" not in os.environ:
        # Its logger inherits the root level; at INFO it writes two lines per model call over the rollout's
        # output.
        logging.getLogger("LiteLLM").setLevel(logging.WARNING)
    version = getattr(minisweagent, "__version__", "unknown")
    if not version.startswith(REQUIRED_VERSION):
        raise HarnessNotInstalled(
            f"mini-swe-agent {REQUIRED_VERSION}x is required, found {version} in {sys.prefix}; "
            f"install it with: {INSTALL_COMMAND}"
        )
    return minisweagent


class _Stopped(Exception):
    """The run was cancelled; raised inside the agent's thread at its next command."""


@dataclasses.dataclass(frozen=True)
class SandboxEnvironmentConfig:
    """The settings mini-swe-agent's configs give an environment (the fields `DockerEnvironmentConfig`
    shares)."""

    cwd: str
    """Where commands run (the task's workdir)."""
    timeout: float = 60.0
    """Seconds per command; past it the command is killed and reported with return code -1."""
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    """Variables of every command."""
    interpreter: tuple[str, ...] = ("bash", "-c")
    """The command is appended to this argv."""

    def model_dump(self, mode: str = "python") -> dict[str, Any]:
        """What mini-swe-agent reads from a config (template variables, the trajectory's `info.config`)."""
        data = dataclasses.asdict(self)
        data["interpreter"] = list(self.interpreter)
        return data


class SandboxEnvironment:
    """A mini-swe-agent Environment whose commands run in our sandbox (module docstring); called from the
    agent's thread."""

    def __init__(self, sandbox: Any, loop: asyncio.AbstractEventLoop, config: SandboxEnvironmentConfig):
        self.sandbox, self.loop, self.config = sandbox, loop, config
        self.stop = threading.Event()
        self.commands: list[str] = []
        self._running: concurrent.futures.Future | None = None

    def halt(self) -> None:
        """Stops the agent: the command in flight is cancelled and the next one raises (any thread)."""
        self.stop.set()
        if self._running is not None:
            self._running.cancel()

    def execute(self, action: dict, cwd: str = "", *, timeout: float | None = None) -> dict[str, Any]:
        from minisweagent.exceptions import Submitted

        if self.stop.is_set():
            raise _Stopped("the run was cancelled")
        command = action.get("command", "")
        self.commands.append(command)
        limit = timeout or self.config.timeout
        call = self.sandbox.exec(
            [*self.config.interpreter, command],
            timeout=limit,
            workdir=cwd or self.config.cwd,
            env=dict(self.config.env) or None,
        )
        self._running = asyncio.run_coroutine_threadsafe(call, self.loop)
        try:
            result = self._running.result(timeout=limit + BRIDGE_GRACE_S)
        except (ValueError, TypeError) as exc:
            # The sandbox refused the command itself (a NUL byte): the agent sees why, as docker's would.
            output = {"output": "", "returncode": -1,
                      "exception_info": f"An error occurred while executing the command: {exc}",
                      "extra": {"exception_type": type(exc).__name__, "exception": str(exc)}}  # fmt: skip
        else:
            output = {
                "output": result.stdout + result.stderr,
                "returncode": result.exit_code,
                "exception_info": "",
            }
            if result.timed_out:
                reason = f"Command '{command}' timed out after {limit:g} seconds"
                output |= {
                    "returncode": -1,
                    "exception_info": f"An error occurred while executing the command: {reason}",
                    "extra": {"exception_type": "TimeoutExpired", "exception": reason},
                }
        lines = str(output["output"]).lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT_MARKER and output["returncode"] == 0:
            submission = "".join(lines[1:])
            raise Submitted({"role": "exit", "content": submission,
                             "extra": {"exit_status": "Submitted", "submission": submission}})  # fmt: skip
        return output

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        # As DockerEnvironment: the config and the kernel's uname (a container shares the host's kernel).
        return {**self.config.model_dump(), **platform.uname()._asdict(), **kwargs}

    def serialize(self) -> dict[str, Any]:
        return {"info": {"config": {"environment": self.config.model_dump(mode="json"),
                                    "environment_type": f"{__name__}.{type(self).__name__}"}}}  # fmt: skip


class MiniSweAgentHarness:
    """mini-swe-agent's DefaultAgent + LitellmModel against the proxy, commands in our sandbox (module
    docstring)."""

    name = "mini_swe_agent"
    network = "none"
    """mini-swe-agent calls the model from the host; its commands run in the sandbox, with no network."""
    mounts = None
    sandbox_user = None

    def __init__(self, *, config: str = "benchmarks/swebench.yaml", command_timeout_s: float | None = 60.0,
                 request_timeout_s: float = 1800.0):  # fmt: skip
        """`config`: one of the package's shipped configs (or a path to one) in tool-calling mode; its agent
        templates, model templates and environment variables are used. `command_timeout_s`: per command
        (None: the config's own `environment.timeout`). `request_timeout_s`: per model call."""
        mini = _import_mini()
        if command_timeout_s is not None:  # None: the config's own timeout
            positive_number("command_timeout_s", command_timeout_s, unit="seconds")
        positive_number("request_timeout_s", request_timeout_s, unit="seconds")
        try:
            path = mini.config.get_config_path(config)
        except FileNotFoundError:
            raise ValueError(
                f"config must name one of mini-swe-agent's configs or a YAML file, got {config!r}"
            ) from None
        import yaml

        settings = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        agent = settings.get("agent") or {}
        model_class = (settings.get("model") or {}).get("model_class", "litellm")
        templates = f"{agent.get('system_template', '')}{agent.get('instance_template', '')}"
        if model_class != "litellm" or "mswea_bash_command" in templates or "instance_template" not in agent:
            # Text-mode configs ask for ```mswea_bash_command blocks; LitellmModel only reads tool calls.
            raise ValueError(
                f"config must be a tool-calling agent config (LitellmModel, bash tool), got {config!r} "
                f"(model_class {model_class!r}, text-mode action blocks: {'mswea_bash_command' in templates})"
            )
        self.config_path = path
        self.settings = settings
        self.command_timeout_s = command_timeout_s
        self.request_timeout_s = request_timeout_s

    def _model(self, llm: LLMEndpoint) -> Any:
        from minisweagent.models.litellm_model import LitellmModel

        model = {
            k: v for k, v in self.settings.get("model", {}).items() if k not in ("model_name", "model_class")
        }
        model["model_kwargs"] = {**model.get("model_kwargs", {}), "api_base": llm.openai_base_url,
                                 "api_key": llm.api_key, "timeout": self.request_timeout_s}  # fmt: skip
        return LitellmModel(model_name=f"openai/{llm.model}", cost_tracking="ignore_errors", **model)

    async def _environment(self, task: Any, sandbox: Any) -> SandboxEnvironment:
        settings = self.settings.get("environment", {})
        env = {str(k): str(v) for k, v in (settings.get("env") or {}).items()}
        if env.get("BASH_ENV"):
            # swebench.yaml points BASH_ENV at /root/.bashrc for SWE-bench images (conda activation); where
            # the sandbox's user cannot read it, bash would only print "Permission denied" into every
            # observation.
            probe = await sandbox.exec(["test", "-r", env["BASH_ENV"]], timeout=30, workdir=task.workdir)
            if probe.exit_code != 0:
                del env["BASH_ENV"]
        timeout = self.command_timeout_s or float(settings.get("timeout", 60))
        interpreter = tuple(settings.get("interpreter") or ("bash", "-c"))
        config = SandboxEnvironmentConfig(cwd=task.workdir, timeout=timeout, env=env, interpreter=interpreter)
        return SandboxEnvironment(sandbox, asyncio.get_running_loop(), config)

    async def run(self, task: Any, sandbox: Any, llm: LLMEndpoint) -> HarnessResult:
        from litellm.exceptions import BadRequestError, ContextWindowExceededError
        from minisweagent.agents.default import DefaultAgent

        env = await self._environment(task, sandbox)
        agent = DefaultAgent(
            self._model(llm),
            env,
            **{
                **self.settings.get("agent", {}),
                "step_limit": llm.step_limit,
                "cost_limit": 0,
                "output_path": None,
            },
        )
        try:
            info = await _in_own_thread(
                lambda: agent.run(task.problem_statement), f"mini-swe-agent {task.instance_id}", env.halt
            )
        except ContextWindowExceededError:
            return _result(Outcome.CONTEXT_OVERFLOW, agent, env)
        except BadRequestError as exc:
            if getattr(exc, "code", None) == "context_length_exceeded":
                return _result(Outcome.CONTEXT_OVERFLOW, agent, env)
            raise HarnessCrashed(f"mini-swe-agent raised {type(exc).__name__}: {str(exc)[:2000]}") from exc
        except SandboxError:
            raise  # the sandbox failed, not the harness: the rollout drops the trial as sandbox_failed
        except Exception as exc:  # noqa: BLE001 - any other failure of the agent or the sandbox drops the trial
            raise HarnessCrashed(f"mini-swe-agent raised {type(exc).__name__}: {str(exc)[:2000]}") from exc
        status = info.get("exit_status", "")
        if status not in _EXIT_STATUSES:
            raise HarnessCrashed(f"mini-swe-agent ended with exit_status {status!r}: {str(info)[:2000]}")
        ours = _EXIT_STATUSES[status]
        if ours == Outcome.FORMAT_FAILURE and any(
            t.startswith(TERMINATED_PREFIX) for t in _reply_texts(agent.messages)
        ):
            ours = Outcome.NO_TOOL_COLLAPSE
        return _result(ours, agent, env)


async def _in_own_thread(fn: Any, name: str, on_cancel: Any) -> Any:
    """fn() in a new daemon thread; cancelling the await calls `on_cancel()` (which makes the thread stop)."""
    done: concurrent.futures.Future = concurrent.futures.Future()

    def target() -> None:
        if not done.set_running_or_notify_cancel():
            return
        try:
            done.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            done.set_exception(exc)

    threading.Thread(target=target, name=name, daemon=True).start()
    try:
        return await asyncio.wrap_future(done)
    except asyncio.CancelledError:
        on_cancel()
        raise


def _reply_texts(messages: list[dict[str, Any]]) -> list[str]:
    """The text of every model reply, those the agent could not parse included (kept in the message's
    `extra`)."""
    texts = []
    for message in messages:
        response = (message.get("extra") or {}).get("response")
        if isinstance(response, dict):
            for choice in response.get("choices") or ():
                texts.append(((choice.get("message") or {}).get("content")) or "")
    return texts


def _result(status: Outcome, agent: Any, env: SandboxEnvironment) -> HarnessResult:
    commands = env.commands
    features = {"commands": float(len(commands)),
                "test_runs": float(sum(bool(TEST_COMMAND.search(c)) for c in commands)),
                "format_errors": float(sum((m.get("extra") or {}).get("interrupt_type") == "FormatError"
                                           for m in agent.messages))}  # fmt: skip
    log = json.dumps(agent.serialize(), indent=1, default=str, ensure_ascii=False)
    return HarnessResult(status, agent.n_calls, log=log, features=features)
