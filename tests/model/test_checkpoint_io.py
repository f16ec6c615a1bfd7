"""HF checkpoint directories: exact round trips, sharding with an index, and errors that name the tensor."""

import dataclasses
import json

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from flax import nnx
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from legorl_jax.model import ArchConfig, init_policy, load_hf, save_hf
from legorl_jax.model.hf_layout import hf_shapes


def _params(policy):
    return {"/".join(map(str, k)): np.asarray(v) for k, v in nnx.to_flat_state(nnx.state(policy, nnx.Param))}


def _tensors(path):
    out = {}
    for file in sorted(path.glob("*.safetensors")):
        out |= load_file(str(file))
    return out


@pytest.fixture(scope="module")
def saved(tmp_path_factory, moe_policy):
    path = tmp_path_factory.mktemp("ckpt") / "single"
    save_hf(moe_policy, path, dtype="float32")
    return path


def test_load_save_load_is_exact_in_float32(saved, moe_policy, tmp_path):
    loaded = load_hf(saved)
    for name, value in _params(moe_policy).items():
        np.testing.assert_array_equal(_params(loaded)[name], value, err_msg=name)
    save_hf(loaded, tmp_path / "again", dtype="float32")
    first, second = _tensors(saved), _tensors(tmp_path / "again")
    assert sorted(first) == sorted(second)
    for name in first:
        np.testing.assert_array_equal(first[name], second[name], err_msg=name)


def test_saved_files_have_hf_names_shapes_and_config(saved, moe_policy):
    assert sorted(p.name for p in saved.iterdir()) == ["config.json", "model.safetensors"]
    tensors = _tensors(saved)
    assert {k: v.shape for k, v in tensors.items()} == hf_shapes(moe_policy.config)
    assert (
        "model.layers.0.mlp.experts.7.down_proj.weight" in tensors
        and "model.layers.1.mlp.gate_proj.weight" in tensors
    )
    with safe_open(str(saved / "model.safetensors"), framework="numpy") as f:
        assert f.metadata() == {"format": "pt"}
    config = json.loads((saved / "config.json").read_text())
    assert config["torch_dtype"] == "float32" and config["architectures"] == ["Qwen3MoeForCausalLM"]
    assert ArchConfig.from_hf_dict(config) == dataclasses.replace(moe_policy.config, torch_dtype="float32")


def test_scan_layout_does_not_change_what_is_saved(saved, moe_config, tmp_path):
    unrolled = init_policy(moe_config, seed=1, init_std=0.2, scan_layers=False)
    save_hf(unrolled, tmp_path / "unrolled", dtype="float32")
    a, b = _tensors(saved), _tensors(tmp_path / "unrolled")
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not load_hf(saved, scan_layers=False).scan_layers


def test_large_checkpoints_are_sharded_with_an_index(moe_policy, tmp_path):
    save_hf(moe_policy, tmp_path, dtype="float32", max_shard_bytes=50_000)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    shards = sorted(p.name for p in tmp_path.glob("*.safetensors"))
    assert len(shards) > 2 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    assert set(index["weight_map"]) == set(hf_shapes(moe_policy.config))
    assert set(index["weight_map"].values()) == set(shards)
    assert index["metadata"]["total_size"] == sum(v.nbytes for v in _tensors(tmp_path).values())
    loaded = load_hf(tmp_path)
    for name, value in _params(moe_policy).items():
        np.testing.assert_array_equal(_params(loaded)[name], value, err_msg=name)
    # Saving again unsharded removes the shards and the index: no stale file can mix in.
    save_hf(moe_policy, tmp_path, dtype="float32")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]


@pytest.mark.parametrize("shard_bytes", [None, 50_000], ids=["single", "sharded"])
def test_loading_lists_each_files_tensors_once_not_once_per_tensor(
    moe_policy, tmp_path, monkeypatch, shard_bytes
):
    # safetensors' keys() builds the whole name list per call: asked per tensor, it made loading quadratic in
    # the tensor count (92 s for a 48-layer, 128-expert model's 18k tensors; 0.7 s listed once per file).
    from legorl_jax.model import checkpoint_io

    save_hf(
        moe_policy, tmp_path, dtype="float32", **({"max_shard_bytes": shard_bytes} if shard_bytes else {})
    )
    listed: list[str] = []

    class Counted:
        def __init__(self, handle, file):
            self.handle, self.file = handle, file

        def keys(self):
            listed.append(self.file.name)
            return self.handle.keys()

        def __getattr__(self, name):
            return getattr(self.handle, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self.handle.__exit__(*exc)

    opened = checkpoint_io._open
    monkeypatch.setattr(checkpoint_io, "_open", lambda file: Counted(opened(file), file))
    loaded = load_hf(tmp_path)
    files = sorted(p.name for p in tmp_path.glob("*.safetensors"))
    # Once per file to check it, and (single file, no index) once more to learn which tensors it holds.
    assert sorted(listed) == sorted(files * (1 if shard_bytes else 2)), listed
    for name, value in _params(moe_policy).items():
        np.testing.assert_array_equal(_params(loaded)[name], value, err_msg=name)


def test_bfloat16_save_rounds_weights_once(moe_policy, tmp_path):
    save_hf(moe_policy, tmp_path, dtype="bfloat16")
    tensors = _tensors(tmp_path)
    assert tensors["model.embed_tokens.weight"].dtype == ml_dtypes.bfloat16
    loaded = load_hf(tmp_path)  # float32 params holding bf16 values
    expected = np.asarray(moe_policy.embed_tokens[...]).astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(loaded.embed_tokens[...]), expected)
    assert load_hf(tmp_path, dtype="bfloat16").embed_tokens[...].dtype == jnp.bfloat16


