"""OpenHands (the V1 SDK, `openhands-sdk` / `openhands-tools` 1.58.2), unmodified, its agent process inside
the trial sandbox.

    python tools/install_harness.py openhands            # once (idempotent; pip's cache makes it offline)
    harness = get_harness("openhands")
    result = await harness.run(task, sandbox, llm)

The SDK runs its tools where its process runs, so that process runs in the sandbox: a small driver (`_DRIVER`)
builds the SDK's own `Agent` with its `TerminalTool` (the subprocess terminal) and `FileEditorTool`, and a
local `Conversation` on the repository (`task.workdir`) with `max_iteration_per_run` = `llm.step_limit`, then
`send_message(problem statement)` and `run()`, as the SDK's examples do. Its `LLM` is `openai/<llm.model>` at
the session's OpenAI URL (reached through the `proxy_only` network) with `api_mode` chat and native tool
calling. The SDK assumes an unknown model reasons: it would send `reasoning_effort: high` and drop
`temperature` and `top_p`; `capability_overrides` (`supports_reasoning_effort` false,
`supports_sampling_params` true) keep the configured sampling parameters in every request.

What `install()` lays out under `install_dir("openhands")`:
- `venv/`: the SDK's own virtualenv (Python >= 3.12; litellm, openai, pydantic... clash with ours);
- `python/`: the interpreter that venv was made from (its executable, `libpython`, the standard library
  without tests, IDLE and tkinter), because the sandbox image's Python is 3.11; the sandbox image and this
  host are both Debian 12 (glibc 2.36), so the venv's compiled wheels load there;
- `installed.json`, written last.
The adapter bind-mounts that folder read-only at `MOUNT` and runs `python/bin/python3.12` with the venv's
site-packages added by the driver (`site.addsitedir`): nothing is downloaded at trial time (litellm's cost
map is its bundled copy, `LITELLM_LOCAL_MODEL_COST_MAP`).

How a run ends (the driver's `LEGORL_RESULT` line): status `finished` -> `submitted` (the SDK's `finish`
tool, or a reply without a tool call: the SDK stops at the first one, before the proxy's no-tool limit can
act), or `no_tool_collapse` should the last reply be the proxy's "Session terminated" text;
`MaxIterationsReached` (or `stuck` from the SDK's loop detector, when it is on) -> `step_limit`; the proxy's
context-length refusal (litellm's `ContextWindowExceededError`, which ends the run with no condenser
configured) -> `context_overflow`. Anything else (another error, no result line, a timeout) is
`HarnessCrashed` with the output; an engine failure behind the proxy drops the trial that way.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import sys
from typing import Any

from legorl_jax.harness.base import HarnessCrashed, HarnessNotInstalled, HarnessResult, LLMEndpoint
from legorl_jax.harness.install import clear, install_record, run_command, write_record
from legorl_jax.harness.install import install_dir as _install_dir
from legorl_jax.harness.native_agent import HOME
from legorl_jax.types import Outcome

NAME = "openhands"
VERSION = "1.58.2"
REQUIREMENTS = (f"openhands-sdk=={VERSION}", f"openhands-tools=={VERSION}")
INSTALL_COMMAND = f"python tools/install_harness.py {NAME}"
PYTHON_VERSION = "3.12"
MOUNT = "/opt/legorl-openhands"
SANDBOX_PYTHON = f"{MOUNT}/python/bin/python{PYTHON_VERSION}"
SANDBOX_SITE = f"{MOUNT}/venv/lib/python{PYTHON_VERSION}/site-packages"
RESULT_PREFIX = "LEGORL_RESULT "
TERMINATED = "Session terminated:"
"""How the proxy's reply starts after it ended the session for replies without tool calls."""
CONTEXT_ERRORS = ("ContextWindowExceeded", "LLMContextWindowExceed")
"""What litellm's and the SDK's context-length errors are called (the proxy's 400 becomes one of them)."""
STDLIB_LEFT_OUT = ("site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3")
ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONNOUSERSITE": "1",
    "PYTHONUNBUFFERED": "1",
    "OPENHANDS_SUPPRESS_BANNER": "1",
}


def install_dir() -> pathlib.Path:
    return _install_dir(NAME)


def installed() -> dict[str, Any] | None:
    """The install record when the venv and the sandbox's interpreter are in place, else None."""
    root = install_dir()
    record = install_record(root)
    if record is None:
        return None
    ok = (
        record.get("requirements") == list(REQUIREMENTS)
        and (root / "venv" / "bin" / "python").exists()
        and (root / "python" / "bin" / f"python{PYTHON_VERSION}").exists()
    )
    return record if ok else None


