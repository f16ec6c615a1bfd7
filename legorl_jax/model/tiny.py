"""Writes a complete, random-init Hugging Face model directory for tests, benchmarks and the demo run.

    make_tiny_model("runs/tiny-moe")                               # what run.ensure_model calls
    python tools/make_tiny_model.py --out runs/tiny-moe            # Qwen3-MoE, seconds
    python tools/make_tiny_model.py --out runs/tiny-dense --dense  # Qwen3 dense

The directory holds what a Hub checkpoint ships: `config.json` in the Hub's dialect (`Qwen3MoeForCausalLM`,
or `Qwen3ForCausalLM` with --dense; `num_experts`, top-level `rope_theta`, `rope_scaling`, `torch_dtype`),
`model.safetensors` with HF's tensor names and layout (linear weights `[out, in]`, experts stored one by one
as `model.layers.{i}.mlp.experts.{e}.{gate,up,down}_proj.weight`, the router as `mlp.gate.weight`, q/k norms,
no `lm_head.weight` when embeddings are tied), `generation_config.json`, and a byte-level BPE
`tokenizer.json` + `tokenizer_config.json` with Qwen-style control tokens and a Qwen3-format chat template
(tiny_data/chat_template.jinja).

Weights are normal(0, initializer_range), norms at 1, drawn per tensor from (seed, tensor name), so the same
flags and seed always give the same bytes. The tokenizer is trained with `tokenizers` on the text in
tiny_data/tokenizer_corpus/ (deterministic; well under a second, memoised per process by corpus hash). Its
size is at most --vocab-size: the corpus supports about 4,900 tokens, and a larger --vocab-size only pads
the embedding, as real Qwen checkpoints do (151,669 tokens, 151,936 rows).

Importable (tests and other tools call `make_tiny_model(out, TinyModelSpec(...), seed=...)` in-process) and
runs on Python 3.11 (the reference venv of tools/make_hf_fixtures.py loads it by path through
tools/make_tiny_model.py): it imports nothing of legorl_jax.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import json
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import safetensors.numpy
import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

DATA = pathlib.Path(__file__).resolve().parent / "tiny_data"
CORPUS_DIR = DATA / "tokenizer_corpus"
CHAT_TEMPLATE = DATA / "chat_template.jinja"

# Control tokens (special: dropped by decode(skip_special_tokens=True)) and markup tokens (kept, so tool-call
# and reasoning parsers see them), in id order after the trained vocabulary, like Qwen's.
CONTROL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
MARKUP_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")
SPECIAL_TOKENS = CONTROL_TOKENS + MARKUP_TOKENS
BYTE_ALPHABET = 256
# Words, single digits, punctuation runs, newline runs and spaces split apart before BPE, so merges never
# cross them (the split Qwen2's tokenizer uses; transformers rebuilds Qwen2Tokenizer with it).
PRETOKENIZE_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
DTYPES = ("float32", "bfloat16", "float16")

BENCHMARK_EXAMPLE = (
    "a ~100M-parameter MoE for benchmarks (prints 'params: 97.1M'):\n"
    "  python tools/make_tiny_model.py --out runs/moe-100m --vocab-size 16384 --hidden-size 512 \\\n"
    "    --num-layers 6 --num-heads 8 --num-kv-heads 4 --head-dim 64 --intermediate-size 1536 \\\n"
    "    --moe-intermediate-size 256 --num-experts 32 --top-k 4 --max-positions 32768 --dtype bfloat16"
)


@dataclasses.dataclass(frozen=True)
class TinyModelSpec:
    """Every size and option of the generated model; defaults make a model that loads in milliseconds."""

    vocab_size: int = 4096
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 16
    intermediate_size: int = 128  # dense MLP width (every layer with --dense; dense layers of a MoE)
    moe_intermediate_size: int = 64
    num_experts: int = 8
    top_k: int = 2
    norm_topk_prob: bool = True
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()
    tie_embeddings: bool = False
    max_positions: int = 4096
    rope_theta: float = 1_000_000.0
    yarn_factor: float | None = None  # YaRN rope scaling over max_positions original positions
    dtype: str = "float32"
    dense: bool = False
    initializer_range: float = 0.02

    def __post_init__(self) -> None:
        object.__setattr__(self, "mlp_only_layers", tuple(self.mlp_only_layers))
        minimum_vocab = BYTE_ALPHABET + len(SPECIAL_TOKENS)
        for name in (
            "hidden_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "intermediate_size",
            "moe_intermediate_size",
            "num_experts",
            "top_k",
            "decoder_sparse_step",
            "max_positions",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not isinstance(self.vocab_size, int) or self.vocab_size < minimum_vocab:
            raise ValueError(
                f"vocab_size must be an int >= {minimum_vocab} (256 bytes + {len(SPECIAL_TOKENS)} special "
                f"tokens), got {self.vocab_size!r}"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even (rotary embeddings rotate pairs), got {self.head_dim}")
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k ({self.top_k}) must be <= num_experts ({self.num_experts})")
        bad = [i for i in self.mlp_only_layers if not isinstance(i, int) or not 0 <= i < self.num_layers]
        if bad:
            raise ValueError(
                f"mlp_only_layers must hold layer indices in [0, {self.num_layers}), got "
                f"{list(self.mlp_only_layers)}"
            )
        if not isinstance(self.rope_theta, (int, float)) or self.rope_theta <= 0:
            raise ValueError(f"rope_theta must be a positive number, got {self.rope_theta!r}")
        if self.yarn_factor is not None and (
            not isinstance(self.yarn_factor, (int, float)) or self.yarn_factor <= 1
        ):
            raise ValueError(
                f"yarn_factor must be a number > 1 (or None for plain RoPE), got {self.yarn_factor!r}"
            )
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if not isinstance(self.initializer_range, (int, float)) or self.initializer_range <= 0:
            raise ValueError(f"initializer_range must be a positive number, got {self.initializer_range!r}")

    def is_moe_layer(self, layer: int) -> bool:
        """HF Qwen3-MoE's rule: sparse unless listed in mlp_only_layers or off the decoder_sparse_step
        grid."""
        return (not self.dense and layer not in self.mlp_only_layers
                and (layer + 1) % self.decoder_sparse_step == 0)  # fmt: skip


# ----------------------------------------------------------------------------------------------------
# Tokenizer
# ----------------------------------------------------------------------------------------------------


def corpus_digest() -> str:
    """sha256 over the corpus files' names and bytes: the tokenizer is a function of this and the vocab
    size."""
    h = hashlib.sha256()
    for path in sorted(CORPUS_DIR.glob("*.txt")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


@functools.lru_cache(maxsize=8)
def _trained_tokenizer_json(vocab_size: int, digest: str) -> str:
    del digest  # part of the cache key only: an edited corpus must not reuse a stale tokenizer
    texts = [p.read_text(encoding="utf-8") for p in sorted(CORPUS_DIR.glob("*.txt"))]
    if not texts:
        raise FileNotFoundError(f"no tokenizer corpus: {CORPUS_DIR}/*.txt is empty")
    tok = tokenizers.Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(tokenizers.Regex(PRETOKENIZE_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])  # fmt: skip
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIAL_TOKENS),
        min_frequency=1,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_special_tokens([tokenizers.AddedToken(t, special=True, normalized=False) for t in CONTROL_TOKENS])
    tok.add_tokens([tokenizers.AddedToken(t, special=False, normalized=False) for t in MARKUP_TOKENS])
    return tok.to_str()


def train_tokenizer(vocab_size: int) -> tokenizers.Tokenizer:
    """The byte-level BPE tokenizer of the tiny models: at most `vocab_size` ids, special tokens last."""
    return tokenizers.Tokenizer.from_str(_trained_tokenizer_json(vocab_size, corpus_digest()))


def tokenizer_config(tok: tokenizers.Tokenizer, spec: TinyModelSpec) -> dict[str, Any]:
    """tokenizer_config.json as a Qwen3 checkpoint writes it, with our chat template."""
    added = {
        str(tok.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                  "single_word": False, "special": t in CONTROL_TOKENS}
        for t in SPECIAL_TOKENS
    }  # fmt: skip
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE.read_text(encoding="utf-8"),
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": hub_max_positions(spec),
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


# ----------------------------------------------------------------------------------------------------
# config.json, generation_config.json, weights
# ----------------------------------------------------------------------------------------------------


def hub_max_positions(spec: TinyModelSpec) -> int:
    return int(spec.max_positions * spec.yarn_factor) if spec.yarn_factor else spec.max_positions


def hub_config(spec: TinyModelSpec, tok: tokenizers.Tokenizer) -> dict[str, Any]:
    """config.json in the Hub's dialect (what Qwen3 / Qwen3-MoE checkpoints ship)."""
    rope_scaling = None
    if spec.yarn_factor:
        rope_scaling = {"rope_type": "yarn", "factor": float(spec.yarn_factor),
                        "original_max_position_embeddings": spec.max_positions}  # fmt: skip
    config: dict[str, Any] = {
        "architectures": ["Qwen3ForCausalLM" if spec.dense else "Qwen3MoeForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": tok.token_to_id("<|endoftext|>"),
        "eos_token_id": tok.token_to_id("<|im_end|>"),
        "head_dim": spec.head_dim,
        "hidden_act": "silu",
        "hidden_size": spec.hidden_size,
        "initializer_range": spec.initializer_range,
        "intermediate_size": spec.intermediate_size,
        "max_position_embeddings": hub_max_positions(spec),
        "max_window_layers": spec.num_layers,
        "model_type": "qwen3" if spec.dense else "qwen3_moe",
        "num_attention_heads": spec.num_heads,
        "num_hidden_layers": spec.num_layers,
        "num_key_value_heads": spec.num_kv_heads,
        "rms_norm_eps": 1e-06,
        "rope_scaling": rope_scaling,
        "rope_theta": float(spec.rope_theta),
        "sliding_window": None,
        "tie_word_embeddings": spec.tie_embeddings,
        "torch_dtype": spec.dtype,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": spec.vocab_size,
    }
    if not spec.dense:
        config.update(
            decoder_sparse_step=spec.decoder_sparse_step,
            mlp_only_layers=list(spec.mlp_only_layers),
            moe_intermediate_size=spec.moe_intermediate_size,
            norm_topk_prob=spec.norm_topk_prob,
            num_experts=spec.num_experts,
            num_experts_per_tok=spec.top_k,
            output_router_logits=False,
            router_aux_loss_coef=0.001,
        )
    return dict(sorted(config.items()))


def generation_config(tok: tokenizers.Tokenizer) -> dict[str, Any]:
    eot, im_end = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")
    # Plain sampling: RL rollouts sample with temperature 1, top_p 1, no top_k (docs/alignment.md §1).
    return {"bos_token_id": eot, "do_sample": True, "eos_token_id": [im_end, eot], "pad_token_id": eot,
            "temperature": 1.0, "top_k": 0, "top_p": 1.0}  # fmt: skip


def tensor_shapes(spec: TinyModelSpec) -> dict[str, tuple[int, ...]]:
    """HF tensor name → shape, linear weights `[out, in]`."""
    d, hd, v = spec.hidden_size, spec.head_dim, spec.vocab_size
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d,)}
    for i in range(spec.num_layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (d,),
            p + "post_attention_layernorm.weight": (d,),
            p + "self_attn.q_proj.weight": (spec.num_heads * hd, d),
            p + "self_attn.k_proj.weight": (spec.num_kv_heads * hd, d),
            p + "self_attn.v_proj.weight": (spec.num_kv_heads * hd, d),
            p + "self_attn.o_proj.weight": (d, spec.num_heads * hd),
            p + "self_attn.q_norm.weight": (hd,),
            p + "self_attn.k_norm.weight": (hd,),
        })  # fmt: skip
        if spec.is_moe_layer(i):
            shapes[p + "mlp.gate.weight"] = (spec.num_experts, d)
            for e in range(spec.num_experts):
                shapes[p + f"mlp.experts.{e}.gate_proj.weight"] = (spec.moe_intermediate_size, d)
                shapes[p + f"mlp.experts.{e}.up_proj.weight"] = (spec.moe_intermediate_size, d)
                shapes[p + f"mlp.experts.{e}.down_proj.weight"] = (d, spec.moe_intermediate_size)
        else:
            shapes[p + "mlp.gate_proj.weight"] = (spec.intermediate_size, d)
            shapes[p + "mlp.up_proj.weight"] = (spec.intermediate_size, d)
            shapes[p + "mlp.down_proj.weight"] = (d, spec.intermediate_size)
    if not spec.tie_embeddings:
        shapes["lm_head.weight"] = (v, d)
    return dict(sorted(shapes.items()))


