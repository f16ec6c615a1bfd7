"""The warm start's teacher: an engine behind the capture proxy that drives any harness through the gold fix.

    teacher = Teacher(task, "mini_swe_agent", proxy_config)
    engine = TeacherEngine(tokenizer, teacher, max_len=4096, eos_id=eos)   # behind a real CaptureProxy
    ... run_trial(task, harness=get_harness("mini_swe_agent"), proxy=capture, ...) ...
    teacher.error                                     # a TeacherError when it could not drive the harness

The harness is never told anything: the teacher reads what the harness declared in its own request, as
the engine receives it, the prompt the chat template rendered (Qwen3 ChatML: the OpenAI, Anthropic and
Responses `tools` become `<tools>` JSON lines in the system turn), and replies in that harness's protocol:

- an edit tool taking `path`, `old` and `new` (the built-in harness's `str_replace`): one call per hunk of
  the gold patch, `old` the fewest lines that are unique in the file (`gold_edits`);
- otherwise a shell tool (a tool with a free-text `command` or `cmd` and no `path`: `bash`, `Bash`,
  `terminal`, `exec_command`): one command that applies the gold patch, as a zero-context diff through
  `git apply --unidiff-zero` in the task's work directory (`compact_patch`), or through Codex's own
  `apply_patch` where the request names it (`apply_patch_text`);
- without tools, a text protocol the prompt asks for: Terminus-2's keystroke JSON, mini-swe-agent's
  ```mswea_bash_command blocks.

Then it ends the episode the harness's way: its `submit` tool (again when asked to review), its `finish`
tool, mini-swe-agent's `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`, Terminus-2's `task_complete` (twice:
it asks to confirm), or else a reply without a tool call, the end of the agent's turn (Claude Code, OpenCode,
Codex). Which reply comes next is the number of assistant turns already in the prompt.

Side conversations (a title generator, a sub-agent, a summary) are told apart as the proxy tells them apart
(`ProxyConfig.side_system_prefixes`, a system prompt other than the main one) and get a plausible short
reply; the proxy keeps them on side branches, out of training. A request in which the teacher finds no way
to edit files is a `TeacherError` naming the harness and what it found; the engine answers that request
with an error and keeps it (`Teacher.error`) for the warm start to raise, never a silent skip.
"""

from __future__ import annotations

import json
import pathlib
import re
from typing import Any

import numpy as np

from legorl_jax.config import ProxyConfig
from legorl_jax.engine.base import SamplingParams, check_generate_args, check_input_ids
from legorl_jax.tasks.patchset import parse_patch, split_lines
from legorl_jax.tasks.schema import Task
from legorl_jax.types import Generation

SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
"""mini-swe-agent's submission: a command whose output's first line is this."""
DONE_TEXT = "The fix is applied."
"""The teacher's reply without a tool call: the end of the agent's turn."""
SHELL_ARGUMENTS = ("command", "cmd")


class TeacherError(ValueError):
    """The teacher could not find, in the harness's request, a way to apply the gold patch."""


# --------------------------------------------------------------------------------------------------
# the gold patch in each form


def gold_edits(task: Task) -> list[dict[str, str]]:
    """The gold patch as `str_replace` arguments, one per hunk, each `old` unique in its file."""
    repo = pathlib.Path(task.image_context)
    edits = []
    for patch in parse_patch(task.patch):
        if patch.binary or not patch.old_path or not patch.new_path or patch.old_path != patch.new_path:
            raise ValueError(
                f"task {task.instance_id!r}: the gold patch {patch.new_path!r} is not an edit of one file"
            )
        source = (repo / patch.old_path).read_text()
        for old_lines, new_lines in _hunks(patch.text):
            edits.append(
                {
                    "path": patch.new_path,
                    **_smallest_unique(source, old_lines, new_lines, task, patch.new_path),
                }
            )
    if not edits:
        raise ValueError(f"task {task.instance_id!r}: the gold patch has no hunk")
    return edits


def _hunks(text: str) -> list[tuple[list[str], list[str]]]:
    """(old side, new side) lines of every hunk, each line keeping its `-`/`+`/` ` kind as first char."""
    hunks: list[tuple[list[str], list[str]]] = []
    for line in split_lines(text):
        if line.startswith("@@"):
            hunks.append(([], []))
        elif hunks and line[:1] in (" ", "-", "+"):
            kind, body = line[0], line[1:]
            if kind in (" ", "-"):
                hunks[-1][0].append(kind + body)
            if kind in (" ", "+"):
                hunks[-1][1].append(kind + body)
    return hunks


