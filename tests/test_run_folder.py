"""A run's folder: a fresh start over a run is refused with nothing touched, overwrite moves it aside whole,
and the engine side's logs go under it."""

from __future__ import annotations

import pytest

from legorl_jax.config import EngineConfig
from legorl_jax.run_folder import claim_run_folder, log_paths, run_contents, with_logs_under


def make_run(folder):
    (folder / "trials" / "step_0" / "calc-0").mkdir(parents=True)
    (folder / "trials" / "step_0" / "calc-0" / "trial.json").write_text("{}")
    (folder / "metrics.jsonl").write_text('{"step": 0}\n')
    (folder / "hydra" / "20260101-000000").mkdir(parents=True)
    (folder / "hydra" / "20260101-000000" / "train.log").write_text("first start")


def snapshot(root):
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("held", ["trials", "metrics.jsonl", "checkpoints"])
def test_a_fresh_start_over_a_run_is_refused_naming_what_it_holds_with_nothing_touched(tmp_path, held):
    folder = tmp_path / "run"
    folder.mkdir()
    path = folder / held
    if held.endswith(".jsonl"):
        path.write_text('{"step": 0}\n')
    else:
        (path / "1").mkdir(parents=True)
    before = snapshot(tmp_path)
    with pytest.raises(
        FileExistsError, match=f"already holds a run \\({held}\\).*resume=true.*overwrite=true"
    ):
        claim_run_folder(folder, resume=False, overwrite=False)
    assert snapshot(tmp_path) == before


def test_a_folder_with_only_hydra_logs_or_empty_folders_is_not_a_run(tmp_path):
    folder = tmp_path / "run"
    (folder / "hydra" / "x").mkdir(parents=True)
    (folder / "trials").mkdir()
    assert run_contents(folder) == []
    assert claim_run_folder(folder, resume=False, overwrite=False) is None


def test_overwrite_moves_the_whole_run_aside_keeps_hydra_logs_in_place_and_deletes_nothing(tmp_path):
    folder = tmp_path / "run"
    make_run(folder)
    before = snapshot(folder)
    aside = claim_run_folder(folder, resume=False, overwrite=True)
    assert aside is not None and aside.parent == tmp_path and aside.name.startswith("run.replaced-")
    moved = snapshot(aside)
    assert {k: v for k, v in before.items() if not k.startswith("hydra")} == moved
    assert sorted(p.name for p in folder.iterdir()) == ["hydra"]
    assert (folder / "hydra" / "20260101-000000" / "train.log").read_text() == "first start"
    again = tmp_path / "run" / "metrics.jsonl"
    again.write_text('{"step": 0}\n')
    second = claim_run_folder(folder, resume=False, overwrite=True)  # twice within a second: another name
    assert second != aside and (second / "metrics.jsonl").is_file() and (aside / "metrics.jsonl").is_file()


def test_resume_and_overwrite_together_are_refused_and_resume_alone_claims_nothing(tmp_path):
    folder = tmp_path / "run"
    make_run(folder)
    with pytest.raises(ValueError, match="resume=true and overwrite=true contradict"):
        claim_run_folder(folder, resume=True, overwrite=True)
    assert claim_run_folder(folder, resume=True, overwrite=False) is None
    assert (folder / "metrics.jsonl").is_file()


def test_a_launched_fleets_engine_and_router_logs_go_under_the_run_folder(tmp_path):
    config = with_logs_under(EngineConfig(backend="sglang", launch=2), tmp_path)
    assert log_paths(config) == [
        str(tmp_path / "logs" / "engine-0.log"),
        str(tmp_path / "logs" / "engine-1.log"),
        str(tmp_path / "logs" / "router.log"),
    ]
    assert (tmp_path / "logs").is_dir()
    named = EngineConfig(backend="sglang", launch=1)
    named = with_logs_under(
        EngineConfig(
            backend="sglang",
            launch=1,
            sglang=type(named.sglang)(log_file="/elsewhere/e.log"),
            router=type(named.router)(log_file="/elsewhere/r.log"),
        ),
        tmp_path / "other",
    )
    assert log_paths(named) == ["/elsewhere/e-0.log", "/elsewhere/r.log"]  # a named file is kept
    assert log_paths(with_logs_under(EngineConfig(), tmp_path)) == []  # the embedded engine has no log file


def test_the_committed_step_is_the_newest_checkpoint_whose_steps_metrics_row_is_logged(tmp_path):
    from legorl_jax.run_folder import committed_step

    assert committed_step([1, 2, 3], tmp_path) == 3  # no metrics file here: the newest
    (tmp_path / "metrics.jsonl").write_text('{"step": 0}\n{"step": 1}\n{"step": 2, "metr')  # row 2 cut
    assert committed_step([1, 2, 3], tmp_path) == 2  # checkpoint 3 (after step 2) lacks step 2's row
    assert committed_step([], tmp_path) is None


def test_a_checkpoint_without_its_steps_row_is_set_aside_not_deleted_and_the_resume_starts_before_it(
    tmp_path,
):
    import jax.numpy as jnp
    import optax

    from legorl_jax.config import CheckpointConfig
    from legorl_jax.run_folder import set_aside_uncommitted_checkpoints
    from legorl_jax.train.checkpoint import Checkpointer
    from legorl_jax.train.state import init_train_state

    state = init_train_state({"w": jnp.ones((2, 2))}, optax.sgd(0.1), seed=0)
    config = CheckpointConfig(directory=str(tmp_path / "checkpoints"), every=1, keep=5, async_save=False)
    (tmp_path / "metrics.jsonl").write_text('{"step": 0}\n')  # killed after checkpoint 2, before step 1's row
    with Checkpointer(config, run_config={}) as ckpt:
        for step in (1, 2):
            ckpt.maybe_save(state, cursor={"next_step": step}, weights_version=f"v{step}", step=step)
        moved = set_aside_uncommitted_checkpoints(ckpt, tmp_path)
        assert ckpt.all_steps() == [1] and ckpt.latest_step() == 1
        assert [p.parent.name for p in moved] == ["checkpoints.abandoned"] and moved[0].name.startswith("2-")
        assert (moved[0] / "meta").is_dir()  # kept whole
        assert ckpt.maybe_save(state, cursor={"next_step": 2}, weights_version="v2", step=2)  # saved again
        assert ckpt.all_steps() == [1, 2]
