"""tools/check_sglang_demo.py: the demo on real SGLang per mode, judged on the alignment of every step.

The last test runs it (marker `sglang`, with `slow` and `docker`: four demo jobs of 3 steps on real SGLang
on the CPU, about 40 minutes on 2 cores); the others check what it runs and how it judges, without SGLang.
"""

import importlib.util
import math
import os
import pathlib
import sys

import pytest

TOOL = pathlib.Path(__file__).parents[2] / "tools" / "check_sglang_demo.py"


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("check_sglang_demo", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_sglang_demo"] = module
    spec.loader.exec_module(module)
    return module


def test_each_mode_runs_the_demo_on_sglang_with_its_loop_mode_and_update_policy(check, tmp_path):
    argv = check.demo_argv("async-in_place", 2, tmp_path, tmp_path / "ws", "/venv/bin/python")
    assert argv[1].endswith("train.py") and "experiment=demo" in argv and "engine=sglang" in argv
    assert "engine.sglang.python=/venv/bin/python" in argv and "loop.steps=2" in argv
    assert argv[-2:] == ["loop.mode=async", "engine.update_policy=in_place"]
    extra = next(a for a in argv if a.startswith("engine.sglang.extra_args="))
    assert "--dtype,float32" in extra and "--device,cpu" in extra
    sync = check.demo_argv("sync", 2, tmp_path, tmp_path / "ws", "/venv/bin/python")
    assert not any(a.startswith(("loop.mode=", "engine.update_policy=")) for a in sync)
    with pytest.raises(ValueError, match="'async-retract'"):
        check.demo_argv("async-retract", 2, tmp_path, tmp_path, "/venv/bin/python")


def test_a_step_under_the_bar_without_the_figure_or_nan_fails_the_check_by_name(check):
    results = {
        "sync": {"steps": [{"align/prob_pearson": 0.9999}, {"align/prob_pearson": 0.9871}]},
        "async-drain": {"steps": [{}, {"align/prob_pearson": math.nan}, {"align/prob_pearson": 0.99}]},
        "async-in_place": {
            "steps": [{"align/same_version_tokens": 808.0, "offpolicy/stale_kv_tokens": 808.0}]
        },
    }
    assert check.failures(results, 0.99) == [
        "sync step 1: align/prob_pearson 0.9871 (want >= 0.99)",
        "async-drain step 0: align/prob_pearson None (want >= 0.99)",
        "async-drain step 1: align/prob_pearson nan (want >= 0.99)",
        "async-in_place step 0: align/prob_pearson None (want >= 0.99): all 808 tokens of the trainer's "
        "version ran over old K/V, none to judge",
    ]


def test_an_async_step_of_older_tokens_only_is_not_judged_but_a_mode_must_judge_one_after_its_update(check):
    lag = {"align/same_version_tokens": 0.0, "offpolicy/cross_version_tokens": 2269.0}
    judged = {"align/prob_pearson": 1.0, "align/same_version_tokens": 1116.0}
    assert check.failures({"async-in_place": {"steps": [judged, lag, judged]}}, 0.99) == []
    assert check.failures({"async-in_place": {"steps": [judged, lag, lag]}}, 0.99) == [
        "async-in_place: no step after the first update had a token of the trainer's version to judge"
    ]
    # No token at all is no lag: still a failure.
    assert check.failures({"sync": {"steps": [judged, {}]}}, 0.99)[0].startswith("sync step 1:")


@pytest.mark.sglang
@pytest.mark.slow
@pytest.mark.docker
def test_the_demo_on_real_sglang_aligns_at_every_step_in_every_mode(check, tmp_path, capsys):
    python = check.default_python()
    if not os.access(python, os.X_OK):
        pytest.skip(f"real SGLang environment missing ({python}): run tools/make_sglang_venv.sh")
    status = check.main(["--steps", "3", "--runs", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 0, out
    for mode in check.MODES:  # every mode ran its steps, each judged
        assert f"| {mode} | 1 |" in out, out