def _smallest_unique(source: str, old: list[str], new: list[str], task: Task, path: str) -> dict[str, str]:
    """`old`/`new` trimmed to the changed lines plus the fewest context lines that keep `old` unique."""
    lead = 0
    while lead < min(len(old), len(new)) and old[lead][0] == " " and new[lead][0] == " ":
        lead += 1
    trail = 0
    while trail < min(len(old), len(new)) - lead and old[-1 - trail][0] == " " and new[-1 - trail][0] == " ":
        trail += 1
    for extra in range(0, max(lead, trail) + 1):
        a, b = max(lead - extra, 0), max(trail - extra, 0)
        old_text = "".join(line[1:] for line in old[a : len(old) - b])
        new_text = "".join(line[1:] for line in new[a : len(new) - b])
        if old_text and source.count(old_text) == 1:
            return {"old": old_text, "new": new_text}
    raise ValueError(f"task {task.instance_id!r}: no unique `old` text for a hunk of {path!r}")


def compact_patch(task: Task) -> str:
    """The gold patch as a zero-context unified diff of `gold_edits` (for `git apply --unidiff-zero`): per
    hunk only the fewest lines that are unique in the file, at their line numbers in the original file."""
    repo = pathlib.Path(task.image_context)
    out: list[str] = []
    shift: dict[str, int] = {}  # path -> lines added so far by its earlier hunks
    for edit in gold_edits(task):
        path, old, new = edit["path"], edit["old"], edit["new"]
        source = (repo / path).read_text()
        at = source.index(old)
        if (at and source[at - 1] != "\n") or not old.endswith("\n") or (new and not new.endswith("\n")):
            raise ValueError(
                f"task {task.instance_id!r}: a hunk of {path!r} is not whole lines; "
                "a zero-context diff cannot express it"
            )
        if path not in shift:
            out += [f"--- a/{path}", f"+++ b/{path}"]
            shift[path] = 0
        old_lines, new_lines = old.splitlines(), new.splitlines()
        first = source[:at].count("\n") + 1
        old_start = first if old_lines else first - 1
        new_start = first + shift[path] if new_lines else first + shift[path] - 1
        out.append(f"@@ -{old_start},{len(old_lines)} +{new_start},{len(new_lines)} @@")
        out += ["-" + line for line in old_lines] + ["+" + line for line in new_lines]
        shift[path] += len(new_lines) - len(old_lines)
    return "\n".join(out) + "\n"


def shell_fix_command(task: Task) -> str:
    """One shell command that applies the gold patch in the task's work directory."""
    # Every line of the diff starts with "---", "+++", "@@", "-" or "+", so none ends the here-document.
    return f"cd {task.workdir} && git apply --unidiff-zero <<'PATCH'\n{compact_patch(task)}PATCH"


def apply_patch_command(task: Task) -> str:
    """Codex's `apply_patch` with the gold patch, as a shell command (Codex intercepts it and applies the
    patch itself)."""
    # Every line of the patch starts with "***", "@@", " ", "-" or "+", so none ends the here-document.
    return f"apply_patch <<'EOF'\n{apply_patch_text(task)}\nEOF"


def apply_patch_text(task: Task) -> str:
    """The gold patch in Codex's `apply_patch` format: `*** Add File` / `*** Delete File` / `*** Update File`
    sections, an update's hunks each after a bare `@@` with the diff's own context, `-` and `+` lines (Codex
    finds each hunk's old lines in order in the file, so the diff's context is what places it)."""
    out = ["*** Begin Patch"]
    for patch in parse_patch(task.patch):
        if patch.binary or (patch.old_path and patch.new_path and patch.old_path != patch.new_path):
            raise ValueError(
                f"task {task.instance_id!r}: apply_patch cannot express the gold patch's change of "
                f"{patch.path!r} (binary or renamed)"
            )
        hunks = _hunk_lines(patch.text)
        if patch.old_path is None:
            out.append(f"*** Add File: {patch.new_path}")
            out += [line for hunk in hunks for line in hunk if line.startswith("+")]
        elif patch.new_path is None:
            out.append(f"*** Delete File: {patch.old_path}")
        else:
            out.append(f"*** Update File: {patch.new_path}")
            for hunk in hunks:
                out += ["@@", *hunk]
    out.append("*** End Patch")
    return "\n".join(out)


def _hunk_lines(text: str) -> list[list[str]]:
    """The ` `/`-`/`+` lines of every hunk of one file's diff, without their newlines."""
    hunks: list[list[str]] = []
    for line in split_lines(text):
        if line.startswith("@@"):
            hunks.append([])
        elif hunks and line[:1] in (" ", "-", "+"):
            hunks[-1].append(line.rstrip("\n"))
    return hunks


def qwen3_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """A tool call as a Qwen3 (hermes JSON) model writes it."""
    return (
        "<tool_call>\n"
        + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
        + "\n</tool_call>"
    )


# --------------------------------------------------------------------------------------------------
# reading the request


