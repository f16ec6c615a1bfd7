"""The Aim tracker: metrics, hyper-parameters and trial texts read back through Aim's own SDK, in a fresh
process as `aim up` or the compare command would; a resumed job continues the same run."""

import os
import subprocess
import sys
import textwrap

import pytest

ENV = {**os.environ, "JAX_PLATFORMS": "cpu"}


def in_process(code: str) -> str:
    """Runs `code` in a fresh interpreter (as separate jobs do) and returns its last stdout line."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=ENV, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def test_metrics_hparams_and_texts_read_back_through_aims_sdk(tmp_path):
    repo = tmp_path / "aim"
    run_hash = in_process(f"""
        import math
        from legorl_jax.monitor.aim_tracker import AimTracker
        t = AimTracker({str(repo)!r}, experiment="unit", run_name="gspo lr=1e-6", tags=["sweep-1"])
        t.log_hparams({{"algo": {{"loss": "gspo"}}, "train": {{"learning_rate": 1e-6}}, "tags": ("a", "b")}})
        for step in range(3):
            t.log({{"rollout/reward_mean": 0.25 * step, "train/pg_loss": math.nan}}, step=step)
        t.log_text("trial", "## user\\nfix it", step=2, context={{"task": "calc", "reward": 1.0, "outcome": "submitted"}})
        assert t.skipped == 3
        t.close()
        print(t.run_hash)
    """)
    from legorl_jax.monitor.aim_tracker import read_repo

    run = read_repo(repo).get_run(run_hash)
    assert (
        run.experiment == "unit"
        and run.name == "gspo lr=1e-6"
        and [getattr(t, "name", t) for t in run.props.tags] == ["sweep-1"]
    )
    assert run["hparams"] == {"algo": {"loss": "gspo"}, "train": {"learning_rate": 1e-6}, "tags": ["a", "b"]}
    metrics = {m.name: list(m.values.sparse_numpy()[1]) for m in run.metrics()}
    assert metrics == {"rollout/reward_mean": [0.0, 0.25, 0.5]}  # the NaN loss was never tracked
    ((name, context, _),) = run.iter_sequence_info_by_type("aim.text")
    assert name == "trial" and context.to_dict() == {"task": "calc", "reward": 1.0, "outcome": "submitted"}
    texts = run.get_text_sequence("trial", context)
    steps, values = texts.data.items_list()
    assert list(steps) == [2] and [str(text) for text in values[0]] == ["## user\nfix it"]


def test_a_resumed_job_continues_the_same_aim_run(tmp_path):
    repo = str(tmp_path / "aim")
    job = """
        from legorl_jax.monitor.aim_tracker import AimTracker
        t = AimTracker({repo!r}, experiment="unit", resume_hash={resume!r})
        t.log({{"train/loss": {value}}}, step={step})
        t.close()
        print(t.run_hash)
    """
    first = in_process(job.format(repo=repo, resume=None, value=1.0, step=0))
    again = in_process(job.format(repo=repo, resume=first, value=0.5, step=1))
    from legorl_jax.monitor.aim_tracker import read_repo

    runs = list(read_repo(repo).iter_runs())
    assert first == again and [r.hash for r in runs] == [first]
    assert [list(m.values.sparse_numpy()[1]) for m in runs[0].metrics()] == [[1.0, 0.5]]


def test_reading_a_folder_that_is_no_aim_repository_names_it(tmp_path):
    from legorl_jax.monitor.aim_tracker import read_repo

    with pytest.raises(FileNotFoundError, match="nothing is not an Aim repository"):
        read_repo(tmp_path / "nothing")
