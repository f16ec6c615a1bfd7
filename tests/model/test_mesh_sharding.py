"""The rules table, the mesh, placement, and the 8-device CPU mesh giving the unsharded results."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from legorl_jax.config import MeshConfig
from legorl_jax.model import ArchConfig, init_policy, sharding

CPU8 = MeshConfig(data=1, fsdp=2, tensor=2, expert=2)  # conf/mesh/cpu8.yaml


def test_make_mesh_gives_fsdp_the_devices_the_other_axes_leave():
    mesh = sharding.make_mesh(MeshConfig(tensor=2))
    assert dict(zip(mesh.axis_names, mesh.devices.shape, strict=True)) == {
        "data": 1,
        "fsdp": 4,
        "tensor": 2,
        "expert": 1,
        "context": 1,
    }


@pytest.mark.parametrize(
    "config, message",
    [
        (MeshConfig(fsdp=2, tensor=2), r"needs 4 devices, but 8 are available"),
        (MeshConfig(tensor=3), r"data\*tensor\*expert\*context = 3 does not divide the 8 devices"),
    ],
)
def test_make_mesh_rejects_sizes_that_do_not_match_the_devices(config, message):
    with pytest.raises(ValueError, match=message):
        sharding.make_mesh(config)


def test_mesh_devices_keep_the_trainer_off_the_devices_left_to_the_engine():
    mesh = sharding.make_mesh(MeshConfig(devices=[2, 3, 4, 5]))
    assert [d.id for d in mesh.devices.flat] == [jax.devices()[i].id for i in (2, 3, 4, 5)]
    assert dict(mesh.shape)["fsdp"] == 4
    with pytest.raises(ValueError, match=r"mesh.devices \[7, 9\] names \[9\], but there are 8 devices"):
        sharding.make_mesh(MeshConfig(devices=[7, 9]))
    with pytest.raises(
        ValueError, match=r"mesh.devices must be distinct device indices >= 0 or null, got \[1, 1\]"
    ):
        MeshConfig(devices=[1, 1])


def test_mesh_config_rules_override_the_defaults():
    rules = dict(
        sharding.rules_from_config(MeshConfig(rules=[["vocab", None], ["mlp", ["tensor", "expert"]]]))
    )
    assert rules["vocab"] == () and rules["mlp"] == ("tensor", "expert") and rules["experts"] == ("expert",)
    with pytest.raises(ValueError, match="logical axis 'hidden'"):
        sharding.make_rules([["hidden", "fsdp"]])
    with pytest.raises(ValueError, match="mesh axis 'model'"):
        sharding.make_rules([["mlp", "model"]])


def test_logical_specs_skip_used_size_one_and_non_dividing_mesh_axes():
    mesh = sharding.make_mesh(CPU8)
    # Activations: batch takes fsdp and expert, so embed (fsdp in the rules) stays whole.
    assert sharding.logical_to_spec(("batch", "seq", "embed"), (4, 8, 32), mesh=mesh) == P(
        ("fsdp", "expert"), None, None
    )
    # A batch of 2 cannot take both: expert is dropped rather than failing.
    assert sharding.logical_to_spec(("batch", "seq", "embed"), (2, 8, 32), mesh=mesh) == P("fsdp", None, None)
    assert sharding.logical_to_spec(("experts", "embed", "mlp"), (8, 32, 16), mesh=mesh) == P(
        "expert", "fsdp", "tensor"
    )
    assert sharding.logical_to_spec(("kv_heads",), (1,), mesh=mesh) == P(None)


def test_constrain_without_a_mesh_is_the_identity():
    x = jnp.arange(6.0).reshape(1, 2, 3)
    assert sharding.constrain(x, ("batch", "seq", "embed")) is x


def test_place_on_mesh_shards_parameters_by_their_logical_axes(moe_config):
    mesh = sharding.make_mesh(CPU8)
    policy = sharding.place_on_mesh(init_policy(moe_config, seed=1), mesh)
    assert policy.embed_tokens[...].sharding.spec == P("tensor", "fsdp")  # (vocab, embed)
    experts = policy.runs[0].layers.mlp.gate_proj[...]  # (layers, experts, embed, mlp)
    assert experts.sharding.spec == P(None, "expert", "fsdp", "tensor")
    assert policy.runs[0].layers.mlp.gate[...].sharding.spec == P(None, "fsdp", None)


def _sharded_forward(policy, mesh, ids):
    sharding.place_on_mesh(policy, mesh)
    graphdef, state = nnx.split(policy)
    with jax.set_mesh(mesh):
        return jax.jit(lambda state, ids: nnx.merge(graphdef, state)(ids))(state, ids)


@pytest.mark.parametrize("batch", [4, 2])  # 4: experts gather tokens and reduce-scatter; 2: a psum
def test_moe_forward_on_the_8_device_mesh_matches_unsharded(
    moe_config, moe_policy, jit_forward, tokens, batch
):
    ids = tokens(batch, 12, seed=3)
    expected = jit_forward(moe_policy)(ids)
    got = _sharded_forward(init_policy(moe_config, seed=1, init_std=0.2), sharding.make_mesh(CPU8), ids)
    # Order-1 logits whose sums the 8-device mesh splits and re-orders (fp32 simple-op).
    np.testing.assert_allclose(np.asarray(got.logits), np.asarray(expected.logits), atol=1e-5, rtol=0)
    np.testing.assert_array_equal(np.asarray(got.routed_experts), np.asarray(expected.routed_experts))
    assert float(got.aux_loss) == pytest.approx(float(expected.aux_loss), abs=1e-6)


def test_dense_forward_on_the_8_device_mesh_matches_unsharded(
    dense_config, dense_policy, jit_forward, tokens
):
    ids = tokens(4, 12, seed=4)
    expected = jit_forward(dense_policy)(ids)
    got = _sharded_forward(init_policy(dense_config, seed=2, init_std=0.2), sharding.make_mesh(CPU8), ids)
    # As in the MoE forward above: re-ordered sums of order-1 logits.
    np.testing.assert_allclose(np.asarray(got.logits), np.asarray(expected.logits), atol=1e-5, rtol=0)


def test_moe_gradients_on_the_mesh_match_unsharded(moe_raw, tokens):
    """The expert-parallel backward (all-gather <-> reduce-scatter transposes) gives the same gradients."""
    # One MoE layer keeps the two gradient compilations small; the layer stack is covered above.
    moe_config = ArchConfig.from_hf_dict(moe_raw | {"num_hidden_layers": 1, "mlp_only_layers": []})
    ids = jnp.asarray(tokens(4, 8, seed=5))

    def grads(policy, mesh=None):
        graphdef, params = nnx.split(policy)
        fn = jax.jit(jax.grad(lambda p: jnp.mean(nnx.merge(graphdef, p)(ids).logits ** 2)))
        if mesh is None:
            return fn(params)
        with jax.set_mesh(mesh):
            return fn(params)

    mesh = sharding.make_mesh(CPU8)
    plain = grads(init_policy(moe_config, seed=1, init_std=0.2))
    sharded = grads(sharding.place_on_mesh(init_policy(moe_config, seed=1, init_std=0.2), mesh), mesh)
    # Sharding only re-orders float32 sums; a sum of m terms moves by at most ~m·u of its terms' magnitudes
    # (u = 2^-24), taken relative to each leaf's largest gradient (an element near 0 still carries its sums'
    # rounding, so an element-wise rtol does not hold on every host). m = the B·T = 32 token positions plus
    # the longest contraction (vocab 256) once in the layer and once in the head.
    m = ids.size + (moe_config.num_hidden_layers + 1) * moe_config.vocab_size
    for (path, a), (_, b) in zip(nnx.to_flat_state(plain), nnx.to_flat_state(sharded), strict=True):
        a = np.asarray(a)
        atol = m * 2.0**-24 * np.abs(a).max()
        np.testing.assert_allclose(np.asarray(b), a, atol=atol, rtol=0, err_msg=str(path))


@pytest.mark.parametrize("batch, collectives", [(4, ("all_gather", "reduce_scatter")), (2, ("psum",))])
def test_experts_run_expert_parallel_with_the_documented_collectives(batch, collectives):
    from legorl_jax.model.moe import expert_ffn

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((batch, 3, 8)), jnp.float32)
    ids = jnp.asarray(rng.integers(0, 8, (batch, 3, 2)), jnp.int32)
    weights = jnp.ones((batch, 3, 2), jnp.float32)
    w_in, w_out = jnp.ones((8, 8, 4), jnp.float32), jnp.ones((8, 4, 8), jnp.float32)
    args = (x, ids, weights, w_in, w_in, w_out)
    assert "shard_map" not in str(jax.make_jaxpr(expert_ffn)(*args))
    with jax.set_mesh(sharding.make_mesh(CPU8)):
        jaxpr = str(jax.make_jaxpr(expert_ffn)(*args))
        sharded = jax.jit(expert_ffn)(*args)
    assert "shard_map" in jaxpr and all(c in jaxpr for c in collectives)
    # Each token's k = 2 expert outputs summed across devices, the others adding exact zeros: a 2-term sum.
    np.testing.assert_allclose(np.asarray(sharded), np.asarray(expert_ffn(*args)), rtol=1e-6)


@pytest.mark.parametrize(
    "rules, message",
    [
        ([["hidden", "fsdp"]], "logical_axis in"),
        ([["mlp", ["tensor", "model"]]], "names a mesh axis outside"),
        (["mlp"], "entries must be"),
    ],
)
def test_mesh_config_validates_its_rules_when_built(rules, message):
    with pytest.raises(ValueError, match=message):
        MeshConfig(rules=rules)


def test_load_hf_onto_a_mesh_creates_each_parameter_with_its_sharding(moe_policy, tmp_path):
    from legorl_jax.model import load_hf, save_hf

    save_hf(moe_policy, tmp_path, dtype="float32")
    mesh = sharding.make_mesh(CPU8)
    loaded = load_hf(tmp_path, mesh=mesh)
    expected = sharding.state_shardings(loaded, mesh)
    for (path, value), (_, target) in zip(
        nnx.to_flat_state(nnx.state(loaded)), nnx.to_flat_state(expected), strict=True
    ):
        assert value[...].sharding == target.get_value(), path
    np.testing.assert_array_equal(
        np.asarray(loaded.embed_tokens[...]), np.asarray(moe_policy.embed_tokens[...])
    )