def install() -> str:
    """The SDK in its own venv and the interpreter the sandbox runs it with (module docstring); a no-op when
    there."""
    root = install_dir()
    if installed() is not None:
        return f"{' '.join(REQUIREMENTS)} (OpenHands) is already installed in {root}"
    python = sys.executable if sys.version_info[:2] == (3, 12) else shutil.which(f"python{PYTHON_VERSION}")
    if python is None:
        raise SystemExit(
            f"the OpenHands SDK is installed for Python {PYTHON_VERSION}; this is {sys.version.split()[0]} "
            f"and no python{PYTHON_VERSION} is on PATH"
        )
    layout = (
        "import json, sys, sysconfig; v = sysconfig.get_config_var; print(json.dumps({'prefix': "
        "sys.base_prefix, 'shared': v('Py_ENABLE_SHARED'), 'soname': v('INSTSONAME')}))"
    )
    facts = json.loads(run_command([python, "-c", layout], "asking the Python 3.12 for its layout"))
    base = pathlib.Path(facts["prefix"])
    if not (base / "bin" / f"python{PYTHON_VERSION}").is_file():
        raise SystemExit(
            f"{python}'s prefix {base} has no bin/python{PYTHON_VERSION} to stage for the sandbox"
        )
    clear(root, ("installed.json", "venv", "python"))
    run_command([python, "-m", "venv", str(root / "venv")], "creating OpenHands' virtualenv (Python 3.12)")
    run_command([str(root / "venv" / "bin" / "python"), "-m", "pip", "install", "--quiet", *REQUIREMENTS],
                f"pip install of {' '.join(REQUIREMENTS)}")  # fmt: skip
    target = root / "python"
    (target / "bin").mkdir(parents=True)
    shutil.copy2(base / "bin" / f"python{PYTHON_VERSION}", target / "bin" / f"python{PYTHON_VERSION}")
    (target / "lib").mkdir()
    if facts["shared"]:
        shutil.copy2((base / "lib" / facts["soname"]).resolve(), target / "lib" / facts["soname"])
    stdlib = f"python{PYTHON_VERSION}"
    shutil.copytree(base / "lib" / stdlib, target / "lib" / stdlib, symlinks=True,
                    ignore=lambda folder, names: [n for n in names if n in STDLIB_LEFT_OUT
                                                  or n.startswith("config-")])  # fmt: skip
    (target / "lib" / stdlib / "site-packages").mkdir()
    record = {"requirements": list(REQUIREMENTS), "python": python, "prefix": str(base)}
    write_record(root, record)
    return f"installed {' '.join(REQUIREMENTS)} and the sandbox's Python {PYTHON_VERSION} into {root}"


# Runs in the sandbox on the mounted interpreter: the SDK's own Agent, tools and local Conversation. The SDK's
# `num_retries` counts attempts (tenacity's stop_after_attempt), so `max_retries` retries are max_retries + 1.
_DRIVER = """
import json, os, site, sys
os.environ.pop("LD_LIBRARY_PATH", None)  # for the mounted interpreter only, not the agent's commands
cfg = json.loads(sys.argv[1])
site.addsitedir(cfg["site"])
from openhands.sdk import LLM, Agent, Conversation, Tool
from openhands.tools.file_editor import FileEditorTool
from openhands.tools.terminal import TerminalTool

llm = LLM(model=cfg["model"], base_url=cfg["base_url"], api_key=cfg["api_key"], usage_id="agent",
          api_mode="chat", native_tool_calling=True, caching_prompt=False, reasoning_effort=None,
          capability_overrides={"supports_reasoning_effort": False, "supports_sampling_params": True},
          temperature=cfg["temperature"], top_p=cfg["top_p"], max_output_tokens=cfg["max_output_tokens"],
          num_retries=cfg["max_retries"] + 1, retry_min_wait=1, retry_max_wait=2,
          timeout=cfg["request_timeout_s"])
tools = [Tool(name=TerminalTool.name, params={"terminal_type": "subprocess"}), Tool(name=FileEditorTool.name)]
agent = Agent(llm=llm, tools=tools)
conversation = Conversation(agent=agent, workspace=cfg["workdir"], persistence_dir=None,
                            max_iteration_per_run=cfg["step_limit"], stuck_detection=cfg["stuck_detection"],
                            visualizer=None)
conversation.send_message(cfg["instruction"])
error = None
try:
    conversation.run()
except Exception as exc:
    cause = exc
    while cause.__cause__ is not None:
        cause = cause.__cause__
    error = f"{type(exc).__name__} ({type(cause).__name__}): {cause}"
events = list(conversation.state.events)
responses, codes, last_text, tools_used = [], [], "", []
for event in events:
    kind = type(event).__name__
    rid = getattr(event, "llm_response_id", None)
    if getattr(event, "source", None) == "agent" and rid and rid not in responses:
        responses.append(rid)
    if kind == "ActionEvent":
        tools_used.append(event.tool_name)
    if kind == "ConversationErrorEvent":
        codes.append(event.code)
    if kind == "MessageEvent" and event.source == "agent":
        last_text = "".join(getattr(part, "text", "") for part in event.llm_message.content)
result = {"status": str(conversation.state.execution_status.value), "error": error, "error_codes": codes,
          "steps": len(responses), "tools": tools_used, "last_text": last_text[:2000]}
print("LEGORL_RESULT " + json.dumps(result), flush=True)
"""


