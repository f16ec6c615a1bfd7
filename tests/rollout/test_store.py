"""Finished trials kept across a restart (legorl_jax/rollout/store.py): what is saved reads back equal."""

from __future__ import annotations

import numpy as np
import pytest

from legorl_jax.rollout.store import load_trajectories, save_trajectories
from legorl_jax.tasks.protection import RemovedChange
from legorl_jax.tasks.report import ApplyResult, VerifierReport
from legorl_jax.types import Outcome, Sequence, Trajectory


def _trajectory(i: int, *, routed: bool) -> Trajectory:
    rng = np.random.default_rng(i)
    t = 6 + i
    seq = Sequence(
        token_ids=rng.integers(0, 100, t).astype(np.int32),
        loss_mask=np.array([0, 0] + [1] * (t - 2), np.int8),
        behaviour_logprobs=np.concatenate([np.zeros(2), -rng.random(t - 2)]).astype(np.float32),
        routed_experts=rng.integers(-1, 8, (t, 2, 2)).astype(np.int16) if routed else None,
        weight_versions=("step-000003", "step-000004"),
        token_versions=np.array([-1, -1] + [3] * 2 + [4] * (t - 4), np.int32),
    )
    report = VerifierReport(
        task_id="task",
        kind="builtin",
        reward=1.0,
        resolved=True,
        apply=ApplyResult("applied", "git apply"),
        tests={"tests/test_a.py::test_x": "passed"},
        removed_changes=(RemovedChange("tests/test_a.py", "protected"),),
        durations={"tests": 0.5},
        canary_survival=1e-4,
    )
    return Trajectory(
        f"task-{i}",
        "task",
        "task@g7",
        (seq,),
        float(i % 2),
        Outcome.SUBMITTED if i else Outcome.STEP_LIMIT,
        messages=({"role": "user", "content": f"fix {i}"},),
        features={"turns": 2.0},
        timings={"trial_s": 3.5},
        verifier_report=report if i else None,
    )


def test_saved_trajectories_read_back_equal_field_by_field(tmp_path):
    saved = [_trajectory(0, routed=True), _trajectory(1, routed=False)]
    save_trajectories(tmp_path / "pending", saved)
    loaded = load_trajectories(tmp_path / "pending")
    assert len(loaded) == 2
    for a, b in zip(saved, loaded, strict=True):
        assert (a.trial_id, a.task_id, a.group_id, a.reward, a.outcome) == (
            b.trial_id,
            b.task_id,
            b.group_id,
            b.reward,
            b.outcome,
        )
        assert (a.messages, a.features, a.timings, a.verifier_report) == (
            b.messages,
            b.features,
            b.timings,
            b.verifier_report,
        )
        (sa,), (sb,) = a.sequences, b.sequences
        for name in ("token_ids", "loss_mask", "behaviour_logprobs", "token_versions"):
            np.testing.assert_array_equal(getattr(sa, name), getattr(sb, name))
            assert getattr(sa, name).dtype == getattr(sb, name).dtype
        assert sa.weight_versions == sb.weight_versions
        if sa.routed_experts is None:
            assert sb.routed_experts is None
        else:
            np.testing.assert_array_equal(sa.routed_experts, sb.routed_experts)


def test_a_folder_with_nothing_saved_is_refused_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"{tmp_path} holds no trajectories.json"):
        load_trajectories(tmp_path)
    save_trajectories(tmp_path / "empty", [])
    assert load_trajectories(tmp_path / "empty") == []
