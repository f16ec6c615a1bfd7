"""Blockwise packed attention against the dense oracle (reference.py), forward and gradients.

Tolerance (docs/style.md rule 22): float32, 1e-5 (the op is a softmax over at most a few hundred keys here
and a sum of the same terms in another order). Rows are random packings drawn per run: many segments,
segments of one token, padding at the end, lengths off the blocks; the seed is in every failure message.

The Pallas GPU kernel's cases are one class run twice (docs/style.md rule 17): in the Pallas interpreter
here, and compiled on a GPU by `tools/device_check.sh` (marker `gpu`, skipped without one).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from legorl_jax.kernels.attention import BlockSizes, attention, kernel, pallas_gpu, reference, xla

TOL = 1e-5


def fresh_seed() -> int:
    return int(np.random.SeedSequence().entropy % 2**32)


def packed_segments(rng, batch: int, length: int, *, padding: int) -> np.ndarray:
    """Segment ids 1, 2, ... of random lengths (some of one token), then `padding` zeros."""
    rows = []
    for _ in range(batch):
        ids, seg = [], 1
        while len(ids) < length - padding:
            size = int(rng.choice([1, 1, 2, 5, 17, 40]))
            ids += [seg] * size
            seg += 1
        rows.append(ids[: length - padding] + [0] * padding)
    return np.asarray(rows, np.int32)


def qkv(rng, batch, t, s, heads, kv_heads, h, dtype=jnp.float32):
    draw = lambda *shape: jnp.asarray(rng.standard_normal(shape), dtype)  # noqa: E731
    return draw(batch, t, heads, h), draw(batch, s, kv_heads, h), draw(batch, s, kv_heads, h)


def check_against_reference(seed, q, k, v, sizes, impl="xla", **ids):
    """Output and d/d q, k, v of the blockwise op (`impl`) equal the dense oracle's (autodiff) for a
    random cotangent on every query, padding included (both give padding output 0 and no gradient)."""
    scale = q.shape[-1] ** -0.5

    def ours(q, k, v):
        return attention(q, k, v, scale=scale, block_sizes=sizes, impl=impl, **ids)

    def oracle(q, k, v):
        return attention(q, k, v, scale=scale, impl="reference", **ids)

    out, ours_vjp = jax.vjp(ours, q, k, v)
    want, oracle_vjp = jax.vjp(oracle, q, k, v)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert np.isfinite(np.asarray(out)).all(), f"seed {seed}"
    np.testing.assert_allclose(out, want, rtol=TOL, atol=TOL, err_msg=f"output (seed {seed})")
    cotangent = jnp.asarray(np.random.default_rng(seed + 1).standard_normal(q.shape), q.dtype)
    for name, got, exp in zip("qkv", ours_vjp(cotangent), oracle_vjp(cotangent), strict=True):
        assert got.shape == exp.shape and got.dtype == exp.dtype, name
        np.testing.assert_allclose(got, exp, rtol=TOL, atol=TOL, err_msg=f"d{name} (seed {seed})")


@pytest.mark.parametrize("groups", [1, 2, 8])
@pytest.mark.parametrize(("length", "block_q", "block_k"), [(203, 32, 48), (96, 32, 32), (77, 512, 512)])
def test_blockwise_equals_the_dense_reference_with_gradients_on_packed_rows(groups, length, block_q, block_k):
    seed = fresh_seed()
    rng = np.random.default_rng(seed)
    seg = jnp.asarray(packed_segments(rng, 2, length, padding=length // 7))
    q, k, v = qkv(rng, 2, length, length, 2 * groups, 2, 16)
    check_against_reference(seed, q, k, v, BlockSizes(block_q, block_k), q_segment_ids=seg)


def test_padding_queries_get_zero_output_and_no_gradient():
    rng = np.random.default_rng(0)
    seg = jnp.asarray([[1, 1, 2, 0, 0]], jnp.int32)
    q, k, v = qkv(rng, 1, 5, 5, 2, 1, 8)
    out, vjp = jax.vjp(lambda q, k, v: attention(q, k, v, q_segment_ids=seg, scale=0.3), q, k, v)
    np.testing.assert_array_equal(out[0, 3:], 0.0)
    d_q, d_k, d_v = vjp(jnp.ones_like(out))
    np.testing.assert_array_equal(d_q[0, 3:], 0.0)
    np.testing.assert_array_equal(d_k[0, 3:], 0.0)
    np.testing.assert_array_equal(d_v[0, 3:], 0.0)


def test_any_token_order_follows_the_indices_not_the_array_order():
    """The load-balanced context-parallel layout: queries in a shuffled order, keys in row order; the rule
    reads q_index, so the result is the natural-order result permuted."""
    seed = fresh_seed()
    rng = np.random.default_rng(seed)
    length = 150
    seg = jnp.asarray(packed_segments(rng, 1, length, padding=9))
    q, k, v = qkv(rng, 1, length, length, 4, 2, 16)
    order = jnp.asarray(rng.permutation(length))
    index = jnp.arange(length, dtype=jnp.int32)[None]
    ids = dict(q_segment_ids=seg[:, order], kv_segment_ids=seg, q_index=index[:, order], kv_index=index)
    check_against_reference(seed, q[:, order], k, v, BlockSizes(32, 32), **ids)
    natural = attention(q, k, v, q_segment_ids=seg, scale=0.25, impl="reference")
    shuffled = attention(q[:, order], k, v, scale=0.25, impl="xla", block_sizes=BlockSizes(32, 32), **ids)
    np.testing.assert_allclose(shuffled, natural[:, order], rtol=TOL, atol=TOL, err_msg=f"seed {seed}")


def test_a_prefill_chunk_against_a_cache_sees_written_entries_at_or_before_its_positions():
    """Chunked prefill: 40 new tokens at positions 60..99 against a 128-entry cache slot of which 0..99
    are written (segment 1) and the rest is stale (segment 0)."""
    seed = fresh_seed()
    rng = np.random.default_rng(seed)
    q, k, v = qkv(rng, 1, 40, 128, 4, 1, 16)
    positions = jnp.arange(60, 100, dtype=jnp.int32)[None]
    written = (jnp.arange(128) < 100).astype(jnp.int32)[None]
    ids = dict(
        q_segment_ids=jnp.ones((1, 40), jnp.int32),
        kv_segment_ids=written,
        q_index=positions,
        kv_index=jnp.arange(128, dtype=jnp.int32)[None],
    )
    check_against_reference(seed, q, k, v, BlockSizes(16, 32), **ids)


def test_fully_masked_block_pairs_are_not_visited():
    """One causal segment in 4 query x 4 key blocks: the 6 pairs above the diagonal are off the table,
    and two segments that each fill two blocks leave the cross-segment pairs off too."""
    one = jnp.ones((1, 64), jnp.int32)
    index = jnp.arange(64, dtype=jnp.int32)[None]
    table = np.asarray(xla.block_visibility(one, one, index, index, 16, 16))
    np.testing.assert_array_equal(table, np.tril(np.ones((4, 4), bool)))
    two = jnp.asarray([[1] * 32 + [2] * 32], jnp.int32)
    table = np.asarray(xla.block_visibility(two, two, index, index, 16, 16))
    np.testing.assert_array_equal(table, np.kron(np.eye(2, dtype=bool), np.tril(np.ones((2, 2), bool))))
    lo, hi = xla.visible_ranges(jnp.asarray(table))
    assert lo.tolist() == [0, 0, 2, 2] and hi.tolist() == [1, 2, 3, 4]


@pytest.mark.parametrize("with_grad", [False, True], ids=["forward", "gradient"])
def test_compiled_attention_memory_is_linear_in_the_row(with_grad):
    """XLA's compiled temporaries: at T = 8192 under 1/8 of one float32 [T, T] matrix (the dense oracle
    holds several per head), and doubling the row from 4096 at most doubles them, at fixed blocks of 256
    (quadratic memory would quadruple; measured 9.3 -> 16.2 MiB forward)."""

    def temporaries(t: int) -> int:
        args = [jax.ShapeDtypeStruct((1, t, heads, 32), jnp.float32) for heads in (4, 2, 2)]
        seg = jax.ShapeDtypeStruct((1, t), jnp.int32)

        def fn(q, k, v, seg):
            blocks = BlockSizes(256, 256)
            return attention(q, k, v, q_segment_ids=seg, scale=0.2, impl="xla", block_sizes=blocks).sum()

        compiled = jax.jit(jax.grad(fn, argnums=(0, 1, 2)) if with_grad else fn).lower(*args, seg).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    short, long = temporaries(4096), temporaries(8192)
    assert long < 8192 * 8192 * 4 // 8, f"{long / 2**20:.1f} MiB at 8192"
    assert long < 2.1 * short, f"{short / 2**20:.1f} -> {long / 2**20:.1f} MiB"


def test_auto_is_blockwise_xla_on_cpu():
    rng = np.random.default_rng(1)
    seg = jnp.ones((1, 8), jnp.int32)
    q, k, v = qkv(rng, 1, 8, 8, 2, 2, 8)
    auto = attention(q, k, v, q_segment_ids=seg, scale=0.5)
    blockwise = attention(q, k, v, q_segment_ids=seg, scale=0.5, impl="xla")
    np.testing.assert_array_equal(auto, blockwise)


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"q": jnp.zeros((1, 4, 3, 8))}, ValueError, "not a multiple of kv heads 2"),
        ({"q": jnp.zeros((4, 4, 8))}, ValueError, r"q\.shape=\(4, 4, 8\)"),
        ({"k": jnp.zeros((1, 4, 2, 8), jnp.bfloat16)}, TypeError, "bfloat16"),
        ({"q_segment_ids": jnp.ones((1, 5), jnp.int32)}, ValueError, r"got \(1, 5\)"),
        ({"q_segment_ids": jnp.ones((1, 4))}, TypeError, "float32"),
        ({"scale": -1.0}, ValueError, "-1.0"),
        ({"impl": "flash"}, ValueError, "'flash'"),
        ({"impl": "splash", "q_index": jnp.zeros((1, 4), jnp.int32)}, ValueError, "natural layout"),
        ({"impl": "pallas", "kv_index": jnp.zeros((1, 4), jnp.int32)}, ValueError, "natural layout"),
        ({"impl": "pallas", "block_sizes": BlockSizes(16, 16)}, TypeError, "pallas_gpu.BlockSizes"),
        ({"impl": "splash", "block_sizes": BlockSizes(16, 16)}, ValueError, "impl='splash'"),
    ],
)
def test_bad_input_raises_an_error_naming_the_received_value(changes, error, message):
    args = {
        "q": jnp.zeros((1, 4, 4, 8)),
        "k": jnp.zeros((1, 4, 2, 8)),
        "v": jnp.zeros((1, 4, 2, 8)),
        "q_segment_ids": jnp.ones((1, 4), jnp.int32),
        "scale": 0.5,
    } | changes
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    with pytest.raises(error, match=message):
        attention(q, k, v, **args)


def test_block_sizes_must_be_positive():
    with pytest.raises(ValueError, match="block_q"):
        BlockSizes(block_q=0)


@pytest.mark.parametrize(
    ("changes", "message"),
    [({"block_q": 48}, "block_q must be a positive power of two, got 48"), ({"num_warps": 0}, "num_warps")],
)
def test_pallas_block_sizes_name_the_bad_value(changes, message):
    with pytest.raises(ValueError, match=message):
        pallas_gpu.BlockSizes(**changes)


def test_pallas_blocks_under_16_are_refused_for_triton_but_run_interpreted():
    sizes = pallas_gpu.BlockSizes(block_q=16, block_k=8)
    sizes.check(compiled_for_gpu=False)
    with pytest.raises(ValueError, match=r"at least 16, got \{'block_k': 8\}"):
        sizes.check(compiled_for_gpu=True)


def test_pallas_loops_visit_only_the_blocks_a_segment_and_the_diagonal_allow():
    """Two segments of 32 tokens in blocks of 16: query block i loops over key blocks [lo, hi) of its own
    segment up to the diagonal, and each key block's dkv loop over the query blocks that see it."""
    q = jnp.zeros((1, 64, 2, 16))
    k = jnp.zeros((1, 64, 1, 16))
    seg = jnp.asarray([[1] * 32 + [2] * 32], jnp.int32)
    p = pallas_gpu._prepare(q, k, k, seg, seg, 0.25, pallas_gpu.BlockSizes(16, 16), interpret=True)
    assert p.key_lo.tolist() == [0, 0, 2, 2] and p.key_hi.tolist() == [1, 2, 3, 4]
    assert p.query_lo.tolist() == [0, 1, 2, 3] and p.query_hi.tolist() == [2, 2, 4, 4]


