"""The built-in harness: a small tool-calling coding agent over the OpenAI chat API, the reference for tests
and the demo.

    result = await BuiltinHarness().run(task, sandbox, llm)

It speaks to the proxy session like any OpenAI client (aiohttp, `POST {openai_base_url}/chat/completions`
with tools and `tool_choice: auto`) and executes its tools in the trial's sandbox:

- `bash {command}`: `bash -c` in the repository, with the per-command timeout; exit code and output back;
- `view {path, start_line?, end_line?}`: the file with line numbers (a range when given);
- `str_replace {path, old, new}`: replaces the one occurrence of `old` (none or several is an error the
  agent sees, nothing is written);
- `submit {}`: the agent is done.
A reply without a tool call gets a reminder as the next user message. The run ends with `submitted`, at
the step limit, when the proxy refuses a prompt over the context (`context_overflow`) or ends the session
for replies without tool calls (`no_tool_collapse`). A model call that fails otherwise (the engine behind
the proxy is down) raises `HarnessCrashed`. Every tool result is capped so one command cannot flood the
context. The same tool format is what `make demo`'s warm start renders from gold patches.
"""

from __future__ import annotations

import json
import posixpath
import re
from typing import Any

import aiohttp

from legorl_jax.harness.base import HarnessCrashed, HarnessResult, LLMEndpoint
from legorl_jax.types import Outcome
from legorl_jax.validate import is_int, positive_number

SYSTEM_PROMPT = (
    "You are a software engineer fixing a bug in the repository at {workdir}. "
    "Use the tools to read the code, "
    "make the smallest change that fixes the problem, check it by running the code, then call submit."
)
USER_PROMPT = "Fix this problem in the repository at {workdir}:\n\n{problem}"
REMINDER = "No tool was called. Use one of the tools, or call submit when the problem is fixed."
OUTPUT_CAP = 6000
TEST_COMMAND = re.compile(r"\b(pytest|py\.test|unittest|tox|nose2?)\b")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a bash command in the repository and return its exit code and output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "view",
            "description": "Show a file with line numbers, or lines start_line..end_line of it.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "start_line": {"type": "integer"},
                    "end_line": {"type": "integer"},
                },
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "str_replace",
            "description": "Replace the only occurrence of `old` in a file by `new`.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "old": {"type": "string"},
                    "new": {"type": "string"},
                },
                "required": ["path", "old", "new"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "submit",
            "description": "Say the problem is fixed; ends the session.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]


def _cap(text: str) -> str:
    if len(text) <= OUTPUT_CAP:
        return text
    half = OUTPUT_CAP // 2
    return f"{text[:half]}\n... [{len(text) - OUTPUT_CAP} characters cut] ...\n{text[-half:]}"


class BuiltinHarness:
    """The built-in agent (module docstring)."""

    name = "builtin"
    network = "none"
    """The agent calls the model from the host; its commands run in the sandbox, which needs no network."""
    mounts = None
    sandbox_user = None

    def __init__(self, *, command_timeout_s: float = 60.0, request_timeout_s: float = 1800.0):
        self.command_timeout_s = positive_number("command_timeout_s", command_timeout_s, unit="seconds")
        self.request_timeout_s = positive_number("request_timeout_s", request_timeout_s, unit="seconds")

    async def run(self, task: Any, sandbox: Any, llm: LLMEndpoint) -> HarnessResult:
        workdir = task.workdir
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM_PROMPT.format(workdir=workdir)},
            {"role": "user", "content": USER_PROMPT.format(workdir=workdir, problem=task.problem_statement)},
        ]
        run = _Run(sandbox, workdir, self.command_timeout_s)
        timeout = aiohttp.ClientTimeout(total=self.request_timeout_s)
        headers = {"Authorization": f"Bearer {llm.api_key}"}
        async with aiohttp.ClientSession(timeout=timeout, headers=headers) as http:
            for step in range(llm.step_limit):
                body = {"model": llm.model, "messages": messages, "tools": TOOLS, "tool_choice": "auto"}
                status, reply = await _post(http, llm.openai_base_url + "/chat/completions", body)
                if status == 400 and reply.get("error", {}).get("code") == "context_length_exceeded":
                    return run.result(Outcome.CONTEXT_OVERFLOW, step, messages)
                if status != 200:
                    raise HarnessCrashed(
                        f"model call {step} failed with HTTP {status}: {json.dumps(reply)[:500]}"
                    )
                message = reply["choices"][0]["message"]
                calls = message.get("tool_calls") or []
                messages.append({k: v for k, v in message.items() if k in ("role", "content", "tool_calls")})
                if not calls:
                    if (message.get("content") or "").startswith("Session terminated:"):
                        return run.result(Outcome.NO_TOOL_COLLAPSE, step + 1, messages)
                    messages.append({"role": "user", "content": REMINDER})
                    continue
                submitted = False
                for call in calls:
                    output, submitted_now = await run.tool(
                        call["function"]["name"], call["function"].get("arguments")
                    )
                    submitted |= submitted_now
                    messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
                if submitted:
                    return run.result(Outcome.SUBMITTED, step + 1, messages)
        return run.result(Outcome.STEP_LIMIT, llm.step_limit, messages)


