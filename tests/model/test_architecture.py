"""ArchConfig reads both HF config dialects, says which field is wrong, and writes the Hub dialect back."""

import json

import pytest

from legorl_jax.model import ArchConfig, RopeScaling


def test_hub_and_transformers5_dialects_parse_to_the_same_config(moe_raw):
    hub = moe_raw | {
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
        "torch_dtype": "float32",
    }
    v5 = {k: v for k, v in moe_raw.items() if k not in ("num_experts", "rope_theta")} | {
        "num_local_experts": 8,
        "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                            "original_max_position_embeddings": 64},
        "dtype": "float32",
        "layer_types": ["full_attention"] * 3,
    }  # fmt: skip
    a, b = ArchConfig.from_hf_dict(hub), ArchConfig.from_hf_dict(v5)
    assert a == b
    assert a.num_experts == 8 and a.rope_scaling == RopeScaling("yarn", 4.0, 64)
    assert a.torch_dtype == "float32"


def test_layer_kinds_follow_hf_sparse_step_and_mlp_only_rules(moe_raw, dense_raw):
    cfg = ArchConfig.from_hf_dict(
        moe_raw | {"num_hidden_layers": 6, "decoder_sparse_step": 2, "mlp_only_layers": [3]}
    )
    # HF: MoE iff i not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0.
    assert cfg.layer_is_moe == (False, True, False, False, False, True)
    assert cfg.num_moe_layers == 2
    assert ArchConfig.from_hf_dict(dense_raw).layer_is_moe == (False, False)


def test_optional_fields_take_hf_defaults(moe_raw, dense_raw):
    minimal = {
        k: v for k, v in moe_raw.items() if k not in ("head_dim", "num_key_value_heads", "norm_topk_prob")
    }
    cfg = ArchConfig.from_hf_dict(minimal)
    assert cfg.head_dim == 32 // 4  # Qwen3-MoE attention: hidden_size // num_attention_heads
    assert cfg.num_key_value_heads == 4
    assert cfg.norm_topk_prob is False and cfg.decoder_sparse_step == 1 and cfg.router_aux_loss_coef == 0.001
    dense = ArchConfig.from_hf_dict({k: v for k, v in dense_raw.items() if k != "head_dim"})
    assert dense.head_dim == 128  # Qwen3Config's default
    assert not cfg.tie_word_embeddings and not cfg.attention_bias and cfg.rope_scaling is None


def test_yarn_original_positions_default_like_transformers(moe_raw):
    rope = {"rope_type": "yarn", "factor": 2.0}
    assert (
        ArchConfig.from_hf_dict(
            moe_raw | {"rope_scaling": rope}
        ).rope_scaling.original_max_position_embeddings
        == 256
    )
    top_level = ArchConfig.from_hf_dict(
        moe_raw
        | {
            "rope_scaling": rope | {"original_max_position_embeddings": 32},
            "original_max_position_embeddings": 64,
        }
    )
    assert top_level.rope_scaling.original_max_position_embeddings == 64  # the top-level field wins, as in HF
    implicit = ArchConfig.from_hf_dict(
        moe_raw
        | {"rope_scaling": {"rope_type": "yarn", "factor": None, "original_max_position_embeddings": 64}}
    )
    assert implicit.rope_scaling.factor == 256 / 64


def test_to_hf_dict_round_trips_and_keeps_unknown_fields(moe_raw, dense_raw):
    raw = moe_raw | {"initializer_range": 0.02, "eos_token_id": [1, 2], "bos_token_id": 1, "use_cache": True}
    cfg = ArchConfig.from_hf_dict(raw)
    written = cfg.to_hf_dict(torch_dtype="bfloat16")
    assert written["initializer_range"] == 0.02 and written["use_cache"] is True
    assert written["eos_token_id"] == [1, 2] and written["torch_dtype"] == "bfloat16"
    assert (
        written["num_experts"] == 8
        and written["model_type"] == "qwen3_moe"
        and "rope_parameters" not in written
    )
    assert ArchConfig.from_hf_dict(json.loads(json.dumps(written))) == cfg.__class__(
        **{**cfg.__dict__, "torch_dtype": "bfloat16"}
    )
    dense = ArchConfig.from_hf_dict(dense_raw).to_hf_dict()
    assert "num_experts" not in dense and dense["model_type"] == "qwen3"


