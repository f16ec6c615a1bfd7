"""The Aim tracker: metrics, hyper-parameters and trial texts read back through Aim's own SDK, in a fresh
process as `aim up` or the compare command would; a resumed job continues the same run."""

import json
import os
import subprocess
import sys
import textwrap

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
        t.log_text("trial", "## user\\nfix it", step=2,
                   context={{"task": "calc", "reward": 1.0, "outcome": "submitted"}})
        assert t.skipped == 3
        t.close()
        print(t.run_hash)
    """)
    seen = json.loads(
        in_process(f"""
        import json
        from legorl_jax.monitor.aim_tracker import read_repo
        run = read_repo({str(repo)!r}).get_run({run_hash!r})
        ((name, context, _),) = run.iter_sequence_info_by_type("aim.text")
        steps, values = run.get_text_sequence(name, context).data.items_list()
        print(json.dumps({{
            "experiment": run.experiment, "name": run.name,
            "tags": [getattr(t, "name", t) for t in run.props.tags],
            "hparams": run["hparams"],
            "metrics": {{m.name: [float(v) for v in m.values.sparse_numpy()[1]] for m in run.metrics()}},
            "text": [name, context.to_dict(), [int(s) for s in steps], [str(t) for t in values[0]]],
        }}))
    """)
    )
    assert (seen["experiment"], seen["name"], seen["tags"]) == ("unit", "gspo lr=1e-6", ["sweep-1"])
    assert seen["hparams"] == {"algo": {"loss": "gspo"}, "train": {"learning_rate": 1e-6}, "tags": ["a", "b"]}
    assert seen["metrics"] == {"rollout/reward_mean": [0.0, 0.25, 0.5]}  # the NaN loss was never tracked
    name, context, steps, texts = seen["text"]
    assert name == "trial" and context == {"task": "calc", "reward": 1.0, "outcome": "submitted"}
    assert steps == [2] and texts == ["## user\nfix it"]


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
    seen = json.loads(
        in_process(f"""
        import json
        from legorl_jax.monitor.aim_tracker import read_repo
        runs = list(read_repo({repo!r}).iter_runs())
        print(json.dumps([[r.hash, [[float(v) for v in m.values.sparse_numpy()[1]] for m in r.metrics()]]
                          for r in runs]))
    """)
    )
    assert first == again and seen == [[first, [[1.0, 0.5]]]]


def test_reading_a_folder_that_is_no_aim_repository_names_it(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from legorl_jax.monitor.aim_tracker import read_repo; read_repo({str(tmp_path / 'nothing')!r})",
        ],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    assert out.returncode == 1 and "nothing is not an Aim repository" in out.stderr
