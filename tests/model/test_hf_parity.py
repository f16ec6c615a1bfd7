"""Our policy against HF transformers' own forward, on checkpoints HF wrote (tests/fixtures/hf/<name>/).

Fixtures (written by tools/make_hf_fixtures.py in .venv-ref): `config.json` (Hub dialect),
`config.transformers5.json`, `model.safetensors` from `save_pretrained` (fp32) and `reference.npz` with
`input_ids`, `attention_mask`, HF's `logits`, and for MoE `router_topk [L_moe, B, T, K]` (torch.topk
order) and `aux_loss`. HF runs positions 0..T-1 in every row and masks padded keys; we pass the same
positions and the mask as segment ids. Only real tokens are compared (padded queries are unspecified).
A missing fixture is a failure, not a skip: the comparison is the point.
"""

import dataclasses
import hashlib
import importlib.util
import json
import pathlib
import sys

import jax
import numpy as np
import pytest
from flax import nnx
from safetensors import safe_open

from legorl_jax.model import ArchConfig, load_hf, save_hf

NAMES = ("qwen3_dense", "qwen3_moe", "qwen3_moe_yarn_mixed", "qwen3_tied")


def _fixture(fixtures_dir, name):
    path = fixtures_dir / "hf" / name
    needed = ("config.json", "config.transformers5.json", "model.safetensors", "reference.npz")
    missing = [f for f in needed if not (path / f).exists()]
    if missing:
        pytest.fail(
            f"HF fixture {name} lacks {missing} in {path}; run `make fixtures` (tools/make_hf_fixtures.py)"
        )
    return path, dict(np.load(path / "reference.npz"))


def _forward(policy, reference):
    ids, mask = reference["input_ids"], reference["attention_mask"]
    positions = np.broadcast_to(np.arange(ids.shape[1], dtype=np.int32), ids.shape)
    graphdef, state = nnx.split(policy)
    run = jax.jit(
        lambda state, ids, pos, seg: nnx.merge(graphdef, state)(ids, positions=pos, segment_ids=seg)
    )
    return run(state, ids, positions, mask.astype(np.int32))


@pytest.mark.parametrize("name", NAMES)
def test_logits_routing_and_aux_loss_match_hf_transformers(fixtures_dir, name):
    path, reference = _fixture(fixtures_dir, name)
    out = _forward(load_hf(path), reference)
    real = reference["attention_mask"].astype(bool)
    delta = np.abs(np.asarray(out.logits) - reference["logits"])[real]
    assert delta.max() <= 1e-4, f"max |Δlogit| = {delta.max():.3g} at real tokens"
    if "router_topk" not in reference:
        assert out.routed_experts is None and float(out.aux_loss) == 0.0
        return
    ours, theirs = np.asarray(out.routed_experts), reference["router_topk"]
    assert ours.shape == theirs.shape
    # The fixtures keep a top-k margin of >= 2e-3 at every real token, so there are no exact ties to excuse.
    np.testing.assert_array_equal(np.sort(ours, -1)[:, real], np.sort(theirs, -1)[:, real])
    # HF's fp32 loss of order 1 through another framework's kernels (fp32 simple-op 1e-5).
    assert float(out.aux_loss) == pytest.approx(float(reference["aux_loss"]), abs=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_both_config_dialects_of_a_fixture_parse_to_the_same_architecture(fixtures_dir, name):
    path, _ = _fixture(fixtures_dir, name)
    hub = ArchConfig.from_json_file(path / "config.json")
    v5 = ArchConfig.from_json_file(path / "config.transformers5.json")
    # Only the uninterpreted extras may differ (e.g. transformers 5 writes `layer_types`).
    assert hub == dataclasses.replace(v5, extra_json=hub.extra_json)


@pytest.mark.parametrize("name", NAMES)
def test_save_hf_writes_the_tensor_names_and_shapes_hf_wrote(fixtures_dir, tmp_path, name):
    path, _ = _fixture(fixtures_dir, name)
    save_hf(load_hf(path), tmp_path, dtype="float32", source_dir=path)

    def layout(file):
        with safe_open(str(file), framework="numpy") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}

    assert layout(tmp_path / "model.safetensors") == layout(path / "model.safetensors")
    ours = json.loads((tmp_path / "config.json").read_text())
    theirs = json.loads((path / "config.json").read_text())
    for key in (
        "architectures",
        "model_type",
        "num_hidden_layers",
        "head_dim",
        "rope_scaling",
        "tie_word_embeddings",
    ):
        assert ours[key] == theirs[key], key
    assert (tmp_path / "generation_config.json").exists()  # copied from source_dir


