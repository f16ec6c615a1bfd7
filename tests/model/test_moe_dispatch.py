"""The expert-parallel dispatch of the MoE block (moe.expert_ffn) on the 8 CPU devices: both dispatches
equal one device in values and gradients under skewed loads, the experts dispatch's buffers follow each
device's own tokens, and the choice between them is made and checked as documented."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from legorl_jax.config import MeshConfig
from legorl_jax.model import moe
from legorl_jax.model.moe import DISPATCHES, chunk_tokens, default_dispatch, expert_ffn
from legorl_jax.model.sharding import make_mesh, rules_from_config, use_rules

# conf/mesh/h200x8_long's layout on the 8 CPU devices: experts over 8, a row's tokens over the same 8.
LONG = MeshConfig(
    fsdp=1,
    expert=8,
    rules=[["batch", ["data", "fsdp"]], ["embed", ["fsdp", "expert"]], ["seq", ["context", "expert"]]],
)
# Rows over the expert axis instead (conf/mesh/h200x8's batch rule), for the gather along the batch.
ROWS = MeshConfig(fsdp=1, expert=8, rules=[["embed", ["fsdp", "expert"]]])
E, K, D, F = 16, 2, 8, 4  # 2 experts per device


def skewed_ids(rng: np.random.Generator, rows: int, length: int) -> np.ndarray:
    """Routing where expert 3 gets most tokens (slot 0 of 7 in 8), expert 5 and device 5's experts 10 and
    11 get none, and every token's two experts differ."""
    others = np.array([e for e in range(E) if e not in (3, 5, 10, 11)])
    ids = np.zeros((rows, length, K), np.int32)
    for r in range(rows):
        for t in range(length):
            first = 3 if rng.random() < 7 / 8 else rng.choice(others)
            ids[r, t] = [first, rng.choice(others[others != first])]
    return ids


def run(args, mesh_config, dispatch):
    cotangent = args[-1]

    def loss(x, w, wg, wu, wd):
        y = expert_ffn(x, args[1], w, wg, wu, wd, dispatch=dispatch)
        return jnp.sum(y * cotangent), y

    fn = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4), has_aux=True))
    inputs = (args[0], *args[2:6])
    if mesh_config is None:
        return fn(*inputs)
    mesh, rules = make_mesh(mesh_config), rules_from_config(mesh_config)
    with jax.set_mesh(mesh), use_rules(rules):
        return fn(*inputs)


