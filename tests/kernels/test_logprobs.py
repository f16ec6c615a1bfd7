"""token_logprobs against a float64 numpy oracle, its gradients against autodiff of the jnp reference.

Tolerance policy (docs/style.md rule 22): the op is a block (a matmul over D and a log-sum-exp over V), so
float32 is held to 1e-4 and bf16 to 2e-2. Every comparison first asserts every element is finite: NaN never
passes, and the Pallas interpreter initialises outputs to NaN, so an element no grid step wrote fails here.
Inputs are fresh random draws each run; the seed is in every failure message.

The Pallas cases are one base class run twice (docs/style.md rule 17): in the interpreter here, and compiled
on a GPU by `tools/device_check.sh` (marker `gpu`, skipped without one).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from legorl_jax.kernels.logprobs import BlockSizes, ChunkSizes, ops, reference, token_logprobs

QWEN_VOCAB = 151_936
TOLERANCE = {jnp.float32: 1e-4, jnp.bfloat16: 2e-2}


def fresh_seed() -> int:
    return int(np.random.SeedSequence().entropy % 2**32)


def random_inputs(seed: int, n: int, d: int, v: int, dtype):
    """hidden, lm_head, targets with logits of standard deviation ~3 (a realistically peaked softmax)."""
    rng = np.random.default_rng(seed)
    hidden = jnp.asarray(rng.standard_normal((n, d)), dtype)
    lm_head = jnp.asarray(rng.standard_normal((d, v)) * 3 / np.sqrt(d), dtype)
    targets = jnp.asarray(rng.integers(0, v, n), jnp.int32)
    return hidden, lm_head, targets


def float64_logprobs(hidden, lm_head, targets, temperature: float):
    """The independent oracle: numpy float64 on the (possibly bf16-rounded) input values."""
    logits = np.asarray(hidden, np.float64) @ np.asarray(lm_head, np.float64) / temperature
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    picked = log_probs[np.arange(len(targets)), np.asarray(targets)]
    return picked, -(np.exp(log_probs) * log_probs).sum(axis=1)


def float64_gradients(hidden, lm_head, targets, temperature: float, g):
    """d(sum g * logprobs)/d hidden and /d lm_head, numpy float64, and how far each may honestly be off.

    d(logits) = (onehot - softmax) * g / T is rounded to the inputs' dtype before the two matmuls, as the
    kernel multiplies bf16 by bf16 (kernel.py docstring); the matmuls themselves run in float64. The kernel
    rounds its float32 d(logits), not these float64 ones: where the exact value lies within float32 noise
    (1e-4 relative) of a rounding midpoint, the two may round to neighbouring values, one ulp apart. The
    returned slack per gradient element is what those ambiguous terms can move it by (their ulp times the
    other matmul operand, summed); it is zero for float32 inputs.
    """
    h, w = np.asarray(hidden, np.float64), np.asarray(lm_head, np.float64)
    logits = h @ w / temperature
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    exact = -probs
    exact[np.arange(len(targets)), np.asarray(targets)] += 1.0
    exact *= np.asarray(g, np.float64)[:, None] / temperature
    d_logits = np.asarray(jnp.asarray(exact, hidden.dtype), np.float64)
    slack = np.zeros_like(d_logits)
    if hidden.dtype == jnp.bfloat16:
        ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(d_logits), 1e-30))) - 7)  # bf16: 8 significant bits
        to_midpoint = np.minimum(np.abs(exact - (d_logits + ulp / 2)), np.abs(exact - (d_logits - ulp / 2)))
        slack = np.where(to_midpoint <= 1e-4 * np.abs(exact), ulp, 0.0)
    return (d_logits @ w.T, h.T @ d_logits), (slack @ np.abs(w).T, np.abs(h).T @ slack)


def assert_close(actual, expected, dtype, seed: int, what: str) -> None:
    actual = np.asarray(jnp.asarray(actual, jnp.float32), np.float64)
    assert np.isfinite(actual).all(), (
        f"{what}: {np.size(actual) - np.isfinite(actual).sum()} non-finite (seed {seed})"
    )
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(
        actual, np.asarray(expected, np.float64), rtol=tol, atol=tol, err_msg=f"{what} (seed {seed})"
    )


def check_against_oracles(seed, n, d, v, dtype, temperature, with_entropy, **kwargs):
    """Outputs vs float64 numpy; d/d hidden and d/d lm_head vs jax autodiff of the reference."""
    hidden, lm_head, targets = random_inputs(seed, n, d, v, dtype)

    def ours(h, w):
        return token_logprobs(h, w, targets, temperature=temperature, return_entropy=with_entropy, **kwargs)

    def oracle(h, w):
        return reference.token_logprobs(h, w, targets, temperature=temperature, return_entropy=with_entropy)

    outputs, ours_vjp = jax.vjp(ours, hidden, lm_head)
    _, oracle_vjp = jax.vjp(oracle, hidden, lm_head)
    expected_lp, expected_ent = float64_logprobs(hidden, lm_head, targets, temperature)
    rng = np.random.default_rng(seed + 1)
    g_lp = jnp.asarray(rng.standard_normal(n), jnp.float32)
    if with_entropy:
        logprobs, entropy = outputs
        assert_close(entropy, expected_ent, dtype, seed, "entropy")
        cotangent = (g_lp, jnp.asarray(rng.standard_normal(n), jnp.float32))
    else:
        logprobs, cotangent = outputs, g_lp
    assert logprobs.dtype == jnp.float32 and logprobs.shape == (n,)
    assert_close(logprobs, expected_lp, dtype, seed, "logprobs")
    for name, got, want in zip(
        ("d_hidden", "d_lm_head"), ours_vjp(cotangent), oracle_vjp(cotangent), strict=True
    ):
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert_close(got, want, dtype, seed, name)


# ----------------------------------------------------------------------------------------------------
# Pallas: one class, interpreted here and compiled on an accelerator
# ----------------------------------------------------------------------------------------------------


class PallasKernelCases:
    """The Pallas kernel's numerics; subclasses choose interpret mode."""

    interpret: bool

    def block_sizes(self) -> BlockSizes:
        if self.interpret:
            # Ragged everywhere: the last forward split, vocabulary split and token split are all short.
            return BlockSizes(
                block_n=16,
                block_v=32,
                block_d=16,
                forward_split_v=64,
                backward_split_v=96,
                backward_split_n=32,
            )
        return BlockSizes(
            block_n=16, block_v=32, block_d=16, forward_split_v=64
        )  # Triton: reductions in-kernel

    def run(self, n, d, v, dtype, temperature, with_entropy):
        check_against_oracles(
            fresh_seed(),
            n,
            d,
            v,
            dtype,
            temperature,
            with_entropy,
            impl="pallas",
            block_sizes=self.block_sizes(),
            interpret=self.interpret,
        )

    def test_float32_logprobs_entropy_and_gradients_on_sizes_off_the_blocks(self):
        self.run(n=37, d=32, v=300, dtype=jnp.float32, temperature=0.7, with_entropy=True)

    def test_bf16_logprobs_and_gradients_accumulate_in_float32(self):
        self.run(n=21, d=48, v=200, dtype=jnp.bfloat16, temperature=1.3, with_entropy=False)
        # The bf16 tolerance above (2e-2) would also pass a bf16 accumulator. Held here to what float32
        # accumulation of bf16 inputs gives: log-probs (float32) to the float32 tolerance of the float64
        # oracle on the same bf16 values, gradients (bf16) to within one bf16 rounding of it. Logits of
        # size ~3 rounded to bf16 anywhere on the way are off by ~1e-2.
        seed = fresh_seed()
        n, temperature = 21, 1.3
        hidden, lm_head, targets = random_inputs(seed, n, 48, 200, jnp.bfloat16)

        def ours(h, w):
            return token_logprobs(
                h, w, targets, temperature=temperature, impl="pallas",
                block_sizes=self.block_sizes(), interpret=self.interpret,
            )  # fmt: skip

        logprobs, vjp = jax.vjp(ours, hidden, lm_head)
        expected_lp, _ = float64_logprobs(hidden, lm_head, targets, temperature)
        assert_close(logprobs, expected_lp, jnp.float32, seed, "bf16-input logprobs at float32 tolerance")
        g = np.random.default_rng(seed + 1).standard_normal(n)
        d_hidden, d_lm_head = vjp(jnp.asarray(g, jnp.float32))
        (want_hidden, want_lm_head), (slack_hidden, slack_lm_head) = float64_gradients(
            hidden, lm_head, targets, temperature, g
        )
        for name, got, want, slack in (
            ("d_hidden", d_hidden, want_hidden, slack_hidden),
            ("d_lm_head", d_lm_head, want_lm_head, slack_lm_head),
        ):
            assert got.dtype == jnp.bfloat16, name
            got = np.asarray(jnp.asarray(got, jnp.float32), np.float64)
            # One rounding of the float32 sum to bf16 (half an ulp, 2**-9), plus the terms whose d(logits)
            # the kernel may round the other way (`float64_gradients`; seed 2572638342 has two elements
            # past the rounding alone for that reason); a running sum rounded to bf16 tile by tile drifts
            # past it.
            bound = 2**-8 * np.abs(want) + 1e-5 * np.abs(want).max() + slack
            excess = np.abs(got - want) - bound
            worst = np.unravel_index(np.argmax(excess), excess.shape)
            assert (excess <= 0).all(), (
                f"{name} (seed {seed}): {int((excess > 0).sum())} of {excess.size} elements past the bound; "
                f"worst at {worst}: got {got[worst]}, want {want[worst]}, bound {bound[worst]:.3g}"
            )

    def test_real_vocabulary_size_at_tiny_n(self):
        seed = fresh_seed()
        hidden, lm_head, targets = random_inputs(seed, 3, 16, QWEN_VOCAB, jnp.float32)
        sizes = BlockSizes(block_n=16, block_v=1024, block_d=16, forward_split_v=16384)
        logprobs, entropy = token_logprobs(
            hidden,
            lm_head,
            targets,
            temperature=0.9,
            return_entropy=True,
            impl="pallas",
            block_sizes=sizes,
            interpret=self.interpret,
        )
        expected_lp, expected_ent = float64_logprobs(hidden, lm_head, targets, 0.9)
        assert_close(logprobs, expected_lp, jnp.float32, seed, "logprobs")
        assert_close(entropy, expected_ent, jnp.float32, seed, "entropy")