def _numpy_dtype(name: str) -> Any:
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError as exc:
            raise ImportError("dtype bfloat16 needs the ml_dtypes package (it comes with jax)") from exc
        return ml_dtypes.bfloat16
    return np.dtype(name)


def init_weights(spec: TinyModelSpec, seed: int) -> dict[str, np.ndarray]:
    """Random weights: normal(0, initializer_range) per tensor from (seed, name); RMSNorm scales at 1."""
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    dtype = _numpy_dtype(spec.dtype)
    weights = {}
    for name, shape in tensor_shapes(spec).items():
        if name.endswith("norm.weight"):
            w = np.ones(shape, np.float32)
        else:
            # Seeding by name keeps every tensor fixed when an unrelated flag adds or removes others.
            key = np.frombuffer(hashlib.sha256(name.encode()).digest()[:16], dtype=np.uint32)
            rng = np.random.default_rng(np.random.SeedSequence([seed, *key.tolist()]))
            w = rng.standard_normal(shape, dtype=np.float32) * np.float32(spec.initializer_range)
        weights[name] = w.astype(dtype)
    return weights


def num_params(spec: TinyModelSpec) -> int:
    return sum(int(np.prod(s)) for s in tensor_shapes(spec).values())


def _write_json(path: pathlib.Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def make_tiny_model(
    out: str | pathlib.Path, spec: TinyModelSpec | None = None, *, seed: int = 0
) -> pathlib.Path:
    """Writes the HF directory `out` (created if needed, files overwritten) and returns its path."""
    spec = spec or TinyModelSpec()
    out = pathlib.Path(out)
    tok = train_tokenizer(spec.vocab_size)
    if tok.get_vocab_size(with_added_tokens=True) > spec.vocab_size:
        raise AssertionError(
            f"tokenizer has {tok.get_vocab_size()} tokens, more than vocab_size {spec.vocab_size}"
        )
    weights = init_weights(spec, seed)
    out.mkdir(parents=True, exist_ok=True)
    _write_json(out / "config.json", hub_config(spec, tok))
    _write_json(out / "generation_config.json", generation_config(tok))
    _write_json(out / "tokenizer_config.json", tokenizer_config(tok, spec))
    (out / "tokenizer.json").write_text(tok.to_str(), encoding="utf-8")
    safetensors.numpy.save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


# ----------------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------------


def _layer_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated layer indices like '0,3', got {text!r}"
        ) from None


