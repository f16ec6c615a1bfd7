"""tools/make_tiny_model.py writes complete HF directories with HF's names, shapes and config dialect.

"What HF expects" is read from tests/fixtures/hf/*: directories transformers itself saved (with config.json
rewritten in the Hub's dialect, then reloaded by transformers to the same logits).
"""

import ast
import hashlib
import json
import pathlib
import re

import numpy as np
import pytest
import safetensors
import safetensors.numpy

from legorl_jax.model.tokenizer import Tokenizer

FIXTURES = pathlib.Path(__file__).parents[1] / "fixtures"
TOOL = pathlib.Path(__file__).parents[2] / "tools" / "make_tiny_model.py"
MODULE = pathlib.Path(__file__).parents[2] / "legorl_jax" / "model" / "tiny.py"
FILES = {
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
}
HF_NAMES = ("qwen3_dense", "qwen3_moe", "qwen3_moe_yarn_mixed", "qwen3_tied")
# Keys that legitimately differ from the HF fixtures: token ids (HF's tiny configs have none), the init std
# (the fixtures' weights are redrawn), transformers' version stamp, and max_window_layers (Hub checkpoints
# carry it, = num_layers; transformers 5 dropped it from Qwen3-MoE; it only matters with sliding windows).
FREE_KEYS = {"bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "transformers_version",
             "max_window_layers"}  # fmt: skip


