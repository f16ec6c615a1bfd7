"""The RL loop, one step at a time: real harness, Docker sandboxes, verifier, trainer, checkpoint, publishing.

The rollouts' replies come from a scripted engine behind the proxy (loop_run.py): each group has one trial
that applies the gold edit and others that submit at once, so the group has an advantage to learn from.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import textwrap

import loop_run
import pytest

pytestmark = pytest.mark.docker
HERE = pathlib.Path(__file__).resolve().parent


def in_fresh_process(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300, cwd=HERE
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


def test_one_loop_step_trains_checkpoints_publishes_and_its_aim_run_reads_back(loop_model_dir, tmp_path):
    repo = tmp_path / "aim"
    out = subprocess.run(
        [
            sys.executable,
            str(HERE / "loop_run.py"),
            str(loop_model_dir),
            str(tmp_path / "runs" / "one"),
            "--aim",
            str(repo),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("{")))
    (record,) = result["records"]
    m = record["metrics"]
    assert record["trained"] and m["rollout/trials"] == 2 and m["rollout/reward_mean"] == 0.5
    assert m["train/updates"] == 1 and m["batch/sampled_tokens"] > 0 and m["align/routing_coverage"] == 1.0
    assert result["checkpoints"] == [1] and result["optimiser_step"] == 1  # saved under loop step 1
    assert result["version"] == "step-000001"  # the embedded engine serves the trained weights
    trials = sorted(p.name for p in (tmp_path / "runs" / "one" / "trials" / "step_0").iterdir())
    assert trials == ["ratelimit-slow-rates-never-refill-0", "ratelimit-slow-rates-never-refill-1"]

    seen = json.loads(
        in_fresh_process(f"""
        import json
        from legorl_jax.monitor.aim_tracker import read_repo
        run = read_repo({str(repo)!r}).get_run({result["run_hash"]!r})
        metrics = {{m.name: [float(v) for v in m.values.sparse_numpy()[1]] for m in run.metrics()}}
        texts = [(name, ctx.to_dict()) for name, ctx, _ in run.iter_sequence_info_by_type("aim.text")]
        dists = [name for name, _, _ in run.iter_sequence_info_by_type("aim.distribution")]
        tags = [getattr(t, "name", t) for t in run.props.tags]
        print(json.dumps({{"metrics": metrics, "texts": texts, "dists": dists, "tags": tags}}))
    """)
    )
    assert seen["metrics"]["rollout/reward_mean"] == [0.5] and seen["metrics"]["train/updates"] == [1.0]
    assert "align/prob_pearson" in seen["metrics"] and "time/train_step_s" in seen["metrics"]
    rewards = sorted(ctx["reward"] for name, ctx in seen["texts"] if name == "trials/conversation")
    assert rewards == [0.0, 1.0]  # every trial's conversation, with its context
    assert seen["dists"] == ["align/logprob_diff"]
    assert seen["tags"] == ["harness:builtin"]  # the Aim UI groups runs by the harness they trained through


async def test_an_infrastructure_failure_in_one_trial_drops_only_that_trial(loop_model_dir, tmp_path):
    records, version, saved, optimiser_step, _ = await loop_run.run(
        str(loop_model_dir), tmp_path / "runs" / "infra", group_size=3, fail_trials=(1,)
    )
    (record,) = records
    m = record.metrics
    assert m["rollout/trials"] == 3 and m["rollout/scored"] == 2 and m["batch/dropped_trials"] == 1
    assert {k: v for k, v in m.items() if k.startswith("rollout/dropped/")} == {
        "rollout/dropped/engine_failed": 1.0
    }
    assert record.trained and m["rollout/reward_mean"] == 0.5  # the solved and the unsolved trial still train
    assert version == "step-000001" and saved == [1] and optimiser_step == 1


async def test_a_step_whose_every_trial_was_dropped_skips_the_update_and_says_why(
    loop_model_dir, tmp_path, caplog
):
    records, version, saved, optimiser_step, _ = await loop_run.run(
        str(loop_model_dir), tmp_path / "runs" / "dropped", group_size=2, fail_trials=(0, 1)
    )
    (record,) = records
    assert not record.trained and "all 2 trials were dropped" in record.skipped_because
    assert record.metrics["loop/skipped_update"] == 1.0 and "train/updates" not in record.metrics
    assert version == "default"  # nothing was published
    assert saved == [1] and optimiser_step == 0  # the loop's cursor moved on; the weights did not
    assert any("update skipped: all 2 trials were dropped" in r.getMessage() for r in caplog.records)