class PallasAttentionCases:
    """Our Pallas (Triton) kernel against the dense oracle, forward and gradients; subclasses choose
    interpreted (CPU: impl='pallas' runs the Pallas interpreter off a GPU) or compiled (GPU).

    Interpreted rows are short (the interpreter runs every grid step in Python) with key blocks smaller
    than query blocks, so the causal bound cuts inside a query block; compiled rows are longer, with
    Triton's smallest tiles."""

    interpret: bool

    def case(self) -> tuple[int, pallas_gpu.BlockSizes]:
        if self.interpret:
            return 45, pallas_gpu.BlockSizes(block_q=16, block_k=8)
        return 333, pallas_gpu.BlockSizes(block_q=32, block_k=16)

    @pytest.mark.parametrize("groups", [1, 2, 8])
    def test_pallas_equals_the_dense_reference_with_gradients_on_packed_rows(self, groups):
        seed = fresh_seed()
        rng = np.random.default_rng(seed)
        length, sizes = self.case()
        seg = jnp.asarray(packed_segments(rng, 1, length, padding=length // 7))
        q, k, v = qkv(rng, 1, length, length, 2 * groups, 2, 16)
        check_against_reference(seed, q, k, v, sizes, impl="pallas", q_segment_ids=seg)

    @pytest.mark.slow  # ~30 s interpreted on the shared 2-core box
    def test_pallas_pads_a_head_dim_that_is_not_a_power_of_two_and_batches_rows(self):
        seed = fresh_seed()
        rng = np.random.default_rng(seed)
        length, sizes = self.case()
        seg = jnp.asarray(packed_segments(rng, 2, length, padding=3))
        q, k, v = qkv(rng, 2, length, length, 2, 1, 24)
        check_against_reference(seed, q, k, v, sizes, impl="pallas", q_segment_ids=seg)

    def test_pallas_in_bfloat16_is_close_to_the_float32_oracle(self):
        """bf16 inputs (training's dtype): the output is within bf16 rounding (2e-2) of the oracle in
        float32 on the same (rounded) inputs; real tokens only carry values, padding is 0 on both."""
        seed = fresh_seed()
        rng = np.random.default_rng(seed)
        length, sizes = self.case()
        seg = jnp.asarray(packed_segments(rng, 1, length, padding=4))
        q, k, v = qkv(rng, 1, length, length, 4, 2, 16, dtype=jnp.bfloat16)
        got = attention(q, k, v, q_segment_ids=seg, scale=0.25, impl="pallas", block_sizes=sizes)
        f32 = [x.astype(jnp.float32) for x in (q, k, v)]
        want = attention(*f32, q_segment_ids=seg, scale=0.25, impl="reference")
        assert got.dtype == jnp.bfloat16
        np.testing.assert_allclose(
            got.astype(jnp.float32), want, rtol=2e-2, atol=2e-2, err_msg=f"seed {seed}"
        )


class TestPallasAttentionInterpreted(PallasAttentionCases):
    interpret = True


@pytest.mark.gpu
class TestPallasAttentionCompiled(PallasAttentionCases):
    interpret = False

    @pytest.fixture(autouse=True)
    def _needs_gpu(self):
        if jax.default_backend() != "gpu":
            pytest.skip(f"needs a GPU; the backend is {jax.default_backend()!r}")

    def test_auto_is_the_pallas_kernel_on_gpu_for_natural_rows_and_xla_for_other_orders(self):
        rng = np.random.default_rng(2)
        seg = jnp.ones((1, 64), jnp.int32)
        q, k, v = qkv(rng, 1, 64, 64, 2, 2, 16)
        auto = attention(q, k, v, q_segment_ids=seg, scale=0.5)
        pallas = attention(q, k, v, q_segment_ids=seg, scale=0.5, impl="pallas")
        np.testing.assert_array_equal(auto, pallas)
        index = jnp.arange(64, dtype=jnp.int32)[None, ::-1]
        ids = dict(q_segment_ids=seg, q_index=index, kv_index=index)
        auto = attention(q, k, v, scale=0.5, **ids)
        np.testing.assert_array_equal(auto, attention(q, k, v, scale=0.5, impl="xla", **ids))


@pytest.mark.parametrize("device_kind", ["TPU v5 lite", "TPU v5"], ids=["tpu_v5e", "tpu_v5p"])
def test_splash_attention_lowers_for_tpu_forward_and_backward(device_kind):
    """Lowering only (compiling needs the TPU): splash's forward, dq and dkv kernels pass Mosaic's rules
    for a GQA row of 1000 tokens (padded to 1024) with segment ids."""
    from jax.sharding import AbstractDevice, AbstractMesh, use_abstract_mesh

    b, t, n, kv_heads, h = 1, 1000, 8, 2, 128
    args = [jax.ShapeDtypeStruct((b, t, heads, h), jnp.bfloat16) for heads in (n, kv_heads, kv_heads)]
    seg = jax.ShapeDtypeStruct((b, t), jnp.int32)

    def loss(q, k, v, seg):
        return kernel.splash_attention(q, k, v, seg, 0.1).astype(jnp.float32).sum()

    target = AbstractDevice(device_kind=device_kind, num_cores=1, platform="tpu")
    with use_abstract_mesh(AbstractMesh((1,), ("x",), abstract_device=target)):
        traced = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).trace(*args, seg)
        lowered = traced.lower(lowering_platforms=("tpu",))
    text = lowered.as_text()
    assert text.count("tpu_custom_call") >= 3  # forward (for the residuals), dq, dkv


def test_blockwise_xla_lowers_for_an_h200():
    """On a GPU the blockwise XLA op runs every row not in natural order (context parallelism, prefill
    against a cache; see ops.py): its forward and backward lower for CUDA."""
    from jax.sharding import AbstractDevice, AbstractMesh, use_abstract_mesh

    args = [jax.ShapeDtypeStruct((1, 2048, heads, 128), jnp.bfloat16) for heads in (8, 2, 2)]
    seg = jax.ShapeDtypeStruct((1, 2048), jnp.int32)

    def loss(q, k, v, seg):
        return attention(q, k, v, q_segment_ids=seg, scale=0.1, impl="xla").astype(jnp.float32).sum()

    target = AbstractDevice(device_kind="NVIDIA H200", num_cores=1, platform="gpu")
    with use_abstract_mesh(AbstractMesh((1,), ("x",), abstract_device=target)):
        traced = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).trace(*args, seg)
        lowered = traced.lower(lowering_platforms=("cuda",))
    assert "stablehlo.while" in lowered.as_text()