class TestPallasKernelInterpreted(PallasKernelCases):
    interpret = True


@pytest.mark.gpu
class TestPallasKernelCompiled(PallasKernelCases):
    interpret = False

    @pytest.fixture(autouse=True)
    def _needs_gpu(self):
        if jax.default_backend() != "gpu":
            pytest.skip(f"needs a GPU; the backend is {jax.default_backend()!r}")


@pytest.mark.parametrize(
    ("platform", "device_kind", "custom_call"),
    [("cuda", "NVIDIA H200", "__gpu$xla.gpu.triton"), ("tpu", "TPU v5 lite", "tpu_custom_call")],
    ids=["triton_h200", "mosaic_tpu_v5e"],
)
@pytest.mark.filterwarnings("ignore:The Pallas Triton backend is deprecated:DeprecationWarning")
def test_pallas_kernels_lower_for_gpu_and_tpu_with_the_default_blocks(platform, device_kind, custom_call):
    """Lowering only (compiling needs the device): every kernel body and BlockSpec passes the backend's
    rules."""
    from jax.sharding import AbstractDevice, AbstractMesh, use_abstract_mesh

    from legorl_jax.kernels.logprobs import kernel, online_softmax

    n, d, v = 300, 1024, QWEN_VOCAB
    backend = "gpu" if platform == "cuda" else platform
    sizes = BlockSizes.for_platform(backend, d)
    sizes.check(d, compiled_for_gpu=backend == "gpu")
    common = {"inv_temperature": 1.25, "sizes": sizes, "platform": backend, "interpret": False}

    def forward_and_backward(h, w, t):
        result = kernel.forward(h, w, t, with_entropy=True, **common)
        rows = online_softmax.BackwardRows(t, result.lse, result.mean_logit, result.lse, result.entropy)
        return kernel.backward(h, w, rows, **common)

    args = (
        jax.ShapeDtypeStruct((n, d), jnp.bfloat16),
        jax.ShapeDtypeStruct((d, v), jnp.bfloat16),
        jax.ShapeDtypeStruct((n,), jnp.int32),
    )
    target = AbstractDevice(device_kind=device_kind, num_cores=1, platform=backend)
    with use_abstract_mesh(AbstractMesh((1,), ("x",), abstract_device=target)):
        lowered = jax.jit(forward_and_backward).trace(*args).lower(lowering_platforms=(platform,))
    text = lowered.as_text()
    assert text.count(custom_call) == 3  # forward, d_hidden, d_lm_head
    if platform == "cuda":
        assert text.count(f"num_warps = {sizes.num_warps}") == 3  # the BlockSizes' Triton knobs reach Triton