class Prompt:
    """A rendered ChatML prompt, read back: its system turn, the tools declared there, the turns so far."""

    def __init__(self, text: str):
        self.text = text
        turns = []
        for chunk in text.split("<|im_start|>")[1:]:
            role, _, body = chunk.partition("\n")
            turns.append((role.strip(), body.split("<|im_end|>")[0]))
        if not turns or turns[-1][0] != "assistant":
            raise TeacherError(f"the prompt does not end by asking for an assistant turn: {text[-200:]!r}")
        self.system = turns[0][1] if turns[0][0] == "system" else ""
        self.assistant_turns = sum(role == "assistant" for role, _ in turns[:-1])
        self.tools: dict[str, dict[str, Any]] = {}
        block = re.search(r"<tools>\n(.*?)\n</tools>", self.system, re.S)
        for line in block.group(1).splitlines() if block else ():
            if line.strip():
                spec = json.loads(line)
                function = spec.get("function", spec)
                self.tools[function["name"]] = function


def _properties(tool: dict[str, Any]) -> dict[str, Any]:
    return (tool.get("parameters") or {}).get("properties") or {}


def _filled(tool: dict[str, Any], arguments: dict[str, Any], text: str) -> dict[str, Any]:
    """`arguments` plus a plausible value for every other required parameter of `tool`."""
    properties = _properties(tool)
    out = dict(arguments)
    for name in (tool.get("parameters") or {}).get("required") or []:
        if name in out:
            continue
        spec = properties.get(name, {})
        if spec.get("enum"):
            out[name] = spec["enum"][0]
        elif spec.get("type") == "boolean":
            out[name] = False
        elif spec.get("type") in ("integer", "number"):
            out[name] = 1
        else:
            out[name] = text
    return out


def shell_tool(prompt: Prompt) -> tuple[str, str] | None:
    """(tool name, its command parameter) of a tool that runs free-text shell commands, if declared."""
    for name, tool in prompt.tools.items():
        properties = _properties(tool)
        if "path" in properties or "file_path" in properties or "filePath" in properties:
            continue
        for argument in SHELL_ARGUMENTS:
            spec = properties.get(argument)
            if isinstance(spec, dict) and spec.get("type") == "string" and not spec.get("enum"):
                return name, argument
    return None


def edit_tool(prompt: Prompt) -> str | None:
    """The name of a tool taking exactly the `str_replace` arguments `path`, `old` and `new`, if declared."""
    for name, tool in prompt.tools.items():
        if {"path", "old", "new"} <= set(_properties(tool)):
            return name
    return None


class Teacher:
    """The replies that take one harness through one task's gold fix (module docstring)."""

    def __init__(self, task: Task, harness: str, proxy: ProxyConfig):
        self.task, self.harness, self.proxy = task, harness, proxy
        self.main_system: str | None = None
        self.plan: list[str] | None = None
        self.main_calls = self.side_calls = 0
        self.error: TeacherError | None = None

    def is_side(self, system: str) -> bool:
        """The proxy's own rule (`CaptureSession._kind`) on the rendered system turn."""
        if any(system.startswith(p) for p in self.proxy.side_system_prefixes):
            return True
        if self.main_system is None:
            self.main_system = system
            return False
        n = self.proxy.main_prefix_match
        return not (system == self.main_system or (len(system) >= n and system[:n] == self.main_system[:n]))

    def reply(self, text: str) -> str:
        """The reply to the rendered prompt `text`."""
        try:
            prompt = Prompt(text)
            if self.is_side(prompt.system):
                self.side_calls += 1
                return self.side_reply(prompt)
            if self.plan is None:
                self.plan = self.plan_for(prompt)
        except TeacherError as exc:
            self.error = self.error or exc
            raise
        self.main_calls += 1
        return self.plan[min(prompt.assistant_turns, len(self.plan) - 1)]

    def side_reply(self, prompt: Prompt) -> str:
        """A title to a title generator, else a one-line finding (sub-agents, summaries)."""
        files = sorted({p.path for p in parse_patch(self.task.patch)})
        if "title" in prompt.system.lower()[:300]:
            return f"Fix {', '.join(files)}"
        return f"The fix belongs in {', '.join(files)}."

    def plan_for(self, prompt: Prompt) -> list[str]:
        """Every main-conversation reply of the demonstration, in order (the last one repeats)."""
        task = self.task
        if prompt.tools:
            if (editor := edit_tool(prompt)) is not None:
                work = [qwen3_tool_call(editor, edit) for edit in gold_edits(task)]
                shell = None
            elif (shell := shell_tool(prompt)) is not None:
                name, argument = shell
                command = (
                    apply_patch_command(task) if "apply_patch" in prompt.text else shell_fix_command(task)
                )
                arguments = _filled(prompt.tools[name], {argument: command}, "Apply the fix")
                work = [qwen3_tool_call(name, arguments)]
            else:
                raise TeacherError(
                    f"harness {self.harness!r}: the teacher found no edit tool (taking path, old and new) "
                    f"and no shell tool (a free-text {' or '.join(SHELL_ARGUMENTS)} parameter) among the "
                    f"tools it "
                    f"declared: {sorted(prompt.tools)}"
                )
            return work + [self._ending(prompt, shell)]
        if '"keystrokes"' in prompt.text and "task_complete" in prompt.text:
            return [
                _keystrokes("Apply the fix.", [shell_fix_command(task) + "\n"], done=False),
                _keystrokes("The fix is applied.", [], done=True),
            ]
        if "```mswea_bash_command" in prompt.text:
            return [
                f"Apply the fix.\n\n```mswea_bash_command\n{shell_fix_command(task)}\n```",
                f"Submit.\n\n```mswea_bash_command\necho {SUBMIT_MARKER}\n```",
            ]
        raise TeacherError(
            f"harness {self.harness!r}: the teacher found no tools in its request and no text protocol it "
            "knows (Terminus-2's keystroke JSON, mini-swe-agent's ```mswea_bash_command blocks); system "
            f"prompt begins {prompt.system[:200]!r}"
        )

    def _ending(self, prompt: Prompt, shell: tuple[str, str] | None) -> str:
        """The harness's own end of the episode."""
        for name in ("submit", "finish"):
            if name in prompt.tools:
                return qwen3_tool_call(name, _filled(prompt.tools[name], {}, DONE_TEXT))
        if SUBMIT_MARKER in prompt.text and shell is not None:
            name, argument = shell
            arguments = _filled(prompt.tools[name], {argument: f"echo {SUBMIT_MARKER}"}, "Submit")
            return qwen3_tool_call(name, arguments)
        return DONE_TEXT