def header(path: pathlib.Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Tensor name → (dtype, shape) from a safetensors file."""
    with safetensors.safe_open(str(path), framework="numpy") as f:
        out = {}
        for name in f.keys():
            tensor = f.get_slice(name)
            out[name] = (tensor.get_dtype(), tuple(tensor.get_shape()))
        return out


def spec_like(tool, hub: dict):
    """The TinyModelSpec that should reproduce a Hub-dialect config."""
    moe = hub["model_type"] == "qwen3_moe"
    scaling = hub.get("rope_scaling")
    return tool.TinyModelSpec(
        vocab_size=hub["vocab_size"],
        hidden_size=hub["hidden_size"],
        num_layers=hub["num_hidden_layers"],
        num_heads=hub["num_attention_heads"],
        num_kv_heads=hub["num_key_value_heads"],
        head_dim=hub["head_dim"],
        intermediate_size=hub["intermediate_size"],
        dense=not moe,
        tie_embeddings=hub["tie_word_embeddings"],
        rope_theta=hub["rope_theta"],
        yarn_factor=scaling["factor"] if scaling else None,
        max_positions=scaling["original_max_position_embeddings"]
        if scaling
        else hub["max_position_embeddings"],
        **(
            dict(
                moe_intermediate_size=hub["moe_intermediate_size"],
                num_experts=hub["num_experts"],
                top_k=hub["num_experts_per_tok"],
                norm_topk_prob=hub["norm_topk_prob"],
                decoder_sparse_step=hub["decoder_sparse_step"],
                mlp_only_layers=tuple(hub["mlp_only_layers"]),
            )
            if moe
            else {}
        ),
    )


def sha256s(directory: pathlib.Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def test_the_default_moe_directory_has_every_file_and_loads(tiny_moe_dir):
    assert {p.name for p in tiny_moe_dir.iterdir()} == FILES
    config = json.loads((tiny_moe_dir / "config.json").read_text())
    assert config["architectures"] == ["Qwen3MoeForCausalLM"] and config["model_type"] == "qwen3_moe"
    assert (config["num_experts"], config["num_experts_per_tok"], config["hidden_size"]) == (8, 2, 64)
    tok = Tokenizer.from_dir(tiny_moe_dir)
    assert tok.vocab_size <= config["vocab_size"] == 4096
    assert (config["eos_token_id"], config["bos_token_id"]) == (
        tok.token_to_id("<|im_end|>"),
        tok.pad_token_id,
    )
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    assert tok.decode(prompt) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize("name", HF_NAMES)
def test_tensor_names_shapes_and_config_match_what_transformers_saved(tmp_path, tiny_model_tool, name):
    hf_dir = FIXTURES / "hf" / name
    hub = json.loads((hf_dir / "config.json").read_text())
    ours_dir = tiny_model_tool.make_tiny_model(tmp_path, spec_like(tiny_model_tool, hub), seed=0)
    assert header(ours_dir / "model.safetensors") == header(hf_dir / "model.safetensors")
    ours = json.loads((ours_dir / "config.json").read_text())
    assert set(ours) - FREE_KEYS == set(hub) - FREE_KEYS
    assert {k: v for k, v in ours.items() if k not in FREE_KEYS} == {
        k: v for k, v in hub.items() if k not in FREE_KEYS
    }


def test_weights_are_normal_with_the_initializer_std_and_norms_at_one(tiny_moe_dir):
    weights = safetensors.numpy.load_file(str(tiny_moe_dir / "model.safetensors"))
    assert "lm_head.weight" in weights
    experts = weights["model.layers.1.mlp.experts.7.gate_proj.weight"]
    assert (
        experts.shape == (64, 64)
        and abs(float(experts.std()) - 0.02) < 0.002
        and abs(float(experts.mean())) < 0.002
    )
    for name in (
        "model.norm.weight",
        "model.layers.0.self_attn.q_norm.weight",
        "model.layers.1.input_layernorm.weight",
    ):
        np.testing.assert_array_equal(weights[name], 1.0)


def test_the_same_seed_writes_the_same_bytes_and_another_seed_other_weights(
    tmp_path, tiny_model_tool, tiny_moe_dir
):
    again = tiny_model_tool.make_tiny_model(tmp_path / "again", seed=0)
    other = tiny_model_tool.make_tiny_model(tmp_path / "other", seed=1)
    assert sha256s(again) == sha256s(tiny_moe_dir)
    a, b = sha256s(tiny_moe_dir), sha256s(other)
    assert a["model.safetensors"] != b["model.safetensors"]
    assert {k: v for k, v in a.items() if k != "model.safetensors"} == {
        k: v for k, v in b.items() if k != "model.safetensors"
    }


def test_regenerating_the_recorded_tiny_model_reproduces_every_file_transformers_loaded(
    tmp_path, tiny_model_tool
):
    # tests/fixtures/tiny_model_hf holds HF's logits for this directory; a drift here invalidates them.
    recorded = json.loads((FIXTURES / "tiny_model_hf" / "reference.json").read_text())
    assert recorded["loading_info"] == {
        "missing_keys": [],
        "unexpected_keys": [],
        "mismatched_keys": [],
        "error_msgs": [],
    }
    tiny_model_tool.main([*recorded["make_tiny_model_argv"], "--out", str(tmp_path)])
    assert sha256s(tmp_path) == recorded["sha256"]


def test_the_default_tokenizer_files_are_the_ones_the_chat_template_cases_were_made_with(tiny_moe_dir):
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (tiny_moe_dir / name).read_bytes() == (FIXTURES / "chat_template" / name).read_bytes(), name


def test_dense_variant_has_no_router_or_experts(tiny_dense_dir):
    config = json.loads((tiny_dense_dir / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"] and config["model_type"] == "qwen3"
    assert not {"num_experts", "moe_intermediate_size", "mlp_only_layers"} & set(config)
    names = header(tiny_dense_dir / "model.safetensors")
    assert not [n for n in names if ".experts." in n or n.endswith("mlp.gate.weight")]
    assert names["model.layers.1.mlp.down_proj.weight"] == ("F32", (64, 128))


def test_tied_bf16_yarn_variant_writes_what_its_flags_say(tmp_path, tiny_model_tool):
    out, spec, seed = tiny_model_tool.parse_args(
        [
            "--out",
            str(tmp_path),
            "--tie-embeddings",
            "--dtype",
            "bfloat16",
            "--yarn-factor",
            "4",
            "--max-positions",
            "64",
            "--num-layers",
            "4",
            "--decoder-sparse-step",
            "2",
            "--mlp-only-layers",
            "3",
            "--no-norm-topk-prob",
            "--seed",
            "5",
        ]
    )
    tiny_model_tool.make_tiny_model(out, spec, seed=seed)
    config = json.loads((out / "config.json").read_text())
    assert config["tie_word_embeddings"] is True and config["torch_dtype"] == "bfloat16"
    assert config["rope_scaling"] == {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 64,
    }
    assert config["max_position_embeddings"] == 256 and config["norm_topk_prob"] is False
    names = header(out / "model.safetensors")
    assert "lm_head.weight" not in names and {dtype for dtype, _ in names.values()} == {"BF16"}
    moe_layers = sorted({int(n.split(".")[2]) for n in names if n.endswith("mlp.gate.weight")})
    assert moe_layers == [1]  # (i + 1) % 2 == 0 gives 1 and 3; 3 is listed in mlp_only_layers


def test_spec_argv_round_trips_through_the_command_line(tiny_model_tool):
    spec = tiny_model_tool.TinyModelSpec(
        num_layers=3, mlp_only_layers=(0, 2), yarn_factor=2.5, norm_topk_prob=False
    )
    _, parsed, seed = tiny_model_tool.parse_args([*tiny_model_tool.spec_argv(spec, seed=7), "--out", "x"])
    assert (parsed, seed) == (spec, 7)


def test_help_documents_a_100m_parameter_moe(tiny_model_tool):
    help_text = tiny_model_tool.build_parser().format_help()
    command = help_text.split("python tools/make_tiny_model.py", 1)[1].replace("\\\n", " ").split()
    _, spec, _ = tiny_model_tool.parse_args(command)
    assert 90e6 < tiny_model_tool.num_params(spec) < 110e6 and not spec.dense


def test_trained_tokenizer_puts_the_qwen_special_tokens_after_the_vocabulary(tiny_model_tool):
    tok = tiny_model_tool.train_tokenizer(1024)
    size = tok.get_vocab_size(with_added_tokens=True)
    assert size == 1024
    assert [tok.id_to_token(i) for i in range(size - 9, size)] == list(tiny_model_tool.SPECIAL_TOKENS)


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("vocab_size", 100, "vocab_size must be an int >= 265"),
        ("num_kv_heads", 3, r"num_heads \(4\) must be a multiple of num_kv_heads \(3\)"),
        ("top_k", 9, r"top_k \(9\) must be <= num_experts \(8\)"),
        ("hidden_size", 0, "hidden_size must be a positive int, got 0"),
        ("head_dim", 15, "head_dim must be even"),
        ("mlp_only_layers", (2,), r"mlp_only_layers must hold layer indices in \[0, 2\), got \[2\]"),
        ("yarn_factor", 0.5, "yarn_factor must be a number > 1"),
        ("dtype", "int8", "dtype must be one of .* got 'int8'"),
        ("rope_theta", -1.0, "rope_theta must be a positive number, got -1.0"),
    ],
)
def test_bad_sizes_are_rejected_naming_the_field_and_value(tiny_model_tool, field, value, match):
    with pytest.raises(ValueError, match=match):
        tiny_model_tool.TinyModelSpec(**{field: value})


@pytest.mark.parametrize(
    "flags, match",
    [
        (["--num-kv-heads", "3"], "num_kv_heads"),
        (["--mlp-only-layers", "a,b"], "comma-separated layer indices"),
        (["--seed", "-1"], "--seed must be a non-negative int"),
        (["--top-k", "x"], "invalid int value: 'x'"),
    ],
)
def test_bad_flags_exit_with_a_message_naming_them(tiny_model_tool, capsys, flags, match):
    with pytest.raises(SystemExit):
        tiny_model_tool.parse_args(["--out", "x", *flags])
    assert re.search(match, capsys.readouterr().err)


def test_the_tool_parses_as_python_3_11(tiny_model_tool):
    # .venv-ref (Python 3.11) runs it and the package module it loads; 3.12-only syntax would break
    # `make fixtures`.
    ast.parse(TOOL.read_text(), feature_version=(3, 11))
    ast.parse(MODULE.read_text(), feature_version=(3, 11))
