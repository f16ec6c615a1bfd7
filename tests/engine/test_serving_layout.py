"""The engine's layer layout (runner.py): unrolled and scanned serve the same tokens, log-probs and
routing, and an update in either layout lands as the served layout's own weights would.

The model has a run of two MoE layers (layer 2 dense), so a scanned stack is sliced at more than one
index; engines of one layout share their compiled programs, so each layout compiles once here.
"""

import asyncio

import jax
import numpy as np
import pytest
from flax import nnx

from legorl_jax.engine import SamplingParams
from legorl_jax.engine.jax_engine import JaxEngine
from legorl_jax.engine.runner import default_scan_layers
from legorl_jax.model import load_hf

PROMPTS = [[5, 17, 230, 901, 44], [1000, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], [77, 78, 79]]
SAMPLED = SamplingParams(temperature=1.0, max_new_tokens=20, seed=21, ignore_eos=True)


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory, tiny_model_tool):
    spec = tiny_model_tool.TinyModelSpec(
        num_layers=4, mlp_only_layers=(2,), initializer_range=0.1, max_positions=256
    )
    return [
        tiny_model_tool.make_tiny_model(tmp_path_factory.mktemp(f"layout-{seed}"), spec, seed=seed)
        for seed in (0, 1)
    ]


def _engine(model_dir, scan_layers):
    # Every call runs its own bucket (a covering larger bucket would re-shape the sums: ~1e-6 apart).
    return JaxEngine.from_dir(
        model_dir,
        max_running=4,
        max_len=64,
        min_bucket=16,
        scan_layers=scan_layers,
        compile_in_background=False,
    )


async def _served(engine):
    """What the engine serves for PROMPTS, admitted together (one batch, whatever the timing): tokens,
    log-probs, routing; and the prompt log-probs of the second prompt."""
    await engine.pause("in_place")
    tasks = [asyncio.ensure_future(engine.generate(p, SAMPLED, return_routed_experts=True)) for p in PROMPTS]
    while len(engine.scheduler.waiting) < len(PROMPTS):
        await asyncio.sleep(0.005)
    await engine.resume()
    gens = await asyncio.gather(*tasks)
    scored = await engine.prompt_logprobs(np.array(PROMPTS[1], np.int32), 1)
    return [(g.output_ids, g.output_logprobs, g.routed_experts) for g in gens], scored


def _assert_same(a, b, logprob_atol=0.0):
    """Same tokens and routing; log-probs within `logprob_atol` (0: bit for bit)."""
    (gens_a, scored_a), (gens_b, scored_b) = a, b
    for (ids_a, lp_a, routed_a), (ids_b, lp_b, routed_b) in zip(gens_a, gens_b, strict=True):
        np.testing.assert_array_equal(ids_a, ids_b)
        np.testing.assert_allclose(lp_a, lp_b, atol=logprob_atol, rtol=0)
        np.testing.assert_array_equal(routed_a, routed_b)
    np.testing.assert_allclose(scored_a, scored_b, atol=logprob_atol, rtol=0)


class _Accelerator:
    """A stand-in for a `jax.Device` of another platform (only its `platform` is read)."""

    def __init__(self, platform):
        self.platform = platform


def test_the_engine_serves_unrolled_layers_on_cpu_and_scanned_elsewhere():
    assert jax.devices()[0].platform == "cpu" and default_scan_layers() is False
    assert default_scan_layers(jax.devices()[5]) is False
    assert (
        default_scan_layers(_Accelerator("gpu")) is True and default_scan_layers(_Accelerator("tpu")) is True
    )


async def test_unrolled_and_scanned_engines_serve_identical_tokens_logprobs_and_routing(model_dirs):
    unrolled, scanned = _engine(model_dirs[0], False), _engine(model_dirs[0], True)
    try:
        assert unrolled.runner.scan_layers is False and scanned.runner.scan_layers is True
        # The served parameters really are in each layout: a stack per run, or one array per layer.
        paths = {
            e: {p[:4] for p, _ in nnx.to_flat_state(e.runner.params) if p[0] == "runs"}
            for e in (unrolled, scanned)
        }
        assert ("runs", 0, "layers", 1) in paths[unrolled]
        assert not any(isinstance(p[3], int) for p in paths[scanned])
        # XLA fuses a scan body and unrolled layers differently: re-ordered float32 sums, log-probs ~1e-6
        # apart (float32 simple-op tolerance 1e-5, docs/style.md rule 22); tokens and routing exact.
        _assert_same(await _served(unrolled), await _served(scanned), logprob_atol=1e-5)
    finally:
        unrolled.close()
        scanned.close()


@pytest.mark.parametrize("scan_engine", [False, True], ids=["into-unrolled", "into-scanned"])
async def test_an_update_in_the_other_layout_serves_what_a_fresh_engine_on_those_weights_serves(
    model_dirs, scan_engine
):
    # The trainer's state.params in the other layout (scanned into the unrolled engine: the trainer's case).
    trainer_params = nnx.state(load_hf(model_dirs[1], scan_layers=not scan_engine), nnx.Param)
    engine, fresh = _engine(model_dirs[0], scan_engine), _engine(model_dirs[1], scan_engine)
    try:
        before = await _served(engine)
        await engine.update_weights(trainer_params, "v1")
        for leaf in jax.tree.leaves(trainer_params):
            leaf.delete()  # what donating the trainer state to its next step does: the engine holds a copy
        after = await _served(engine)
        _assert_same(after, await _served(fresh))
        assert not np.array_equal(before[1], after[1])  # the update changed what is served
        # And back from disk, read straight into the served layout.
        await engine.update_weights(model_dirs[0], "v0")
        _assert_same(await _served(engine), before)
    finally:
        engine.close()
        fresh.close()


async def test_a_wrongly_shaped_or_structured_update_is_refused_naming_the_parameter(model_dirs):
    engine = _engine(model_dirs[0], None)
    try:
        stacked = nnx.state(load_hf(model_dirs[1], scan_layers=True), nnx.Param)
        narrow = jax.tree_util.tree_map_with_path(
            lambda path, x: x[..., :-1] if "down_proj" in jax.tree_util.keystr(path) else x, stacked
        )
        with pytest.raises(
            ValueError,
            match=r"engine policy's structure: parameter runs/0/layers/0/mlp/down_proj has shape "
            r"\(8, 64, 63\), expected \(8, 64, 64\) \(\d+ mis-shaped\)",
        ):
            await engine.update_weights(narrow, "bad")
        no_norm = nnx.State({k: v for k, v in stacked.items() if k != "norm"})
        with pytest.raises(ValueError, match=r"parameter norm/weight is missing \(1 missing\)"):
            await engine.update_weights(no_norm, "bad")
        assert engine.weight_version == "default" and await engine.health()
    finally:
        engine.close()