def _keystrokes(analysis: str, commands: list[str], *, done: bool) -> str:
    """One Terminus-2 reply: its JSON object of keystrokes for the tmux pane."""
    return json.dumps(
        {
            "analysis": analysis,
            "plan": analysis,
            "commands": [{"keystrokes": c, "duration": 1.0} for c in commands],
            "task_complete": done,
        }
    )


# --------------------------------------------------------------------------------------------------
# the engine


class TeacherEngine:
    """An `Engine` whose every reply is the teacher's: the demonstrator behind the proxy.

    Its log-probs are 0 (nothing is sampled); the warm start never uses them (no importance weighting).
    Asked for the k likeliest tokens, it names its reply's token at log-prob 0 and k - 1 others at -inf.
    """

    def __init__(self, tokenizer: Any, teacher: Teacher, *, max_len: int, eos_id: int):
        self.tokenizer, self.teacher, self.max_len, self.eos_id = tokenizer, teacher, max_len, eos_id
        self.calls = 0

    async def generate(
        self,
        input_ids: Any,
        sampling: SamplingParams,
        *,
        return_routed_experts: bool = False,
        routed_experts_start_len: int = 0,
        rid: str | None = None,
        top_logprobs: int = 0,
        session_id: str | None = None,
    ) -> Generation:
        prompt = check_input_ids(input_ids)
        check_generate_args(
            prompt,
            sampling,
            return_routed_experts,
            routed_experts_start_len,
            rid,
            top_logprobs=top_logprobs,
            session_id=session_id,
        )
        text = self.teacher.reply(self.tokenizer.decode(prompt.tolist(), skip_special_tokens=False))
        self.calls += 1
        out = [*self.tokenizer.encode(text), self.eos_id]
        if len(out) > sampling.max_new_tokens:
            raise ValueError(
                f"a demonstration reply of {len(out)} tokens exceeds max_new_tokens={sampling.max_new_tokens}"
            )
        top_ids = top_lps = None
        if top_logprobs:
            top_ids = np.asarray(
                [[t, *[x for x in range(top_logprobs) if x != t][: top_logprobs - 1]] for t in out], np.int32
            )
            top_lps = np.full(top_ids.shape, -np.inf, np.float32)
            top_lps[:, 0] = 0.0
        return Generation(
            np.asarray(out, np.int32),
            np.zeros(len(out), np.float32),
            None,
            "stop",
            "teacher",
            len(prompt),
            routed_experts_start=routed_experts_start_len,
            output_top_ids=top_ids,
            output_top_logprobs=top_lps,
        )

    async def prompt_logprobs(self, input_ids: Any, start: int, *, temperature: float = 1.0) -> np.ndarray:
        return np.zeros(len(list(input_ids)) - start, np.float32)

    async def update_weights(self, source: Any, version: str) -> None:
        raise ValueError("the teacher engine has no weights")

    async def health(self) -> bool:
        return True

    async def abort(self, rid: str) -> None:
        return None