def test_interpreter_poisons_outputs_so_an_unwritten_element_is_caught():
    """What the interpreted cases rely on: a block no grid step writes comes back NaN, and fails the
    checks."""
    from jax.experimental import pallas as pl

    def write_first_block_only(x_ref, o_ref):
        @pl.when(pl.program_id(0) == 0)
        def _():
            o_ref[...] = x_ref[...]

    out = pl.pallas_call(
        write_first_block_only,
        grid=(2,),
        in_specs=[pl.BlockSpec((8,), lambda i: (i,))],
        out_specs=pl.BlockSpec((8,), lambda i: (i,)),
        out_shape=jax.ShapeDtypeStruct((16,), jnp.float32),
        interpret=True,
    )(jnp.ones(16, jnp.float32))
    assert np.isfinite(np.asarray(out[:8])).all() and np.isnan(np.asarray(out[8:])).all()


# ----------------------------------------------------------------------------------------------------
# The chunked XLA path
# ----------------------------------------------------------------------------------------------------


def test_xla_path_matches_float64_and_autodiff_at_the_real_vocabulary_size():
    # 151,936 = 9 chunks of 16,384 + a clamped tenth; 13 tokens = 3 chunks of 5 (padded).
    check_against_oracles(
        fresh_seed(),
        n=13,
        d=16,
        v=QWEN_VOCAB,
        dtype=jnp.float32,
        temperature=0.8,
        with_entropy=True,
        impl="xla",
        block_sizes=ChunkSizes(chunk_n=5, chunk_v=16384),
    )