def test_splash_matches_the_reference_in_the_interpreter():
    """Splash's numerics on our rule, in the Pallas interpreter (slow, so one small row): real tokens equal
    the oracle; padding outputs are splash's own (documented) and not compared."""
    seed = fresh_seed()
    rng = np.random.default_rng(seed)
    t = 200
    seg = jnp.asarray(packed_segments(rng, 1, t, padding=20))
    q, k, v = qkv(rng, 1, t, t, 4, 2, 128)
    got = kernel.splash_attention(q, k, v, seg, 0.1, interpret=True)
    index = jnp.arange(t, dtype=jnp.int32)[None]
    want = reference.attention(q, k, v, reference.visibility(seg, seg, index, index), 0.1)
    real = np.asarray(seg[0] > 0)
    np.testing.assert_allclose(got[0, real], want[0, real], rtol=1e-4, atol=1e-4, err_msg=f"seed {seed}")


@pytest.mark.filterwarnings("ignore:The Pallas Triton backend is deprecated:DeprecationWarning")
def test_pallas_attention_lowers_for_an_h200_forward_and_backward():
    """Lowering only (compiling needs the GPU): the forward (for the residuals), dq and dkv kernels pass
    Pallas' Triton lowering for a GQA row of 3000 tokens (not a multiple of the blocks) with segment ids,
    with the default blocks, and the BlockSizes' Triton knobs reach Triton."""
    from jax.sharding import AbstractDevice, AbstractMesh, use_abstract_mesh

    args = [jax.ShapeDtypeStruct((1, 3000, heads, 128), jnp.bfloat16) for heads in (8, 2, 2)]
    seg = jax.ShapeDtypeStruct((1, 3000), jnp.int32)
    sizes = pallas_gpu.BlockSizes()

    def loss(q, k, v, seg):
        out = pallas_gpu.pallas_attention(q, k, v, seg, seg, 0.1, block_sizes=sizes)
        return out.astype(jnp.float32).sum()

    target = AbstractDevice(device_kind="NVIDIA H200", num_cores=1, platform="gpu")
    with use_abstract_mesh(AbstractMesh((1,), ("x",), abstract_device=target)):
        traced = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).trace(*args, seg)
        lowered = traced.lower(lowering_platforms=("cuda",))
    text = lowered.as_text()
    assert text.count("__gpu$xla.gpu.triton") == 3  # forward, dq, dkv
    assert text.count(f"num_warps = {sizes.num_warps}") == 3
