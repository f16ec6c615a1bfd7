"""Behaviour features of one trial, read from the tool calls the proxy parsed (any harness, any tool names).

    features = behaviour_features(record.turns)     # a SessionRecord's turns (main thread only)

- `turns`: model calls on the main thread; `tool_calls`, `tool_calls_per_turn`;
- `no_tool_replies`: replies without a tool call (offered tools and none called);
- `edits`: calls that change a file (an editor tool's write commands, or a shell `sed -i`, `>` redirect,
  `patch`, `git apply`); `test_runs`: shell commands that run tests (pytest, unittest, tox, nose);
- `rereads_after_edit`: reads of a path (an editor's view, `cat`/`head`/`sed -n`/`grep`) already edited;
- `response_tokens`, `response_tokens_per_turn`: sampled tokens on the main thread.
Tool vocabularies differ per harness (bash / str_replace_editor / Edit / Read / view / str_replace ...); the
tables below map each known name to what it does, and an unknown tool counts only as a tool call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

SHELL_TOOLS = {"bash", "Bash", "terminal", "execute_bash", "shell", "run_shell_command"}
EDIT_TOOLS = {"str_replace", "Edit", "Write", "MultiEdit", "edit", "write", "create_file", "apply_patch"}
READ_TOOLS = {"view", "Read", "read", "read_file", "open"}
EDITOR_TOOLS = {
    "str_replace_editor",
    "file_editor",
}  # one tool, the command says which: view / create / str_replace
TEST_COMMAND = re.compile(r"\b(pytest|py\.test|unittest|tox|nose2?)\b")
SHELL_EDIT = re.compile(r"(\bsed\s+-i|\bpatch\b|\bgit\s+apply\b|(?<![<>2&])>\s*[\w./-]+|\btee\b)")
SHELL_READ = re.compile(r"\b(cat|head|tail|less|more|grep|sed\s+-n|nl)\b")
PATH_KEYS = ("path", "file_path", "filePath", "filename", "file")


def _args(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (TypeError, json.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def _path(args: dict[str, Any]) -> str | None:
    for key in PATH_KEYS:
        if isinstance(args.get(key), str) and args[key]:
            return args[key].rstrip("/")
    return None


def _mentions(command: str, paths: set[str]) -> bool:
    return any(p in command or p.rsplit("/", 1)[-1] in command.split() for p in paths)


def behaviour_features(turns: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """The features of the module docstring from a proxy session's turns (`SessionRecord.turns`, or the
    `turns` of an archived trajectory.json)."""
    main = [t for t in turns if t.get("kind", "main") == "main"]
    f = dict.fromkeys(
        (
            "turns",
            "tool_calls",
            "no_tool_replies",
            "edits",
            "test_runs",
            "rereads_after_edit",
            "response_tokens",
        ),
        0.0,
    )
    edited: set[str] = set()
    for turn in main:
        f["turns"] += 1
        f["response_tokens"] += turn.get("output_tokens", 0)
        calls = turn.get("tool_calls", [])
        f["tool_calls"] += len(calls)
        f["no_tool_replies"] += not calls
        for call in calls:
            name, args = call.get("name", ""), _args(call.get("arguments", ""))
            path = _path(args)
            if name in EDITOR_TOOLS:
                command = args.get("command", "")
                name = "view" if command == "view" else ("edit" if command else name)
            if name in SHELL_TOOLS:
                command = str(args.get("command", ""))
                f["test_runs"] += bool(TEST_COMMAND.search(command))
                if edited and SHELL_READ.search(command) and _mentions(command, edited):
                    f["rereads_after_edit"] += 1
                if SHELL_EDIT.search(command):
                    f["edits"] += 1
            elif name in EDIT_TOOLS or name == "edit":
                f["edits"] += 1
                if path:
                    edited.add(path)
            elif name in READ_TOOLS and path and path in edited:
                f["rereads_after_edit"] += 1
    f["tool_calls_per_turn"] = f["tool_calls"] / f["turns"] if f["turns"] else 0.0
    f["response_tokens_per_turn"] = f["response_tokens"] / f["turns"] if f["turns"] else 0.0
    return f