def test_xla_path_bf16_on_sizes_off_the_chunks():
    check_against_oracles(
        fresh_seed(),
        n=19,
        d=24,
        v=333,
        dtype=jnp.bfloat16,
        temperature=1.5,
        with_entropy=False,
        impl="xla",
        block_sizes=ChunkSizes(chunk_n=8, chunk_v=64),
    )


def test_xla_path_on_an_auto_sharded_mesh_matches_the_unsharded_result():
    """The project's meshes use Auto axes (legorl_jax.model.sharding): tokens on data, vocabulary on
    tensor."""
    from jax.sharding import AxisType, NamedSharding, PartitionSpec

    seed = fresh_seed()
    hidden, lm_head, targets = random_inputs(seed, 64, 16, 1000, jnp.float32)
    mesh = jax.make_mesh((4, 2), ("data", "tensor"), axis_types=(AxisType.Auto,) * 2)
    placed = [
        jax.device_put(x, NamedSharding(mesh, spec))
        for x, spec in (
            (hidden, PartitionSpec("data", None)),
            (lm_head, PartitionSpec(None, "tensor")),
            (targets, PartitionSpec("data")),
        )
    ]

    @jax.jit
    def value_and_grads(h, w, t):
        def loss(h, w):
            logprobs, entropy = token_logprobs(
                h, w, t, return_entropy=True, impl="xla", block_sizes=ChunkSizes(chunk_n=16, chunk_v=128)
            )
            return jnp.sum(logprobs) + jnp.sum(entropy)

        return jax.value_and_grad(loss, argnums=(0, 1))(h, w)

    single, sharded = value_and_grads(hidden, lm_head, targets), value_and_grads(*placed)
    for name, got, want in zip(
        ("loss", "d_hidden", "d_lm_head"), jax.tree.leaves(sharded), jax.tree.leaves(single), strict=True
    ):
        assert_close(got, want, jnp.float32, seed, name)


