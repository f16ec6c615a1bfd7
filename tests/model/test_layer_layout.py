"""Parameters moved between the scanned and the unrolled layer layouts: exact, both ways, and refused
(naming the parameter) when the source is not of the target's architecture."""

import jax
import numpy as np
import pytest
from flax import nnx

from legorl_jax.model import ArchConfig, init_policy
from legorl_jax.model.layer_layout import apply_plan, layout_plan

TEST_STD = 0.2  # as the model tests' conftest draws weights: clear routing margins


@pytest.fixture(scope="module")
def runs_raw(moe_raw_shared) -> dict:
    """Layers 0-1 MoE, 2 dense, 3 MoE: a run of two layers, so a stack is sliced at more than one index."""
    return moe_raw_shared | {"num_hidden_layers": 4, "mlp_only_layers": [2]}


@pytest.fixture(scope="module")
def layouts(runs_raw):
    config = ArchConfig.from_hf_dict(runs_raw)
    return {
        scan: nnx.state(init_policy(config, seed=3, init_std=TEST_STD, scan_layers=scan), nnx.Param)
        for scan in (True, False)
    }


def _moved(source, target):
    leaves = jax.jit(apply_plan, static_argnums=1)(jax.tree.leaves(source), layout_plan(source, target))
    return jax.tree.unflatten(jax.tree.structure(target), leaves)


@pytest.mark.parametrize("scan", [True, False], ids=["scanned-to-unrolled", "unrolled-to-scanned"])
def test_a_state_moved_to_the_other_layout_equals_that_layouts_own_state_bit_for_bit(layouts, scan):
    source, target = layouts[scan], layouts[not scan]
    moved = _moved(source, target)
    assert jax.tree.structure(moved) == jax.tree.structure(target)
    for (path, got), want in zip(
        jax.tree_util.tree_leaves_with_path(moved), jax.tree.leaves(target), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=jax.tree_util.keystr(path))
    # The moved Params carry the target layout's logical axes: a stack has `layers` first, a layer not.
    axes = [v.out_sharding for _, v in nnx.to_flat_state(moved)]
    assert axes == [v.out_sharding for _, v in nnx.to_flat_state(target)]
    assert any(a[0] == "layers" for a in axes) == (not scan)


def test_a_state_moved_to_its_own_layout_is_the_same_state(layouts):
    for scan in (True, False):
        for got, want in zip(
            jax.tree.leaves(_moved(layouts[scan], layouts[scan])), jax.tree.leaves(layouts[scan]), strict=True
        ):
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_a_source_of_another_architecture_is_refused_naming_the_parameter(layouts, runs_raw):
    # Layer 1 dense instead of 2: runs of 1, 1 and 2 layers where the target has 2, 1 and 1.
    shifted = ArchConfig.from_hf_dict(runs_raw | {"mlp_only_layers": [1]})
    other = nnx.state(init_policy(shifted, seed=3, scan_layers=True), nnx.Param)
    with pytest.raises(
        ValueError,
        match=r"parameter runs/0/layers/1/input_layernorm/weight is missing \(\d+ missing\); "
        r"parameter runs/2/layers/1/input_layernorm/weight is unexpected",
    ):
        layout_plan(other, layouts[False])
    fewer = ArchConfig.from_hf_dict(runs_raw | {"num_hidden_layers": 3})  # no run 2
    with pytest.raises(ValueError, match=r"parameter runs/2/layers/0/input_layernorm/weight is missing"):
        layout_plan(nnx.state(init_policy(fewer, seed=3, scan_layers=True), nnx.Param), layouts[True])
    wider = ArchConfig.from_hf_dict(runs_raw | {"moe_intermediate_size": 24})
    misshaped = nnx.state(init_policy(wider, seed=3, scan_layers=True), nnx.Param)
    with pytest.raises(
        ValueError,
        match=r"parameter runs/0/layers/0/mlp/down_proj has shape \(8, 24, 32\), expected \(8, 16, 32\)",
    ):
        layout_plan(misshaped, layouts[False])