class OpenHandsHarness:
    """The OpenHands SDK's agent in the trial sandbox (module docstring)."""

    name = NAME
    network = "proxy_only"
    """Its process runs its tools where it runs, in the sandbox, and calls the model from there."""
    sandbox_user = None

    def __init__(
        self,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_output_tokens: int = 4096,
        stuck_detection: bool = False,
        max_retries: int = 2,
        request_timeout_s: float = 600.0,
        timeout_s: float = 1800.0,
    ):
        if installed() is None:
            raise HarnessNotInstalled(
                f"{' '.join(REQUIREMENTS)} (OpenHands) is not installed in {install_dir()}; "
                f"install it with: {INSTALL_COMMAND}"
            )
        for name, value in (("temperature", temperature), ("top_p", top_p),
                            ("max_output_tokens", max_output_tokens),
                            ("request_timeout_s", request_timeout_s), ("timeout_s", timeout_s)):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        if not isinstance(stuck_detection, bool):
            raise ValueError(f"stuck_detection must be true or false, got {stuck_detection!r}")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
        self.root = install_dir()
        self.temperature, self.top_p = float(temperature), float(top_p)
        self.max_output_tokens, self.stuck_detection, self.max_retries = (
            int(max_output_tokens),
            stuck_detection,
            max_retries,
        )
        self.request_timeout_s, self.timeout_s = float(request_timeout_s), float(timeout_s)

    @property
    def mounts(self) -> dict[str, str]:
        """Read-only mounts the trial sandbox needs: the venv and its interpreter."""
        return {MOUNT: str(self.root)}

    def config(self, task: Any, llm: LLMEndpoint) -> dict[str, Any]:
        """What the driver builds the SDK's LLM, Agent and Conversation from."""
        return {
            "site": SANDBOX_SITE,
            "model": f"openai/{llm.model}",
            "base_url": llm.openai_base_url,
            "api_key": llm.api_key,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_output_tokens": self.max_output_tokens,
            "max_retries": self.max_retries,
            "request_timeout_s": self.request_timeout_s,
            "workdir": task.workdir,
            "step_limit": llm.step_limit,
            "stuck_detection": self.stuck_detection,
            "instruction": task.problem_statement,
        }

    async def run(self, task: Any, sandbox: Any, llm: LLMEndpoint) -> HarnessResult:
        made = await sandbox.exec(["mkdir", "-p", HOME], timeout=30)
        if made.exit_code != 0:
            raise HarnessCrashed(
                f"could not make the agent's home {HOME} in the sandbox: {made.stderr[-500:]}"
            )
        env = {**ENV, "HOME": HOME, "LD_LIBRARY_PATH": f"{MOUNT}/python/lib", "OPENAI_API_KEY": llm.api_key}
        argv = [SANDBOX_PYTHON, "-s", "-c", _DRIVER, json.dumps(self.config(task, llm))]
        done = await sandbox.exec(argv, timeout=self.timeout_s, workdir=task.workdir, env=env)
        output = f"{done.stdout}\n--- stderr ---\n{done.stderr}"
        if done.timed_out:
            raise HarnessCrashed(f"OpenHands ran past its {self.timeout_s:.0f} s limit:\n{output[-4000:]}")
        return _result(done.exit_code, done.stdout, output)


def _result(exit_code: int, stdout: str, output: str) -> HarnessResult:
    lines = [line for line in stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if exit_code != 0 or not lines:
        raise HarnessCrashed(f"the OpenHands driver exited {exit_code} without a result:\n{output[-4000:]}")
    result = json.loads(lines[-1][len(RESULT_PREFIX) :])
    steps, error, codes = int(result["steps"]), result.get("error") or "", result.get("error_codes") or []
    features = {"turns": float(steps), "tool_calls": float(len(result.get("tools") or []))}
    if any(name in error for name in CONTEXT_ERRORS) or any(
        name in code for name in CONTEXT_ERRORS for code in codes
    ):
        status = Outcome.CONTEXT_OVERFLOW
    elif error:
        raise HarnessCrashed(f"OpenHands stopped on {error}:\n{output[-4000:]}")
    elif result["status"] == "finished":
        status = (
            Outcome.NO_TOOL_COLLAPSE
            if result.get("last_text", "").startswith(TERMINATED)
            else Outcome.SUBMITTED
        )
    elif "MaxIterationsReached" in codes or result["status"] == "stuck":
        status = Outcome.STEP_LIMIT
    else:
        raise HarnessCrashed(f"OpenHands ended with status {result['status']!r} ({codes}):\n{output[-4000:]}")
    return HarnessResult(status, steps, output, features)