def compiled(fn, n, d, v):
    args = (
        jax.ShapeDtypeStruct((n, d), jnp.float32),
        jax.ShapeDtypeStruct((d, v), jnp.float32),
        jax.ShapeDtypeStruct((n,), jnp.int32),
    )
    return jax.jit(fn).lower(*args).compile()


@pytest.mark.parametrize("with_grad", [False, True], ids=["forward", "forward_and_backward"])
def test_xla_path_compiles_without_any_n_by_v_buffer(with_grad):
    n, d, v = 512, 64, 32_000
    logits_bytes = n * v * 4

    def program(impl, block_sizes):
        def loss(h, w, t):
            lp, ent = token_logprobs(h, w, t, return_entropy=True, impl=impl, block_sizes=block_sizes)
            return jnp.sum(lp) + jnp.sum(ent)

        if with_grad:
            return lambda h, w, t: jax.grad(loss, argnums=(0, 1))(h, w, t)
        return loss

    chunked = compiled(program("xla", ChunkSizes(chunk_n=128, chunk_v=1024)), n, d, v)
    materialised = compiled(program("reference", None), n, d, v)
    # The measurement sees a materialised [N, V] (else this test could not fail) ...
    assert materialised.memory_analysis().temp_size_in_bytes >= logits_bytes
    assert f"f32[{n},{v}]" in materialised.as_text()
    # ... and the chunked path holds at most one [128, 1024] chunk's worth of temporaries.
    assert chunked.memory_analysis().temp_size_in_bytes < 0.1 * logits_bytes
    assert f"[{n},{v}]" not in chunked.as_text()


# ----------------------------------------------------------------------------------------------------
# The public entry point
# ----------------------------------------------------------------------------------------------------


def test_auto_runs_the_xla_path_on_cpu_and_pallas_where_it_compiles():
    assert [ops._resolve_impl("auto", p) for p in ("cpu", "gpu", "tpu")] == ["xla", "pallas", "pallas"]
    hidden, lm_head, targets = random_inputs(fresh_seed(), 6, 8, 50, jnp.float32)
    auto = token_logprobs(hidden, lm_head, targets)
    np.testing.assert_array_equal(auto, token_logprobs(hidden, lm_head, targets, impl="xla"))


def test_out_of_range_target_under_jit_gives_nan_not_a_wrapped_index():
    hidden, lm_head, _ = random_inputs(fresh_seed(), 4, 8, 50, jnp.float32)
    targets = jnp.asarray([0, 49, 50, -1], jnp.int32)
    for impl in ("xla", "reference"):
        logprobs = jax.jit(lambda t, impl=impl: token_logprobs(hidden, lm_head, t, impl=impl))(targets)
        assert np.isfinite(logprobs[:2]).all() and np.isnan(logprobs[2:]).all(), impl


def test_entropy_is_returned_only_when_asked_for():
    hidden, lm_head, targets = random_inputs(fresh_seed(), 3, 8, 20, jnp.float32)
    assert isinstance(token_logprobs(hidden, lm_head, targets), jax.Array)
    logprobs, entropy = token_logprobs(hidden, lm_head, targets, return_entropy=True)
    assert logprobs.shape == entropy.shape == (3,) and bool((entropy > 0).all())


def _good():
    return jnp.zeros((4, 8), jnp.float32), jnp.zeros((8, 16), jnp.float32), jnp.zeros((4,), jnp.int32)


