"""Publishing: an atomic, versioned HF directory the engine loads, or the params handed over in process."""

import pathlib
import subprocess
import sys

import jax
import numpy as np
import pytest
import tiny_run
from flax import nnx

from legorl_jax.model import init_policy, load_hf
from legorl_jax.train.publish import Publisher, export_hf, version_number, version_numbers, version_of


class RecordingEngine:
    """The engine boundary: records each update and what the directory held at that moment."""

    def __init__(self):
        self.updates = []

    async def update_weights(self, source, version):
        listing = sorted(p.name for p in pathlib.Path(source).iterdir()) if isinstance(source, str) else None
        self.updates.append((source, version, listing))


def params_of(policy):
    return nnx.state(policy, nnx.Param)


def to_policy(params):
    policy = init_policy(tiny_run.TINY_MOE, seed=1)
    nnx.update(policy, params)
    return policy


async def test_disk_publishing_writes_a_complete_hf_directory_before_the_engine_loads_it(tmp_path):
    trained = init_policy(tiny_run.TINY_MOE, seed=3)
    engine = RecordingEngine()
    publisher = Publisher(
        engine, mode="disk", to_policy=to_policy, directory=tmp_path, dtype="float32", keep=2
    )
    path = await publisher.publish(params_of(trained), version_of(7))
    assert path == tmp_path / "step-000007"
    source, version, listing = engine.updates[0]
    assert (source, version) == (str(path), "step-000007")
    assert "config.json" in listing and any(name.endswith(".safetensors") for name in listing)
    assert [p.name for p in tmp_path.iterdir()] == ["step-000007"]  # no temporary directory left behind
    loaded = load_hf(path, dtype="float32")
    for a, b in zip(jax.tree.leaves(params_of(loaded)), jax.tree.leaves(params_of(trained)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


async def test_bf16_publishing_rounds_within_the_bf16_tolerance_and_keeps_the_last_versions(tmp_path):
    engine = RecordingEngine()
    publisher = Publisher(
        engine, mode="disk", to_policy=to_policy, directory=tmp_path, dtype="bfloat16", keep=2
    )
    trained = init_policy(tiny_run.TINY_MOE, seed=4)
    for step in (1, 2, 3):
        await publisher.publish(params_of(trained), version_of(step))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000002", "step-000003"]
    loaded = load_hf(tmp_path / "step-000003", dtype="float32")
    for a, b in zip(jax.tree.leaves(params_of(loaded)), jax.tree.leaves(params_of(trained)), strict=True):
        # Published as bfloat16: one rounding to 8 significant bits, <= 2^-8 relative (bf16 policy 2e-2).
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-2, atol=1e-6)
    # Re-publishing a version replaces it whole.
    await publisher.publish(params_of(init_policy(tiny_run.TINY_MOE, seed=5)), version_of(3))
    assert [u[1] for u in engine.updates] == ["step-000001", "step-000002", "step-000003", "step-000003"]


async def test_in_process_publishing_hands_over_the_params_without_touching_disk(tmp_path):
    engine = RecordingEngine()
    params = params_of(init_policy(tiny_run.TINY_MOE, seed=2))
    result = await Publisher(engine, mode="in_process").publish(params, "step-000001")
    assert result == "step-000001"
    assert len(engine.updates) == 1 and engine.updates[0][0] is params
    assert engine.updates[0][1:] == ("step-000001", None)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_export_leaves_neither_a_version_nor_a_temporary_directory(tmp_path):
    policy = init_policy(tiny_run.TINY_MOE, seed=0)
    with pytest.raises(ValueError, match="is not a directory"):
        export_hf(policy, tmp_path / "out", "step-000001", source_dir=tmp_path / "missing")
    assert list((tmp_path / "out").iterdir()) == []


def test_bad_publishing_settings_are_named(tmp_path):
    engine = RecordingEngine()
    with pytest.raises(ValueError, match="mode must be one of .* got 'nccl'"):
        Publisher(engine, mode="nccl")
    with pytest.raises(ValueError, match="needs directory= and to_policy="):
        Publisher(engine, mode="disk")
    with pytest.raises(ValueError, match="dtype must be one of .* got 'float16'"):
        Publisher(engine, mode="in_process", dtype="float16")
    with pytest.raises(TypeError, match="has no update_weights"):
        Publisher(object(), mode="in_process")
    with pytest.raises(ValueError, match="step must be a non-negative int, got -1"):
        version_of(-1)


def test_version_number_reads_back_version_of_and_counts_the_initial_version_as_zero():
    assert version_number(version_of(42)) == 42 and version_number(version_of(0)) == 0
    assert version_number(version_of(1_234_567)) == 1_234_567  # past six digits the name just grows
    assert version_number("default") == 0
    assert version_number("base", initial="base") == 0
    # A published version wins over the initial name: a proxy built after an update counts right.
    assert version_number("step-000007", initial="step-000007") == 7


@pytest.mark.parametrize("bad", ["step-42", "step-0000x1", "v3", "Step-000001", "step-000001 ", "", "base"])
def test_a_version_that_is_neither_published_nor_initial_is_refused_by_name(bad):
    with pytest.raises(ValueError, match=f"weights version {bad!r} is neither a published version"):
        version_number(bad)


def test_a_version_that_is_not_a_string_is_refused_by_name():
    with pytest.raises(ValueError, match="weights version must be a string, got 42"):
        version_number(42)


def test_version_numbers_give_minus_one_where_nothing_was_sampled_and_none_for_an_unknown_name():
    numbers = version_numbers([None, "default", "step-000003", None, "step-000003"])
    assert numbers.dtype == np.int32 and numbers.tolist() == [-1, 0, 3, -1, 3]
    assert version_numbers(["step-000001", "scripted"]) is None


def test_importing_publish_loads_no_jax_so_the_proxy_can_number_versions():
    code = "import sys, legorl_jax.train.publish, legorl_jax.proxy.recorder; print('jax' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "False"
