"""Behaviour features from the parsed tool calls of any harness's vocabulary, and the progress line."""

import io
import json
import logging

from legorl_jax.rollout.behaviour import behaviour_features
from legorl_jax.rollout.progress import Progress


def turn(*calls, tokens=10, kind="main"):
    return {
        "kind": kind,
        "output_tokens": tokens,
        "tool_calls": [
            {"id": f"c{i}", "name": n, "arguments": json.dumps(a)} for i, (n, a) in enumerate(calls)
        ],
    }


def test_features_count_edits_test_runs_and_rereads_across_tool_vocabularies():
    trajectory = {
        "turns": [
            turn(("Read", {"file_path": "/repo/calc.py"})),  # Claude Code
            turn(("Edit", {"file_path": "/repo/calc.py", "old_string": "-", "new_string": "+"})),
            turn(("Read", {"file_path": "/repo/calc.py"})),  # re-read after the edit
            turn(
                (
                    "str_replace_editor",
                    {"command": "str_replace", "path": "/repo/util.py", "old_str": "a", "new_str": "b"},
                )
            ),
            turn(("str_replace_editor", {"command": "view", "path": "/repo/util.py"})),  # SWE-agent's re-read
            turn(("bash", {"command": "python -m pytest -q tests/test_calc.py"})),
            turn(("bash", {"command": "cat calc.py"})),  # shell re-read
            turn(("bash", {"command": "sed -i 's/a/b/' x.py"}), ("bash", {"command": "ls"})),
            turn(),  # no tool call
            turn(("bash", {"command": "ls"}), kind="side"),  # not the main thread
        ]
    }
    f = behaviour_features(trajectory["turns"])
    assert f["turns"] == 9 and f["tool_calls"] == 9 and f["no_tool_replies"] == 1
    assert f["edits"] == 3 and f["test_runs"] == 1 and f["rereads_after_edit"] == 3
    assert f["response_tokens"] == 90 and f["response_tokens_per_turn"] == 10
    assert f["tool_calls_per_turn"] == 1.0


def test_a_read_before_any_edit_is_not_a_reread():
    f = behaviour_features([turn(("view", {"path": "a.py"})), turn(("str_replace", {"path": "a.py"}))])
    assert f["rereads_after_edit"] == 0 and f["edits"] == 1


def test_the_progress_line_logs_each_trial_when_not_on_a_terminal(caplog):
    stream = io.StringIO()
    progress = Progress(3, label="step 0 trials", stream=stream)
    with caplog.at_level(logging.INFO, logger="legorl_jax.rollout"):
        for i, (outcome, reward, dropped) in enumerate(
            [("submitted", 1.0, False), ("timeout", 0.0, True), ("step_limit", 0.0, False)]
        ):
            progress.start()
            progress.finish(f"t-{i}", outcome, reward, dropped)
        progress.close()
    assert stream.getvalue() == ""  # nothing drawn on a non-terminal
    assert [r.getMessage() for r in caplog.records] == [
        "step 0 trials 1/3 t-0: submitted reward 1.00",
        "step 0 trials 2/3 t-1: timeout reward 0.00",
        "step 0 trials 3/3 t-2: step_limit reward 0.00",
    ]
    assert progress.line() == "step 0 trials 3/3 | running 0 | dropped 1 | reward 0.500"


def test_the_progress_line_redraws_in_place_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    stream = Tty()
    progress = Progress(2, stream=stream)
    progress.start()
    progress.finish("a", "submitted", 1.0, False)
    progress.close()
    assert stream.getvalue().count("\r") == 2 and stream.getvalue().endswith("\n")
    assert "trials 1/2 | running 0 | dropped 0 | reward 1.000" in stream.getvalue()