def _call(**changes):
    hidden, lm_head, targets = _good()
    arrays = {"hidden": hidden, "lm_head": lm_head, "targets": targets}
    keywords = {k: changes.pop(k) for k in list(changes) if k not in arrays}
    arrays |= changes
    return token_logprobs(arrays["hidden"], arrays["lm_head"], arrays["targets"], **keywords)


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"hidden": jnp.zeros((4, 8, 1))}, ValueError, r"hidden must be \[N, D\].*\(4, 8, 1\)"),
        ({"lm_head": jnp.zeros((8,))}, ValueError, r"lm_head must be \[D, V\].*\(8,\)"),
        ({"targets": jnp.zeros((4, 1), jnp.int32)}, ValueError, r"targets must be \[N\].*\(4, 1\)"),
        (
            {"lm_head": jnp.zeros((9, 16))},
            ValueError,
            r"hidden.shape=\(4, 8\) and lm_head.shape=\(9, 16\) disagree on D",
        ),
        ({"targets": jnp.zeros((5,), jnp.int32)}, ValueError, r"targets.shape=\(5,\).*disagree on N"),
        ({"hidden": jnp.zeros((0, 8)), "targets": jnp.zeros((0,), jnp.int32)}, ValueError, r"N=0"),
        ({"lm_head": jnp.zeros((8, 0))}, ValueError, r"V=0"),
        ({"hidden": jnp.zeros((4, 8), jnp.int32)}, TypeError, r"hidden.dtype=int32"),
        ({"lm_head": jnp.zeros((8, 16), jnp.bfloat16)}, TypeError, r"share a dtype.*bfloat16"),
        ({"targets": jnp.zeros((4,), jnp.float32)}, TypeError, r"targets.dtype=float32"),
        ({"targets": jnp.asarray([0, 3, 16, 1])}, ValueError, r"\[0, V=16\).*targets\[2\]=16"),
        ({"targets": jnp.asarray([0, -2, 1, 1])}, ValueError, r"targets\[1\]=-2"),
        ({"temperature": 0.0}, ValueError, r"temperature.*> 0, got 0.0"),
        ({"temperature": -1}, ValueError, r"got -1.0"),
        ({"temperature": float("nan")}, ValueError, r"finite.*nan"),
        ({"temperature": "1.0"}, TypeError, r"real number, got '1.0'"),
        ({"return_entropy": 1}, TypeError, r"return_entropy must be a bool, got 1"),
        ({"impl": "triton"}, ValueError, r"impl must be one of .*'triton'"),
        ({"impl": "xla", "block_sizes": BlockSizes()}, TypeError, r"ChunkSizes, got BlockSizes"),
        ({"impl": "pallas", "block_sizes": ChunkSizes()}, TypeError, r"BlockSizes, got ChunkSizes"),
        ({"impl": "pallas", "block_sizes": BlockSizes(block_d=16)}, ValueError, r"block_d=16.*divide.*D=8"),
        ({"impl": "pallas", "interpret": False}, ValueError, r"not on backend 'cpu'"),
        ({"impl": "xla", "interpret": True}, ValueError, r"impl='pallas' only"),
        ({"impl": "reference", "block_sizes": ChunkSizes()}, ValueError, r"no block_sizes"),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_bad_input_raises_an_error_naming_the_received_value(changes, error, message):
    with pytest.raises(error, match=message):
        _call(**changes)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"block_n": 48}, r"block_n must be a positive power of two, got 48"),
        ({"block_v": 0}, r"block_v must be a positive power of two, got 0"),
        ({"forward_split_v": 100}, r"forward_split_v must be a positive multiple of block_v=128, got 100"),
        ({"backward_split_n": 96}, r"backward_split_n must be a positive multiple of block_n=64, got 96"),
    ],
)
def test_block_sizes_that_cannot_tile_are_rejected(fields, message):
    with pytest.raises(ValueError, match=message):
        BlockSizes(**fields)


def test_chunk_sizes_must_be_positive():
    with pytest.raises(ValueError, match=r"chunk_v must be a positive int, got 0"):
        ChunkSizes(chunk_v=0)


def test_gpu_blocks_must_reduce_in_kernel_and_feed_triton_matmuls():
    with pytest.raises(ValueError, match=r"backward_split_v=256"):
        BlockSizes(backward_split_v=256).check(1024, compiled_for_gpu=True)
    with pytest.raises(ValueError, match=r"at least 16.*'block_d': 8"):
        BlockSizes(block_d=8).check(1024, compiled_for_gpu=True)
    BlockSizes(backward_split_v=256).check(1024, compiled_for_gpu=False)


def test_default_blocks_fit_any_hidden_size():
    assert BlockSizes.for_platform("gpu", 1024).block_d == 32
    assert BlockSizes.for_platform("gpu", 48).block_d == 16
    assert BlockSizes.for_platform("tpu", 4096).block_d == 512