def _make_tiny_model_tool():
    path = pathlib.Path(__file__).resolve().parents[2] / "tools" / "make_tiny_model.py"
    if "make_tiny_model" not in sys.modules:  # a sibling tool, not a package; dataclasses need it registered
        spec = importlib.util.spec_from_file_location("make_tiny_model", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["make_tiny_model"] = module
        spec.loader.exec_module(module)
    return sys.modules["make_tiny_model"]


def test_the_tiny_model_the_tools_write_gives_hf_logits(fixtures_dir, tmp_path):
    """The checkpoint the rest of the system runs (tools/make_tiny_model.py) against HF's forward of it."""
    meta_path = fixtures_dir / "tiny_model_hf" / "reference.json"
    if not meta_path.exists():
        pytest.fail(f"{meta_path} is missing; run `make fixtures` (tools/make_hf_fixtures.py)")
    meta = json.loads(meta_path.read_text())
    _make_tiny_model_tool().main([*meta["make_tiny_model_argv"], "--out", str(tmp_path)])
    digest = hashlib.sha256((tmp_path / "model.safetensors").read_bytes()).hexdigest()
    assert digest == meta["sha256"]["model.safetensors"], (
        "make_tiny_model no longer writes the fixture's weights"
    )
    reference = dict(np.load(fixtures_dir / "tiny_model_hf" / "reference.npz"))
    out = _forward(load_hf(tmp_path), reference)
    real = reference["attention_mask"].astype(bool)
    assert np.abs(np.asarray(out.logits) - reference["logits"])[real].max() <= 1e-4
    np.testing.assert_array_equal(
        np.sort(np.asarray(out.routed_experts), -1)[:, real], np.sort(reference["router_topk"], -1)[:, real]
    )
    # As above: HF's fp32 aux loss of order 1 (fp32 simple-op 1e-5).
    assert float(out.aux_loss) == pytest.approx(float(reference["aux_loss"]), abs=1e-5)


def test_two_2048_token_sequences_packed_in_one_row_give_hfs_logprobs_and_routing_of_each_alone(fixtures_dir):
    """One 4,096-token row holding two 2,048-token sequences (segments 1 and 2, positions restarting at 0, as
    the trainer packs them; attention in many blocks, the boundary between them) against HF transformers
    running each sequence alone (hf/qwen3_moe_long): every next token's log-prob and the sampled logits to
    1e-4, and the routing wherever HF's top-k margin is clear of fp32 reordering."""
    path = fixtures_dir / "hf" / "qwen3_moe_long"
    if not (path / "reference.npz").exists():
        pytest.fail(f"HF fixture qwen3_moe_long is missing in {path}; run `make fixtures`")
    reference = dict(np.load(path / "reference.npz"))
    rows, length = reference["input_ids"].shape
    ids = reference["input_ids"].reshape(1, rows * length)
    positions = np.tile(np.arange(length, dtype=np.int32), rows)[None]
    segments = np.repeat(np.arange(1, rows + 1, dtype=np.int32), length)[None]
    graphdef, state = nnx.split(load_hf(path))
    run = jax.jit(lambda s, i, p, g: nnx.merge(graphdef, s)(i, positions=p, segment_ids=g))
    out = run(state, ids, positions, segments)
    logits = np.asarray(out.logits, np.float64).reshape(rows, length, -1)
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True))
    logp -= logits.max(-1, keepdims=True)
    ours = np.take_along_axis(logp[:, :-1], reference["input_ids"][:, 1:, None], -1)[..., 0]
    assert np.abs(ours - reference["token_logprobs"]).max() <= 1e-4
    every = int(reference["logits_every"])
    assert np.abs(logits[:, ::every] - reference["logits_sampled"]).max() <= 1e-4
    routed = np.sort(np.asarray(out.routed_experts).reshape(reference["router_topk"].shape), -1)
    clear = reference["router_margin"] >= 1e-4  # fp32 reordering moves a probability by ~1e-6
    assert clear.mean() > 0.99, f"only {clear.mean():.3f} of the tokens have a clear top-k"
    np.testing.assert_array_equal(routed[clear], np.sort(reference["router_topk"], -1)[clear])