def test_config_is_hashable_so_it_can_live_in_a_graphdef(moe_raw):
    cfg = ArchConfig.from_hf_dict(moe_raw | {"rope_scaling": {"rope_type": "linear", "factor": 2.0}})
    assert hash(cfg) == hash(
        ArchConfig.from_hf_dict(moe_raw | {"rope_scaling": {"rope_type": "linear", "factor": 2.0}})
    )


@pytest.mark.parametrize(
    "change, message",
    [
        ({"architectures": ["LlamaForCausalLM"]}, "LlamaForCausalLM"),
        ({"architectures": ["Qwen3ForCausalLM", "Qwen3MoeForCausalLM"]}, "architectures"),
        ({"use_sliding_window": True}, "use_sliding_window.*True"),
        ({"hidden_act": "gelu"}, "hidden_act.*gelu"),
        (
            {"layer_types": ["full_attention", "sliding_attention", "full_attention"]},
            r"layer_types\[1\].*sliding",
        ),
        ({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "rope_type.*dynamic"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 2.0, "low_freq": 1}}, "unknown keys.*low_freq"),
        ({"partial_rotary_factor": 0.5}, "partial_rotary_factor.*0.5"),
        ({"vocab_size": "256"}, "vocab_size.*'256'"),
        ({"num_key_value_heads": 3}, "num_attention_heads=4.*num_key_value_heads=3"),
        ({"num_experts_per_tok": 9}, "num_experts_per_tok=9"),
        ({"mlp_only_layers": [7]}, "mlp_only_layers entry 7"),
        ({"num_local_experts": 4}, "num_experts=8.*num_local_experts=4"),
        # A given value is validated as given: 0 is an error, never a cue to take the default.
        ({"num_key_value_heads": 0}, "num_key_value_heads must be a positive int, got 0"),
        ({"head_dim": 0}, "head_dim must be a positive int, got 0"),
        ({"num_attention_heads": 0}, "num_attention_heads must be a positive int, got 0"),
        ({"rope_scaling": "yarn"}, "'rope_scaling' must be an object or null, got 'yarn'"),
        ({"rope_parameters": 5}, "'rope_parameters' must be an object or null, got 5"),
        ({"model_type": "llama"}, "'model_type' must be 'qwen3_moe' for Qwen3MoeForCausalLM, got 'llama'"),
        ({"mlp_only_layers": [True]}, "mlp_only_layers entry True"),
    ],
)
def test_bad_configs_raise_naming_field_and_value(moe_raw, change, message):
    with pytest.raises(ValueError, match=message):
        ArchConfig.from_hf_dict(moe_raw | change)


@pytest.mark.parametrize(
    "field",
    [
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "rms_norm_eps",
        "rope_theta",
        "max_position_embeddings",
        "num_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
    ],
)
def test_missing_required_field_is_named(moe_raw, field):
    with pytest.raises(ValueError, match=f"missing required field '{field}'"):
        ArchConfig.from_hf_dict({k: v for k, v in moe_raw.items() if k != field})


def test_missing_architectures_is_named_with_the_received_value(moe_raw):
    with pytest.raises(ValueError, match=r"'architectures' must be .* got None"):
        ArchConfig.from_hf_dict({k: v for k, v in moe_raw.items() if k != "architectures"})


def test_null_optional_sizes_take_hf_defaults_like_absent_ones(moe_raw):
    cfg = ArchConfig.from_hf_dict(moe_raw | {"num_key_value_heads": None, "head_dim": None})
    assert cfg.num_key_value_heads == 4 and cfg.head_dim == 32 // 4


def test_config_file_errors_name_the_path(tmp_path):
    with pytest.raises(ValueError, match="no config.json"):
        ArchConfig.from_json_file(tmp_path / "config.json")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        ArchConfig.from_json_file(tmp_path / "config.json")