@pytest.mark.parametrize(
    ("mesh_config", "rows", "dispatch", "chunked"),
    [
        (LONG, 2, "tokens", False),
        (LONG, 2, "experts", False),
        (LONG, 2, None, False),
        (ROWS, 8, "experts", False),
        (LONG, 2, "tokens", True),
        (LONG, 2, "experts", True),
    ],
    ids=[
        "row_split_tokens",
        "row_split_experts",
        "row_split_default",
        "rows_split_experts",
        "row_split_tokens_in_chunks",
        "row_split_experts_in_chunks",
    ],
)
def test_both_dispatches_equal_one_device_with_an_idle_expert_an_idle_device_and_one_expert_taking_most(
    mesh_config, rows, dispatch, chunked, monkeypatch
):
    rng = np.random.default_rng(7)
    length = 64
    ids = jnp.asarray(skewed_ids(rng, rows, length))
    counts = np.bincount(np.asarray(ids).ravel(), minlength=E)
    assert counts[5] == counts[10] == counts[11] == 0 and counts[3] > counts.sum() / 3
    x = jnp.asarray(rng.standard_normal((rows, length, D)), jnp.float32)
    w = jnp.asarray(rng.random((rows, length, K)), jnp.float32)
    wg, wu = (jnp.asarray(rng.standard_normal((E, D, F)), jnp.float32) for _ in range(2))
    wd = jnp.asarray(rng.standard_normal((E, F, D)), jnp.float32)
    cotangent = jnp.asarray(rng.standard_normal((rows, length, D)), jnp.float32)
    args = (x, ids, w, wg, wu, wd, cotangent)

    (_, y1), g1 = run(args, None, None)
    if chunked:  # each device's tokens in chunks of 7 (tokens: the row's 128) or 6 (experts: its own 16)
        monkeypatch.setattr(moe, "CHUNK_ELEMENTS", 7 * K * D)
        assert chunk_tokens(rows * length, K, D) == 7 and chunk_tokens(rows * length // 8, K, D) == 6
    (_, y8), g8 = run(args, mesh_config, dispatch)
    # Only float32 sums are re-ordered (over d, f and k terms; the weight gradients over up to all the
    # rows' tokens): at most ~m·u of each array's largest entry (u = 2^-24).
    u = 2.0**-24
    y1 = np.asarray(y1)
    np.testing.assert_allclose(np.asarray(y8), y1, atol=(D + F + K) * u * np.abs(y1).max(), rtol=0)
    for name, a, b in zip(("x", "weights", "w_gate", "w_up", "w_down"), g8, g1, strict=True):
        b = np.asarray(b)
        atol = (rows * length + D + F + K) * u * np.abs(b).max()
        np.testing.assert_allclose(np.asarray(a), b, atol=atol, rtol=0, err_msg=name)
    # The idle experts get exactly no gradient, on whichever device computed it.
    for grad in g8[2:]:
        assert not np.asarray(grad)[[5, 10, 11]].any()


def gradient_collectives(mesh_config, dispatch, length: int) -> tuple[list[str], int]:
    """(the collectives of the jaxpr as "type = op", the compiled temporaries per device) of the gradient
    of `expert_ffn` on one row of `length` tokens."""
    x = jnp.zeros((1, length, D), jnp.float32)
    ids = jnp.zeros((1, length, K), jnp.int32) + jnp.arange(K, dtype=jnp.int32)
    w = jnp.ones((1, length, K), jnp.float32)
    wg, wd = jnp.ones((E, D, F), jnp.float32), jnp.ones((E, F, D), jnp.float32)

    def loss(x, wg, wd):
        return jnp.sum(expert_ffn(x, ids, w, wg, wg, wd, dispatch=dispatch))

    grad = jax.grad(loss, argnums=(0, 1, 2))
    mesh, rules = make_mesh(mesh_config), rules_from_config(mesh_config)
    with jax.set_mesh(mesh), use_rules(rules):
        jaxpr = str(jax.make_jaxpr(grad)(x, wg, wd))
        temp = jax.jit(grad).lower(x, wg, wd).compile().memory_analysis().temp_size_in_bytes
    ops = []
    for line in jaxpr.splitlines():
        for op in ("all_gather", "reduce_scatter"):
            if f"= {op}[" in line:  # "name:type{V:...} = op["
                ops.append(f"{line.split(':', 1)[1].split('{')[0]} = {op}")
    return ops, int(temp)


def test_the_experts_dispatch_gathers_weights_and_sizes_its_buffers_by_the_devices_own_tokens():
    """On a row of 8,192 tokens split 8 ways the tokens dispatch gathers the row (all_gather of the tokens,
    reduce-scatter of the sums) and sizes its buffers by the row's 16,384 pairs; the experts dispatch
    gathers the 16 experts' weights (reduce-scattering their gradients) and sizes its buffers by the
    device's own 1,024 tokens: under a third of the tokens dispatch's temporaries (a buffer sized by the row
    would make them level; XLA:CPU's fusions differ by host: 3.7x less on an AMD EPYC, over 4x on a Xeon)."""
    tokens_ops, tokens_temp = gradient_collectives(LONG, "tokens", 8192)
    experts_ops, experts_temp = gradient_collectives(LONG, "experts", 8192)
    assert f"f32[1,8192,{D}] = all_gather" in tokens_ops and f"f32[1,1024,{D}] = reduce_scatter" in tokens_ops
    assert sorted(experts_ops) == sorted(
        [f"f32[{E},{D},{F}] = all_gather"] * 2
        + [f"f32[{E},{F},{D}] = all_gather"]
        + [f"f32[2,{D},{F}] = reduce_scatter"] * 2
        + [f"f32[2,{F},{D}] = reduce_scatter"]
    )
    assert experts_temp * 3 < tokens_temp, (experts_temp, tokens_temp)


def test_the_default_dispatch_moves_experts_once_the_groups_tokens_reach_their_weight_rows():
    assert default_dispatch(group_tokens=1000, expert_rows=1000, replicated=False) == "experts"
    assert default_dispatch(group_tokens=999, expert_rows=1000, replicated=False) == "tokens"
    # Tokens replicated over an expert axis: only the tokens dispatch (with its all-reduce) applies.
    assert default_dispatch(group_tokens=10**9, expert_rows=1000, replicated=True) == "tokens"
    assert DISPATCHES == ("tokens", "experts")


def test_an_unknown_dispatch_or_experts_over_replicated_tokens_is_refused_naming_it():
    x = jnp.zeros((2, 8, D), jnp.float32)
    ids = jnp.zeros((2, 8, K), jnp.int32) + jnp.arange(K, dtype=jnp.int32)
    w = jnp.ones((2, 8, K), jnp.float32)
    wg, wd = jnp.ones((E, D, F), jnp.float32), jnp.ones((E, F, D), jnp.float32)
    with pytest.raises(ValueError, match="'ragged'"):
        expert_ffn(x, ids, w, wg, wg, wd, dispatch="ragged")
    # 2 rows do not split over 8 devices and the row's tokens take no axis here: replicated over `expert`.
    mesh = make_mesh(ROWS)
    with jax.set_mesh(mesh), use_rules(rules_from_config(ROWS)):
        with pytest.raises(ValueError, match=r"\('expert',\) do not"):
            expert_ffn(x, ids, w, wg, wg, wd, dispatch="experts")
