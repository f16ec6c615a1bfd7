"""Writes the independent Hugging Face transformers references under tests/fixtures/ (run in .venv-ref).

    make fixtures
    # = bash tools/make_ref_venv.sh && .venv-ref/bin/python tools/make_hf_fixtures.py --out tests/fixtures

Never imported by tests: it needs torch + transformers, which legorl_jax never depends on. It writes:

- `hf/<name>/` for qwen3_dense, qwen3_moe, qwen3_moe_yarn_mixed, qwen3_tied: tiny random models built by
  transformers itself from its own config classes (fixed torch seed; weights redrawn at std 0.2 and norms
  at 1 + 0.1·N(0, 1) so logits are far from flat and routing has clear margins), saved with
  `save_pretrained` (fp32 safetensors). transformers 5 writes its own config dialect; that file is kept as
  `config.transformers5.json` and `config.json` is rewritten in the Hub's dialect (`num_experts`, top-level
  `rope_theta` + `rope_scaling`, `torch_dtype`). Both configs are reloaded from disk and must give bitwise
  the logits of the model in memory. `reference.npz` holds `input_ids int32[B,T]` (row 1 right-padded),
  `attention_mask int32[B,T]`, `logits float32[B,T,V]` and, for MoE, `router_topk int32[L_moe,B,T,K]`
  (torch.topk over softmax(router_logits), `output_router_logits=True`) and `aux_loss float32[]`
  (`outputs.aux_loss`, before `router_aux_loss_coef`). Positions are 0..T-1 in every row (HF's default).
- `hf/qwen3_moe_long/`: qwen3_moe's shapes with 4,096 positions and two 2,048-token sequences, each run
  alone: `token_logprobs float32[2,2047]`, `logits_sampled` (every 64th position), `router_topk` and HF's
  top-k `router_margin float32[L,2,2048]`; what one packed row of both must give.
- `chat_template/`: the tokenizer files of `make_tiny_model` (default spec, seed 0) and `cases.json`: per
  conversation, HF `apply_chat_template` text and ids; plus plain encode/decode samples.
- `tiny_model_hf/`: HF's logits (and router top-k, aux loss) for a model written by `make_tiny_model` with the
  recorded flags, as `AutoModelForCausalLM.from_pretrained` loads it (no missing or unexpected keys), with the
  sha256 of every generated file so a drift in generation is detected. The weights are not committed: the
  tests regenerate them from the flags.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import shutil
import sys
import tempfile

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3Config, Qwen3MoeConfig

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import make_tiny_model  # noqa: E402  (a sibling tool, not a package)

COMMAND = ".venv-ref/bin/python tools/make_hf_fixtures.py --out tests/fixtures"
WEIGHT_STD = 0.2
BATCH, SEQ = 2, 16
PADDED_ROW_LENGTH = 11
# MoE fixtures take the first seed whose k-th and (k+1)-th router probabilities differ by at least this much
# at every real token: a near-tie would make a routing comparison depend on the last bit of the forward.
MIN_ROUTER_MARGIN = 2e-3
SEEDS = range(64)

_COMMON = dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=384,
               max_position_embeddings=128, rope_theta=10000.0, rms_norm_eps=1e-6)  # fmt: skip
_SMALL_MOE = dict(intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=2, num_experts=8,
                  num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                  tie_word_embeddings=False)  # fmt: skip
HF_MODELS = {
    "qwen3_dense": Qwen3Config(
        **_COMMON, intermediate_size=64, num_hidden_layers=2, tie_word_embeddings=False
    ),
    "qwen3_tied": Qwen3Config(
        **{**_COMMON, "num_key_value_heads": 1},
        intermediate_size=64,
        num_hidden_layers=2,
        tie_word_embeddings=True,
    ),
    "qwen3_moe": Qwen3MoeConfig(**_COMMON, **_SMALL_MOE),
    # Layer 3 is dense only through mlp_only_layers, layers 2 and 4 only through decoder_sparse_step: a loader
    # that ignores either rule builds the wrong layer. MoE layers: 1 and 5.
    "qwen3_moe_yarn_mixed": Qwen3MoeConfig(
        **{**_COMMON, "max_position_embeddings": 512},
        intermediate_size=32,
        moe_intermediate_size=16,
        num_hidden_layers=6,
        num_experts=4,
        num_experts_per_tok=2,
        norm_topk_prob=False,
        decoder_sparse_step=2,
        mlp_only_layers=[0, 3],
        tie_word_embeddings=False,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128},
    ),
}
# tiny_model_hf: flags recorded verbatim; a wider init than the default so routing margins are clear.
TINY_SPEC = make_tiny_model.TinyModelSpec(vocab_size=1024, initializer_range=0.2)


def sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def to_hub_dialect(v5: dict) -> dict:
    """transformers 5's config.json → the Hub's (what Qwen3 / Qwen3-MoE checkpoints ship)."""
    hub = {
        k: v
        for k, v in v5.items()
        if k not in ("dtype", "num_local_experts", "rope_parameters", "layer_types")
    }
    hub["torch_dtype"] = v5["dtype"]
    if "num_local_experts" in v5:
        hub["num_experts"] = v5["num_local_experts"]
    rope = dict(v5["rope_parameters"])
    hub["rope_theta"] = rope.pop("rope_theta")
    hub["rope_scaling"] = None if rope.get("rope_type") == "default" else rope
    return dict(sorted(hub.items()))


def redraw_weights(model: torch.nn.Module, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            noise = torch.randn(param.shape, generator=gen, dtype=torch.float32)
            param.copy_(1.0 + 0.1 * noise if name.endswith("norm.weight") else WEIGHT_STD * noise)


def make_inputs(vocab: int, seed: int, pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, vocab, (BATCH, SEQ), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, PADDED_ROW_LENGTH:] = 0
    ids[1, PADDED_ROW_LENGTH:] = pad_id
    return ids, mask


def forward(
    model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, moe: bool
) -> dict[str, np.ndarray]:
    """HF's forward; for MoE, top-k as the router takes it, checked against the router's own indices."""
    captured = []
    hooks = []
    if moe:
        for module in model.modules():
            if type(module).__name__.endswith("TopKRouter"):
                hooks.append(
                    module.register_forward_hook(lambda _m, _i, out: captured.append(out[2].clone()))
                )
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_router_logits=moe)
    for h in hooks:
        h.remove()
    result = {"input_ids": ids.numpy().astype(np.int32), "attention_mask": mask.numpy().astype(np.int32),
              "logits": out.logits.float().numpy()}  # fmt: skip
    if moe:
        k = model.config.num_experts_per_tok
        probs = [torch.softmax(r.float(), dim=-1) for r in out.router_logits]
        topk = [torch.topk(p, k, dim=-1) for p in probs]
        for (_, idx), own in zip(topk, captured, strict=True):
            if not torch.equal(idx, own):
                raise AssertionError(
                    "top-k over softmax(router_logits) differs from the router's own indices"
                )
        result["router_topk"] = np.stack([idx.reshape(*ids.shape, k).numpy() for _, idx in topk]).astype(
            np.int32
        )
        result["aux_loss"] = np.asarray(out.aux_loss.item(), dtype=np.float32)
        # Margin between the k-th and (k+1)-th probabilities at real tokens: a near-tie would make routing
        # comparisons depend on the last bit of the forward.
        valid = mask.reshape(-1).bool()
        margins = [
            (p.sort(dim=-1, descending=True).values[:, k - 1] - p.sort(dim=-1, descending=True).values[:, k])[
                valid
            ]
            for p in probs
        ]
        result["_min_router_margin"] = float(torch.cat(margins).min())
        ordered = [p.sort(dim=-1, descending=True).values for p in probs]
        result["_router_margin"] = np.stack(
            [(o[:, k - 1] - o[:, k]).reshape(ids.shape).numpy() for o in ordered]
        ).astype(np.float32)
    return result


def save_reference(directory: pathlib.Path, ref: dict, meta: dict) -> None:
    arrays = {k: v for k, v in ref.items() if not k.startswith("_")}
    np.savez_compressed(directory / "reference.npz", **arrays)
    logits = ref["logits"][ref["attention_mask"].astype(bool)]
    meta = {
        **meta,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "command": COMMAND,
        "shapes": {k: list(v.shape) for k, v in arrays.items()},
        "logits_std_at_real_tokens": float(logits.std()),
        "positions": "0..T-1 in every row (HF's default position_ids); padded positions are included",
    }
    if "_min_router_margin" in ref:
        meta["min_router_topk_margin"] = ref["_min_router_margin"]
    (directory / "reference.json").write_text(json.dumps(meta, indent=2) + "\n")


def load(directory: pathlib.Path) -> tuple[torch.nn.Module, dict]:
    model, info = AutoModelForCausalLM.from_pretrained(
        directory, attn_implementation="eager", dtype=torch.float32, output_loading_info=True
    )
    problems = {k: sorted(map(str, v)) for k, v in info.items() if v}
    if problems:
        raise AssertionError(f"transformers did not load {directory} cleanly: {problems}")
    return model.eval(), {k: sorted(map(str, v)) for k, v in info.items()}


def make_hf_model(out: pathlib.Path, name: str, config: transformers.PretrainedConfig) -> None:
    directory = out / "hf" / name
    moe = isinstance(config, Qwen3MoeConfig)
    for seed in SEEDS:
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(
            config, attn_implementation="eager", dtype=torch.float32
        ).eval()
        redraw_weights(model, seed)
        ids, mask = make_inputs(config.vocab_size, seed)
        expected = forward(model, ids, mask, moe)
        if not moe or expected["_min_router_margin"] >= MIN_ROUTER_MARGIN:
            break
    else:
        raise AssertionError(f"{name}: no seed in {SEEDS} gives router margins >= {MIN_ROUTER_MARGIN}")
    _save_and_check_reload(directory, name, model, ids, mask, expected)
    moe_layers = [i for i in range(config.num_hidden_layers) if moe and i not in config.mlp_only_layers
                  and (i + 1) % config.decoder_sparse_step == 0]  # fmt: skip
    save_reference(directory, expected, {
        "name": name, "seed": seed, "weight_std": WEIGHT_STD, "moe_layers": moe_layers,
        "checked": "hub and transformers5 config.json both reload to bitwise the in-memory logits",
    })  # fmt: skip
    print(f"hf/{name}: logits {expected['logits'].shape}" + (f", moe layers {moe_layers}" if moe else ""))


def _save_and_check_reload(directory, name, model, ids, mask, expected) -> None:
    """`save_pretrained` in both config dialects; each must reload to bitwise the in-memory outputs."""
    moe = "router_topk" in expected
    model.save_pretrained(directory)
    (directory / "config.json").rename(directory / "config.transformers5.json")
    v5 = json.loads((directory / "config.transformers5.json").read_text())
    (directory / "config.json").write_text(json.dumps(to_hub_dialect(v5), indent=2) + "\n")
    for dialect in ("hub", "transformers5"):
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copy(directory / "model.safetensors", tmp)
            config_file = "config.json" if dialect == "hub" else "config.transformers5.json"
            shutil.copy(directory / config_file, pathlib.Path(tmp) / "config.json")
            reloaded, _ = load(pathlib.Path(tmp))
            got = forward(reloaded, ids, mask, moe)
        for key in ("logits", "router_topk"):
            if key in expected and not np.array_equal(expected[key], got[key]):
                raise AssertionError(
                    f"{name}: {key} from the {dialect} config.json differ from the model in memory"
                )


# qwen3_moe_long: the qwen3_moe shapes with 4,096 positions; two 2,048-token sequences, each through HF alone.
# What one packed row holding both must give (tests/model/test_hf_parity.py). Full logits would be 6 MiB, so
# the fixture keeps each next token's log-prob, the logits at every LONG_LOGITS_EVERY-th position, the router
# top-k and HF's top-k margin per token (a long row has near-ties; the test compares routing where the margin
# is clear).
LONG_NAME, LONG_ROWS, LONG_SEQ, LONG_LOGITS_EVERY, LONG_SEED = "qwen3_moe_long", 2, 2048, 64, 0
HF_LONG_MOE = Qwen3MoeConfig(**{**_COMMON, "max_position_embeddings": 4096}, **_SMALL_MOE)


def make_long_fixture(out: pathlib.Path) -> None:
    directory = out / "hf" / LONG_NAME
    torch.manual_seed(LONG_SEED)
    model = AutoModelForCausalLM.from_config(
        HF_LONG_MOE, attn_implementation="eager", dtype=torch.float32
    ).eval()
    redraw_weights(model, LONG_SEED)
    gen = torch.Generator().manual_seed(LONG_SEED + 1)
    ids = torch.randint(0, HF_LONG_MOE.vocab_size, (LONG_ROWS, LONG_SEQ), generator=gen)
    mask = torch.ones_like(ids)
    full = forward(model, ids, mask, moe=True)
    _save_and_check_reload(directory, LONG_NAME, model, ids, mask, full)
    logp = torch.log_softmax(torch.from_numpy(full["logits"]), dim=-1)
    token_logprobs = logp[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]
    reference = {
        "input_ids": full["input_ids"],
        "token_logprobs": token_logprobs.numpy().astype(np.float32),
        "logits_every": np.asarray(LONG_LOGITS_EVERY, np.int32),
        "logits_sampled": full["logits"][:, ::LONG_LOGITS_EVERY],
        "router_topk": full["router_topk"],
        "router_margin": full["_router_margin"],
    }
    np.savez_compressed(directory / "reference.npz", **reference)
    meta = {
        "name": LONG_NAME, "seed": LONG_SEED, "weight_std": WEIGHT_STD, "moe_layers": [0, 1],
        "rows": "each row one sequence alone, positions 0..T-1, no padding",
        "min_router_topk_margin": full["_min_router_margin"],
        "transformers_version": transformers.__version__, "torch_version": torch.__version__,
        "command": COMMAND, "shapes": {k: list(v.shape) for k, v in reference.items()},
    }  # fmt: skip
    (directory / "reference.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(
        f"hf/{LONG_NAME}: {LONG_ROWS} sequences of {LONG_SEQ}, "
        f"min router margin {full['_min_router_margin']:.2g}"
    )


# Conversations for chat_template/cases.json; every feature of the template appears in at least one.
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command and return its output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "The command."}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read lines of a text file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "start_line": {"type": "integer", "minimum": 1}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "str_replace",
            "description": "Replace one exact string in a file.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "old": {"type": "string"},
                    "new": {"type": "string"},
                },
                "required": ["path", "old", "new"],
            },
        },
    },
]
SYSTEM = {"role": "system", "content": "You are a careful software engineer working in a git repository."}
USER = {"role": "user", "content": "The test test_add fails. Fix calc.py."}


def _call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


CASES = [
    {"name": "single_user_turn_with_generation_prompt", "messages": [USER], "add_generation_prompt": True},
    {"name": "system_and_user_without_generation_prompt", "messages": [SYSTEM, USER]},
    {
        "name": "multi_turn",
        "add_generation_prompt": True,
        "messages": [
            SYSTEM,
            {"role": "user", "content": "What does git stash do?"},
            {"role": "assistant", "content": "It shelves uncommitted changes so the tree is clean."},
            {"role": "user", "content": "And how do I get them back?"},
        ],
    },
    {
        "name": "tools_with_several_schemas",
        "tools": TOOLS,
        "add_generation_prompt": True,
        "messages": [SYSTEM, USER],
    },
    {
        "name": "tools_without_system_message",
        "tools": TOOLS[:1],
        "add_generation_prompt": True,
        "messages": [USER],
    },
    {
        "name": "tool_call_with_dict_arguments_and_result",
        "tools": TOOLS,
        "messages": [
            SYSTEM,
            USER,
            {
                "role": "assistant",
                "content": "Let me run the tests.",
                "tool_calls": [_call("call_1", "bash", {"command": "python -m pytest -q"})],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "F\n1 failed in 0.02s"},
            {"role": "assistant", "content": "The test fails; reading calc.py next."},
        ],
    },
    {
        "name": "tool_call_with_string_arguments_and_no_content",
        "tools": TOOLS,
        "add_generation_prompt": True,
        "messages": [
            SYSTEM,
            USER,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [_call("call_2", "read_file", '{"path": "calc.py", "start_line": 1}')],
            },
            {"role": "tool", "tool_call_id": "call_2", "content": "def add(a, b):\n    return a - b\n"},
        ],
    },
    {
        "name": "several_tool_calls_and_consecutive_results",
        "tools": TOOLS,
        "add_generation_prompt": True,
        "messages": [
            SYSTEM,
            USER,
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    _call("c1", "bash", {"command": "ls"}),
                    _call("c2", "read_file", {"path": "calc.py"}),
                    {"function": {"name": "bash", "arguments": '{"command": "git status"}'}},
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "calc.py\ntests"},
            {"role": "tool", "tool_call_id": "c2", "content": "def add(a, b):\n    return a - b"},
            {"role": "tool", "content": "nothing to commit"},
        ],
    },
    {
        "name": "reasoning_kept_after_last_user_and_dropped_before",
        "tools": TOOLS,
        "messages": [
            SYSTEM,
            {"role": "user", "content": "Is 7 prime?"},
            {"role": "assistant", "content": "Yes.", "reasoning_content": "7 has no divisors but 1 and 7."},
            USER,
            {
                "role": "assistant",
                "content": "I'll fix the sign.",
                "reasoning_content": "\nadd() subtracts.\n",
                "tool_calls": [
                    _call("c3", "str_replace", {"path": "calc.py", "old": "a - b", "new": "a + b"})
                ],
            },
            {"role": "tool", "tool_call_id": "c3", "content": "edited"},
            {"role": "assistant", "content": "Done.", "reasoning_content": "The edit applied."},
        ],
    },
    {
        "name": "reasoning_inside_content_think_block",
        "messages": [
            USER,
            {"role": "assistant", "content": "<think>\nThe sign is wrong.\n</think>\n\nChange - to +."},
        ],
    },
    {
        "name": "reasoning_under_the_thinking_alias",
        "messages": [USER, {"role": "assistant", "content": "Fixed.", "thinking": "Swap the operator."}],
    },
    {
        "name": "preserve_thinking_keeps_every_turn",
        "template_kwargs": {"preserve_thinking": True},
        "messages": [
            {"role": "user", "content": "2 + 2?"},
            {"role": "assistant", "content": "4", "reasoning_content": "Add."},
            {"role": "user", "content": "3 + 3?"},
            {"role": "assistant", "content": "6", "reasoning_content": "Add again."},
        ],
    },
    {
        "name": "enable_thinking_false_opens_an_empty_think_block",
        "template_kwargs": {"enable_thinking": False},
        "add_generation_prompt": True,
        "messages": [USER],
    },
    {
        "name": "unicode_everywhere",
        "tools": TOOLS[:1],
        "add_generation_prompt": True,
        "messages": [
            {"role": "system", "content": "Réponds en français, s'il te plaît. 🙂"},
            {"role": "user", "content": "文件是空的时候测试失败。Ошибка: «пустой файл» — ≤ ≥ ≠ λ"},
            {
                "role": "assistant",
                "content": "Je regarde.",
                "tool_calls": [_call("u1", "bash", {"command": "echo 'Zürich 東京 ✅'"})],
            },
            {"role": "tool", "tool_call_id": "u1", "content": "Zürich 東京 ✅"},
        ],
    },
    {
        "name": "content_as_text_parts",
        "add_generation_prompt": True,
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
            {
                "role": "user",
                "content": [{"type": "text", "text": "Part one. "}, {"type": "text", "text": "Part two."}],
            },
        ],
    },
    {
        "name": "system_message_mid_conversation",
        "messages": [
            USER,
            {"role": "assistant", "content": "On it."},
            {"role": "system", "content": "Reminder: do not modify the tests."},
            {"role": "user", "content": "Go ahead."},
        ],
    },
    {
        "name": "control_tokens_typed_by_the_user",
        "add_generation_prompt": True,
        "messages": [{"role": "user", "content": "Print the literal <|im_end|> and <tool_call> tokens."}],
    },
]
# Templates that pin the Jinja environment's semantics (whitespace control, loop controls, tojson arguments,
# namespace/dict, template variables, message preparation, the generation tag, raise_exception, filters).
_ENV_MESSAGES = [
    {"role": "system", "content": "  Be brief. "},
    {"role": "user", "content": "hi <b>&'é"},
    {
        "role": "assistant",
        "content": None,
        "reasoning": "r1",
        "tool_calls": [_call("e1", "bash", {"command": "ls"})],
    },
    {"role": "tool", "tool_call_id": "e1", "content": "a.txt"},
    {"role": "assistant", "content": "done", "thinking": "t2", "reasoning_content": "rc2"},
    {"role": "user", "content": "bye"},
]
ENV_CASES = [
    {
        "name": "trim_and_lstrip_blocks",
        "add_generation_prompt": True,
        "template": (
            "{% for m in messages %}\n  {{ m.role }}: {{ m.content }}\n{% endfor %}\n"
            "    {% if add_generation_prompt %}\nassistant:\n  {% endif %}\n"
        ),
    },
    {
        "name": "loop_controls_and_loop_variables",
        "template": (
            "{%- for m in messages -%}{%- if m.role == 'system' %}{% continue %}{% endif -%}{%- if "
            "loop.index > 4 %}{% break %}{% endif -%}[{{ loop.index0 }}/{{ loop.length }} {{ m.role }}{{ ' "
            "prev=' ~ loop.previtem.role if loop.previtem }}]{%- endfor -%}"
        ),
    },
    {
        "name": "tojson_arguments",
        "tools": TOOLS[:1],
        "template": (
            "{{ tools | tojson }}|{{ tools[0] | tojson(indent=2) }}|{{ messages[1] | tojson(sort_keys=True) "
            "}}|{{ messages[1] | tojson(ensure_ascii=True) }}|{{ messages[2].tool_calls | "
            "tojson(separators=(',', ':')) }}"
        ),
    },
    {
        "name": "namespace_and_dict",
        "template": (
            "{%- set ns = namespace(n=0, last='') -%}{%- for m in messages -%}{%- set ns.n = ns.n + 1 -%}{%- "
            "set ns.last = m.role -%}{%- endfor -%}{{ ns.n }} {{ ns.last }} {{ dict(a=1, b=[2]) | tojson }} "
            "{{ dict.fromkeys(['x', 'y'], 0) | tojson }}"
        ),
    },
    {
        "name": "template_variables_without_tools",
        "template": (
            "tools={{ tools is defined }}/{{ tools is none }} documents={{ documents is defined }}/{{ "
            "documents is none }} bos={{ bos_token is defined }} eos={{ eos_token }} pad={{ pad_token }} "
            "unk={{ unk_token is defined }} gen={{ add_generation_prompt }} flag={{ custom_flag | "
            "default('unset') }}"
        ),
    },
    {
        "name": "template_variables_with_tools_and_kwargs",
        "tools": TOOLS,
        "add_generation_prompt": True,
        "template_kwargs": {"custom_flag": {"depth": [1, 2]}, "eos_token": "<OVERRIDDEN>"},
        "template": (
            "tools={{ tools | length }} eos={{ eos_token }} flag={{ custom_flag | tojson }} gen={{ "
            "add_generation_prompt }}"
        ),
    },
    {
        "name": "message_preparation_drops_none_and_aliases_reasoning",
        "template": (
            "{%- for m in messages -%}{{ m.role }} {{ m | list | tojson }} content={{ 'content' in m }} "
            "rc={{ m.reasoning_content | default('-') }} th={{ m.thinking | default('-') }}\n{%- endfor -%}"
        ),
    },
    {
        "name": "generation_tag_renders_its_body",
        "template": (
            "{%- for m in messages -%}{%- if m.role == 'assistant' -%}{% generation %}<a>{{ m.content | "
            "default('') }}</a>{% endgeneration %}{%- else -%}{{ m.content }}{%- endif -%}|{%- endfor -%}"
        ),
    },
    {
        "name": "raise_exception_reaches_the_caller",
        "messages": [{"role": "user", "content": "x"}],
        "template": (
            "{%- if messages[0].role != 'system' -%}{{ raise_exception('first message must be system, got ' "
            "~ messages[0].role) }}{%- endif -%}ok"
        ),
    },
    {
        "name": "string_methods_and_filters",
        "template": (
            "{{ messages[0].content.strip().split(' ')[0] | upper }} {{ messages[0].content | length }} "
            "{{ messages | selectattr('role', 'equalto', 'user') | list | length }} "
            "{{ messages | map(attribute='role') | join(',') }} {{ '%s-%d' | format('a', 3) }} "
            "{{ messages[1].content.startswith('hi') }} {{ messages[-1].content | trim | title }}"
        ),
    },
]
for _case in ENV_CASES:
    _case.setdefault("messages", _ENV_MESSAGES)
ENCODE_SAMPLES = [
    "def add(a, b):\n    return a + b\n",
    "$ python -m pytest -q\n1 failed, 13 passed in 0.42s",
    '{"name": "bash", "arguments": {"command": "ls -la"}}',
    "<|im_start|>user\nhello<|im_end|>\n<think>\nhm\n</think>",
    "Zürich 東京 ✅ naïve café — «ok»",
    "   leading spaces\t\ttabs\r\nwindows line",
]


def make_chat_template_fixture(out: pathlib.Path) -> None:
    directory = out / "chat_template"
    with tempfile.TemporaryDirectory() as tmp:
        make_tiny_model.make_tiny_model(tmp, make_tiny_model.TinyModelSpec(), seed=0)
        directory.mkdir(parents=True)
        for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
            shutil.copy(pathlib.Path(tmp) / f, directory / f)
    tok = AutoTokenizer.from_pretrained(directory)
    cases = []
    for case in CASES:
        kwargs = dict(tools=case.get("tools"), add_generation_prompt=case.get("add_generation_prompt", False),
                      **case.get("template_kwargs", {}))  # fmt: skip
        text = tok.apply_chat_template(case["messages"], tokenize=False, **kwargs)
        ids = tok.apply_chat_template(case["messages"], tokenize=True, return_dict=False, **kwargs)
        if tok.encode(text, add_special_tokens=False) != list(ids):
            raise AssertionError(f"{case['name']}: HF's tokenize=True differs from encoding its own text")
        cases.append(
            {**case, "add_generation_prompt": kwargs["add_generation_prompt"], "text": text, "ids": list(ids)}
        )
    env_cases = []
    for case in ENV_CASES:
        kwargs = dict(tools=case.get("tools"), add_generation_prompt=case.get("add_generation_prompt", False),
                      chat_template=case["template"], **case.get("template_kwargs", {}))  # fmt: skip
        try:
            result = {
                "text": tok.apply_chat_template(case["messages"], tokenize=False, **kwargs),
                "ids": list(tok.apply_chat_template(case["messages"], return_dict=False, **kwargs)),
            }
        except Exception as exc:  # the template's own error is the expected result
            result = {"error": f"{type(exc).__name__}: {exc}"}
        env_cases.append({**case, **result})
    samples = [
        {
            "text": s,
            "ids": tok.encode(s, add_special_tokens=False),
            "decoded": tok.decode(tok.encode(s, add_special_tokens=False)),
            "decoded_skip_special": tok.decode(
                tok.encode(s, add_special_tokens=False), skip_special_tokens=True
            ),
        }
        for s in ENCODE_SAMPLES
    ]
    doc = {
        "transformers_version": transformers.__version__,
        "command": COMMAND,
        "tokenizer": {
            "len": len(tok),
            "special_tokens_map": tok.special_tokens_map,
            "eos_token_id": tok.eos_token_id,
            "pad_token_id": tok.pad_token_id,
            "bos_token_id": tok.bos_token_id,
        },
        "cases": cases,
        "environment_cases": env_cases,
        "encode_samples": samples,
    }
    (directory / "cases.json").write_text(
        json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    print(f"chat_template: {len(cases)} cases, {len(env_cases)} environment cases")


def make_tiny_model_fixture(out: pathlib.Path) -> None:
    directory = out / "tiny_model_hf"
    directory.mkdir(parents=True)
    for seed in SEEDS:
        argv = make_tiny_model.spec_argv(TINY_SPEC, seed=seed)
        with tempfile.TemporaryDirectory() as tmp:
            model_dir = pathlib.Path(tmp) / "model"
            _, spec, parsed_seed = make_tiny_model.parse_args([*argv, "--out", str(model_dir)])
            if (spec, parsed_seed) != (TINY_SPEC, seed):
                raise AssertionError(
                    f"spec_argv does not round-trip: {spec}, {parsed_seed} != {TINY_SPEC}, {seed}"
                )
            make_tiny_model.make_tiny_model(model_dir, spec, seed=seed)
            files = {p.name: sha256(p) for p in sorted(model_dir.iterdir())}
            model, info = load(model_dir)
            tok = AutoTokenizer.from_pretrained(model_dir)
        # Real text: a rendered conversation, and a shorter right-padded row.
        convo = [{"role": "user", "content": "Fix the failing test in calc.py, please."}]
        row0 = tok.apply_chat_template(convo, tokenize=True, return_dict=False, add_generation_prompt=True)
        row1 = tok.encode("def add(a, b):\n    return a - b", add_special_tokens=False)
        if len(row0) < SEQ or len(row1) < PADDED_ROW_LENGTH:
            raise AssertionError(f"sample texts too short: {len(row0)}, {len(row1)}")
        ids = torch.tensor(
            [row0[:SEQ], row1[:PADDED_ROW_LENGTH] + [tok.pad_token_id] * (SEQ - PADDED_ROW_LENGTH)]
        )
        mask = torch.ones_like(ids)
        mask[1, PADDED_ROW_LENGTH:] = 0
        ref = forward(model, ids, mask, moe=not spec.dense)
        if spec.dense or ref["_min_router_margin"] >= MIN_ROUTER_MARGIN:
            break
    else:
        raise AssertionError(f"tiny_model_hf: no seed in {SEEDS} gives router margins >= {MIN_ROUTER_MARGIN}")
    save_reference(
        directory,
        ref,
        {
            "name": "tiny_model_hf",
            "make_tiny_model_argv": argv,
            "seed": seed,
            "sha256": files,
            "loading_info": info,
            "model_class": type(model).__name__,
            "regenerate": "make_tiny_model.main([*make_tiny_model_argv, '--out', DIR]) writes the directory "
            "these logits are for",
        },
    )
    print(f"tiny_model_hf: {type(model).__name__}, logits {ref['logits'].shape}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, required=True, help="fixtures root (tests/fixtures)")
    args = parser.parse_args(argv)
    torch.use_deterministic_algorithms(True)
    for sub in ("hf", "chat_template", "tiny_model_hf"):
        shutil.rmtree(args.out / sub, ignore_errors=True)
    for name, config in HF_MODELS.items():
        make_hf_model(args.out, name, config)
    make_long_fixture(args.out)
    make_chat_template_fixture(args.out)
    make_tiny_model_fixture(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