async def _post(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    try:
        async with http.post(url, json=body) as resp:
            text = await resp.text()
            status = resp.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise HarnessCrashed(
            f"the model endpoint {url} could not be reached: {type(exc).__name__}: {exc}"
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise HarnessCrashed(
            f"the model endpoint answered HTTP {status} with non-JSON: {text[:300]!r}"
        ) from None
    return status, data if isinstance(data, dict) else {"error": {"message": str(data)}}


class _Run:
    """Tool execution in the sandbox and the features counted along the way."""

    def __init__(self, sandbox: Any, workdir: str, timeout: float):
        self.sandbox, self.workdir, self.timeout = sandbox, workdir, timeout
        self.features = {
            "commands": 0.0,
            "views": 0.0,
            "edits": 0.0,
            "test_runs": 0.0,
            "rereads_after_edit": 0.0,
            "tool_errors": 0.0,
        }
        self.edited: set[str] = set()

    def _path(self, path: Any) -> str:
        if not isinstance(path, str) or not path:
            raise ValueError(f"path must be a non-empty string, got {path!r}")
        return posixpath.normpath(path if path.startswith("/") else posixpath.join(self.workdir, path))

    async def tool(self, name: str, raw_arguments: Any) -> tuple[str, bool]:
        """(the tool's output for the agent, whether it submitted)."""
        try:
            args = json.loads(raw_arguments) if isinstance(raw_arguments, str) else (raw_arguments or {})
            if not isinstance(args, dict):
                raise ValueError(f"arguments must be a JSON object, got {raw_arguments!r}")
            if name == "submit":
                return "Submitted.", True
            if name == "bash":
                return await self._bash(args.get("command")), False
            if name == "view":
                return await self._view(args), False
            if name == "str_replace":
                return await self._replace(args), False
            raise ValueError(f"unknown tool {name!r}; the tools are bash, view, str_replace and submit")
        except (ValueError, json.JSONDecodeError, OSError) as exc:
            self.features["tool_errors"] += 1
            return f"Error: {exc}", False

    async def _bash(self, command: Any) -> str:
        if not isinstance(command, str) or not command.strip():
            raise ValueError(f"command must be a non-empty string, got {command!r}")
        self.features["commands"] += 1
        self.features["test_runs"] += bool(TEST_COMMAND.search(command))
        if (
            self.edited
            and any(p in command for p in self.edited)
            and re.search(r"\b(cat|head|tail|sed|less|grep)\b", command)
        ):
            self.features["rereads_after_edit"] += 1
        result = await self.sandbox.exec(["bash", "-c", command], timeout=self.timeout, workdir=self.workdir)
        note = " (timed out)" if result.timed_out else ""
        return _cap(f"exit code {result.exit_code}{note}\n{result.stdout}{result.stderr}")

    async def _read(self, path: str) -> str:
        try:
            return (await self.sandbox.read_file(path)).decode("utf-8", errors="replace")
        except Exception as exc:  # noqa: BLE001 - any backend's missing-file error becomes the agent's error
            raise ValueError(f"cannot read {path}: {exc}") from None

    async def _view(self, args: dict[str, Any]) -> str:
        path = self._path(args.get("path"))
        self.features["views"] += 1
        self.features["rereads_after_edit"] += path in self.edited
        lines = (await self._read(path)).splitlines()
        start, end = args.get("start_line") or 1, args.get("end_line") or len(lines)
        if not is_int(start) or not is_int(end) or start < 1 or end < start:
            raise ValueError(
                f"start_line/end_line must be ints with 1 <= start <= end, got {start!r}, {end!r}"
            )
        return _cap("\n".join(f"{i:6}\t{line}" for i, line in enumerate(lines[start - 1 : end], start)))

    async def _replace(self, args: dict[str, Any]) -> str:
        path = self._path(args.get("path"))
        old, new = args.get("old"), args.get("new")
        if not isinstance(old, str) or not old or not isinstance(new, str):
            raise ValueError(f"old must be a non-empty string and new a string, got {old!r} and {new!r}")
        text = await self._read(path)
        count = text.count(old)
        if count != 1:
            raise ValueError(f"`old` occurs {count} times in {path}; it must occur exactly once")
        await self.sandbox.write_file(path, text.replace(old, new))
        self.features["edits"] += 1
        self.edited.add(path)
        self.edited.add(posixpath.relpath(path, self.workdir))
        return f"Replaced 1 occurrence in {path}."

    def result(self, status: Outcome, steps: int, messages: list[dict[str, Any]]) -> HarnessResult:
        log = "\n".join(json.dumps(m, ensure_ascii=False) for m in messages)
        return HarnessResult(status, steps, log=log, features=dict(self.features))