def test_save_copies_tokenizer_files_and_keeps_what_is_there(moe_policy, saved, tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    (source / "tokenizer.json").write_text("{}")
    (source / "generation_config.json").write_text('{"eos_token_id": 2}')
    (source / "model.safetensors").write_bytes(b"old weights are never copied")
    target = tmp_path / "target"
    target.mkdir()
    (target / "README.md").write_text("kept")
    save_hf(moe_policy, target, dtype="float32", source_dir=source)
    names = sorted(p.name for p in target.iterdir())
    assert names == [
        "README.md",
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
    ]
    assert _tensors(target).keys() == _tensors(saved).keys()


def _corrupt(saved, tmp_path, edit):
    path = tmp_path / "bad"
    path.mkdir()
    (path / "config.json").write_text((saved / "config.json").read_text())
    tensors = load_file(str(saved / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(path / "model.safetensors"))
    return path


def test_missing_tensor_is_named(saved, tmp_path):
    path = _corrupt(saved, tmp_path, lambda t: t.pop("model.layers.2.mlp.experts.3.up_proj.weight"))
    with pytest.raises(ValueError, match=r"missing tensor 'model.layers.2.mlp.experts.3.up_proj.weight'"):
        load_hf(path)


def test_unexpected_tensor_is_named(saved, tmp_path):
    path = _corrupt(
        saved, tmp_path, lambda t: t.update({"model.layers.9.extra.weight": np.zeros(2, np.float32)})
    )
    with pytest.raises(ValueError, match=r"unexpected tensor 'model.layers.9.extra.weight'"):
        load_hf(path)


def test_misshaped_tensor_is_named_with_both_shapes(saved, tmp_path):
    path = _corrupt(saved, tmp_path, lambda t: t.update({"model.norm.weight": np.ones(31, np.float32)}))
    with pytest.raises(ValueError, match=r"'model.norm.weight' has shape \(31,\), expected \(32,\)"):
        load_hf(path)


def test_directory_without_weights_or_with_a_broken_index_is_refused(saved, tmp_path):
    (tmp_path / "config.json").write_text((saved / "config.json").read_text())
    with pytest.raises(
        ValueError, match="has neither 'model.safetensors' nor 'model.safetensors.index.json'"
    ):
        load_hf(tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"lm_head.weight": "x.safetensors"}})
    )
    with pytest.raises(ValueError, match="names shard 'x.safetensors'"):
        load_hf(tmp_path)
    with pytest.raises(ValueError, match="dtype must be one of"):
        load_hf(saved, dtype="int8")
    with pytest.raises(ValueError, match="save_hf: dtype must be one of"):
        save_hf(load_hf(saved), tmp_path / "x", dtype="float64")


def test_a_tensor_stored_as_integers_is_named_with_its_dtype_instead_of_cast(saved, tmp_path):
    path = _corrupt(saved, tmp_path, lambda t: t.update({"model.norm.weight": np.ones(32, np.int64)}))
    with pytest.raises(ValueError, match=r"'model.norm.weight' is stored as I64, expected one of"):
        load_hf(path)


def _sharded(moe_policy, path):
    save_hf(moe_policy, path, dtype="float32", max_shard_bytes=50_000)
    index = json.loads((path / "model.safetensors.index.json").read_text())
    return index, sorted(set(index["weight_map"].values()))


def test_a_shard_tensor_the_index_does_not_list_is_named(moe_policy, tmp_path):
    _, shards = _sharded(moe_policy, tmp_path)
    tensors = load_file(str(tmp_path / shards[0])) | {"model.layers.9.extra.weight": np.zeros(2, np.float32)}
    save_file(tensors, str(tmp_path / shards[0]))
    with pytest.raises(ValueError, match=rf"shard '{shards[0]}' holds tensor 'model.layers.9.extra.weight'"):
        load_hf(tmp_path)


@pytest.mark.parametrize(
    "weight_map, message",
    [
        (["lm_head.weight"], r"'weight_map' must be an object, got \['lm_head.weight'\]"),
        (
            {"lm_head.weight": 5},
            r"weight_map\['lm_head.weight'\] must be a file name in the directory, got 5",
        ),
        ({"lm_head.weight": "../model.safetensors"}, r"must be a file name in the directory, got '../model"),
    ],
)
def test_a_malformed_index_weight_map_is_named_with_the_received_value(
    moe_policy, tmp_path, weight_map, message
):
    index, _ = _sharded(moe_policy, tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index | {"weight_map": weight_map}))
    with pytest.raises(ValueError, match=message):
        load_hf(tmp_path)


def test_a_weights_file_that_is_not_safetensors_is_named(saved, tmp_path):
    (tmp_path / "config.json").write_text((saved / "config.json").read_text())
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match=r"model.safetensors' is not a readable safetensors file"):
        load_hf(tmp_path)