def build_parser() -> argparse.ArgumentParser:
    d = TinyModelSpec()
    p = argparse.ArgumentParser(
        description=(
            "Write a random-init Qwen3-MoE (or Qwen3 dense) HF model directory with a trained tokenizer."
        ),
        epilog=BENCHMARK_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", required=True, type=pathlib.Path, help="directory to write")
    p.add_argument("--dense", action="store_true", help="Qwen3ForCausalLM instead of Qwen3MoeForCausalLM")
    p.add_argument("--seed", type=int, default=0, help="weights seed (default 0)")
    p.add_argument(
        "--vocab-size",
        type=int,
        default=d.vocab_size,
        help="embedding rows; the tokenizer fills at most this many",
    )
    p.add_argument("--hidden-size", type=int, default=d.hidden_size)
    p.add_argument("--num-layers", type=int, default=d.num_layers)
    p.add_argument("--num-heads", type=int, default=d.num_heads, help="query heads")
    p.add_argument("--num-kv-heads", type=int, default=d.num_kv_heads, help="key/value heads (GQA)")
    p.add_argument("--head-dim", type=int, default=d.head_dim)
    p.add_argument("--intermediate-size", type=int, default=d.intermediate_size, help="dense MLP width")
    p.add_argument(
        "--moe-intermediate-size", type=int, default=d.moe_intermediate_size, help="expert MLP width"
    )
    p.add_argument("--num-experts", type=int, default=d.num_experts)
    p.add_argument("--top-k", type=int, default=d.top_k, help="experts per token")
    p.add_argument("--norm-topk-prob", action=argparse.BooleanOptionalAction, default=d.norm_topk_prob,
                   help="renormalise the top-k router weights to sum to 1")  # fmt: skip
    p.add_argument("--decoder-sparse-step", type=int, default=d.decoder_sparse_step,
                   help="layer i is MoE when (i + 1) %% step == 0")  # fmt: skip
    p.add_argument("--mlp-only-layers", type=_layer_list, default=d.mlp_only_layers,
                   help="comma-separated layers that use a dense MLP, e.g. 0,3")  # fmt: skip
    p.add_argument("--tie-embeddings", action="store_true", help="share embed_tokens with the LM head")
    p.add_argument(
        "--max-positions",
        type=int,
        default=d.max_positions,
        help="max_position_embeddings (the original length when --yarn-factor is set)",
    )
    p.add_argument("--rope-theta", type=float, default=d.rope_theta)
    p.add_argument("--yarn-factor", type=float, default=None, help="YaRN rope scaling factor (> 1)")
    p.add_argument("--dtype", default=d.dtype, help=f"one of {', '.join(DTYPES)}")
    p.add_argument("--initializer-range", type=float, default=d.initializer_range, help="std of the weights")
    return p


def parse_args(argv: Sequence[str]) -> tuple[pathlib.Path, TinyModelSpec, int]:
    """(out, spec, seed) from command-line flags; bad values exit with a message naming the flag."""
    parser = build_parser()
    args = parser.parse_args(list(argv))
    fields = {f.name for f in dataclasses.fields(TinyModelSpec)}
    try:
        spec = TinyModelSpec(**{k: v for k, v in vars(args).items() if k in fields})
    except ValueError as exc:
        parser.error(str(exc))
    if args.seed < 0:
        parser.error(f"--seed must be a non-negative int, got {args.seed}")
    return args.out, spec, args.seed


def spec_argv(spec: TinyModelSpec, seed: int = 0) -> list[str]:
    """Flags that make `parse_args` return this spec and seed (what fixtures record)."""
    argv = ["--seed", str(seed)]
    for f in dataclasses.fields(TinyModelSpec):
        value = getattr(spec, f.name)
        flag = "--" + f.name.replace("_", "-")
        if f.name == "norm_topk_prob":
            argv.append(flag if value else "--no-norm-topk-prob")
        elif isinstance(value, bool):
            argv += [flag] if value else []
        elif f.name == "mlp_only_layers":
            argv += [flag, ",".join(map(str, value))] if value else []
        elif value is not None:
            argv += [flag, repr(value) if isinstance(value, float) else str(value)]
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    out, spec, seed = parse_args(sys.argv[1:] if argv is None else argv)
    make_tiny_model(out, spec, seed=seed)
    kind = "dense" if spec.dense else "moe"
    print(f"wrote {out} ({kind}, params: {num_params(spec) / 1e6:.1f}M, seed {seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
