"""The architecture of a Qwen3 / Qwen3-MoE policy, parsed from (and written back to) an HF `config.json`.

`ArchConfig` is frozen and hashable (it is static in the NNX graphdef) and uses HF's field names. Both
config dialects are read: the Hub's (`num_experts`, top-level `rope_theta`,
`rope_scaling`, `torch_dtype`) and transformers 5's (`num_local_experts`, `rope_parameters`, `dtype`);
`to_hf_dict` writes the Hub's.

Required (a missing one is a ValueError naming it): `architectures` (exactly one of
`Qwen3ForCausalLM`, `Qwen3MoeForCausalLM`), `vocab_size`, `hidden_size`, `intermediate_size`,
`num_hidden_layers`, `num_attention_heads`, `rms_norm_eps`, `max_position_embeddings`, the RoPE base
(`rope_theta` or `rope_parameters.rope_theta`) and, for MoE, `num_experts`, `num_experts_per_tok`,
`moe_intermediate_size`.

Optional, with the default HF's config classes use: `num_key_value_heads` (= `num_attention_heads`),
`head_dim` (Qwen3: 128; Qwen3-MoE: `hidden_size // num_attention_heads`, as its attention module
computes it), `tie_word_embeddings` (false), `attention_bias` (false), `hidden_act` ("silu"),
`rope_scaling` (none), `use_sliding_window` (false), `norm_topk_prob` (false), `decoder_sparse_step` (1),
`mlp_only_layers` ([]), `router_aux_loss_coef` (0.001), `bos/eos/pad_token_id` (none). YaRN fields
follow transformers' `standardize_rope_params`: a top-level `original_max_position_embeddings` wins
over the RoPE dict's, which defaults to `max_position_embeddings`; `factor` None means
`max_position_embeddings / original_max_position_embeddings`. A default applies only when the field is
absent or null; a value that is given (0 included) is validated as given, never replaced.

Rejected with a ValueError naming field and value: other architectures, a `model_type` that is not the
architecture's (`qwen3` / `qwen3_moe`), a RoPE dict that is not an object, `hidden_act != "silu"`,
`use_sliding_window: true`, a `layer_types` entry other than "full_attention", `partial_rotary_factor
!= 1`, RoPE types other than default / linear / yarn, unknown RoPE keys, per-layer-type RoPE dicts.
Every other field is kept verbatim (`extra_json`) so a load -> save round trip loses nothing.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any

from legorl_jax.validate import is_int, positive_int, positive_number

DENSE = "Qwen3ForCausalLM"
MOE = "Qwen3MoeForCausalLM"
_MODEL_TYPES = {DENSE: "qwen3", MOE: "qwen3_moe"}
_ROPE_KEYS = {
    "rope_type",
    "type",
    "rope_theta",
    "factor",
    "original_max_position_embeddings",
    "attention_factor",
    "beta_fast",
    "beta_slow",
    "mscale",
    "mscale_all_dim",
    "truncate",
    "partial_rotary_factor",
}


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """A non-default RoPE variant (`rope_scaling` / `rope_parameters` of HF) — linear or YaRN."""

    rope_type: str
    factor: float
    original_max_position_embeddings: int | None = None
    attention_factor: float | None = None
    beta_fast: float | None = None
    beta_slow: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool | None = None

    def __post_init__(self) -> None:
        if self.rope_type not in ("linear", "yarn"):
            raise ValueError(f"rope_scaling.rope_type must be 'linear' or 'yarn', got {self.rope_type!r}")
        positive_number("rope_scaling.factor", self.factor)
        if self.rope_type == "yarn" and not isinstance(self.original_max_position_embeddings, int):
            raise ValueError(
                "rope_scaling.original_max_position_embeddings must be an int for yarn, "
                f"got {self.original_max_position_embeddings!r}"
            )

    def to_hf_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclasses.dataclass(frozen=True)
class ArchConfig:
    """A Qwen3 (dense) or Qwen3-MoE architecture; field names and meanings are HF's."""

    architectures: tuple[str, ...]
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    rope_scaling: RopeScaling | None = None
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    hidden_act: str = "silu"
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()
    router_aux_loss_coef: float = 0.001
    bos_token_id: int | None = None
    eos_token_id: int | tuple[int, ...] | None = None
    pad_token_id: int | None = None
    torch_dtype: str | None = None
    extra_json: str = "{}"
    """Fields this class does not interpret, as sorted JSON (kept for the round trip)."""

    def __post_init__(self) -> None:
        if len(self.architectures) != 1 or self.architectures[0] not in _MODEL_TYPES:
            raise ValueError(
                f"architectures must be exactly one of {tuple(_MODEL_TYPES)}, got "
                f"{list(self.architectures)!r}"
            )
        positive = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers"]
        positive += ["num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings"]
        if self.is_moe:
            positive += ["num_experts", "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step"]
        for name in positive:
            positive_int(name, getattr(self, name))
        for name in ("rms_norm_eps", "rope_theta"):
            positive_number(name, getattr(self, name))
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}"
            )
        if self.hidden_act != "silu":
            raise ValueError(f"hidden_act must be 'silu', got {self.hidden_act!r}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for RoPE, got {self.head_dim!r}")
        if self.is_moe and self.num_experts_per_tok > self.num_experts:
            raise ValueError(
                f"num_experts_per_tok={self.num_experts_per_tok} exceeds num_experts={self.num_experts}"
            )
        for layer in self.mlp_only_layers:
            is_index = is_int(layer)
            if not is_index or not 0 <= layer < self.num_hidden_layers:
                raise ValueError(
                    f"mlp_only_layers entry {layer!r} is not a layer index in [0, {self.num_hidden_layers})"
                )

    @property
    def is_moe(self) -> bool:
        return self.architectures[0] == MOE

    @property
    def layer_is_moe(self) -> tuple[bool, ...]:
        """Per decoder layer, whether its MLP is the sparse MoE block (HF's `Qwen3MoeDecoderLayer` rule)."""
        if not self.is_moe:
            return (False,) * self.num_hidden_layers
        return tuple(
            i not in self.mlp_only_layers and (i + 1) % self.decoder_sparse_step == 0
            for i in range(self.num_hidden_layers)
        )

    @property
    def num_moe_layers(self) -> int:
        return sum(self.layer_is_moe)

    @classmethod
    def from_hf_dict(cls, raw: dict[str, Any]) -> ArchConfig:
        """Parses either HF dialect; see the module docstring for required fields and defaults."""
        return _parse(dict(raw))

    @classmethod
    def from_json_file(cls, path: str | pathlib.Path) -> ArchConfig:
        path = pathlib.Path(path)
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raise ValueError(f"no config.json at {str(path)!r}") from None
        except json.JSONDecodeError as err:
            raise ValueError(f"{str(path)!r} is not valid JSON: {err}") from None
        if not isinstance(raw, dict):
            raise ValueError(f"{str(path)!r} must hold a JSON object, got {type(raw).__name__}")
        return cls.from_hf_dict(raw)

    def to_hf_dict(self, torch_dtype: str | None = None) -> dict[str, Any]:
        """The Hub dialect of this config (transformers 5 loads it unchanged)."""
        out: dict[str, Any] = json.loads(self.extra_json)
        out.update(
            architectures=list(self.architectures),
            model_type=_MODEL_TYPES[self.architectures[0]],
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            rms_norm_eps=self.rms_norm_eps,
            rope_theta=self.rope_theta,
            rope_scaling=None if self.rope_scaling is None else self.rope_scaling.to_hf_dict(),
            max_position_embeddings=self.max_position_embeddings,
            tie_word_embeddings=self.tie_word_embeddings,
            attention_bias=self.attention_bias,
            hidden_act=self.hidden_act,
            use_sliding_window=False,
            bos_token_id=self.bos_token_id,
            eos_token_id=_json_eos(self.eos_token_id),
            pad_token_id=self.pad_token_id,
            torch_dtype=torch_dtype or self.torch_dtype,
        )
        if self.is_moe:
            out.update(
                num_experts=self.num_experts,
                num_experts_per_tok=self.num_experts_per_tok,
                moe_intermediate_size=self.moe_intermediate_size,
                norm_topk_prob=self.norm_topk_prob,
                decoder_sparse_step=self.decoder_sparse_step,
                mlp_only_layers=list(self.mlp_only_layers),
                router_aux_loss_coef=self.router_aux_loss_coef,
            )
        return dict(sorted(out.items()))


# Keys read by the parser (everything else goes to extra_json). transformers 5 writes a few that say the
# same as the Hub dialect, listed so they are not carried twice.
_CONSUMED = {
    "architectures", "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta", "rope_scaling",
    "rope_parameters", "max_position_embeddings", "tie_word_embeddings", "attention_bias", "hidden_act",
    "num_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob",
    "decoder_sparse_step", "mlp_only_layers", "router_aux_loss_coef", "bos_token_id", "eos_token_id",
    "pad_token_id", "torch_dtype", "dtype", "use_sliding_window", "layer_types", "partial_rotary_factor",
    "original_max_position_embeddings", "transformers_version",
}  # fmt: skip


def _json_eos(eos: int | tuple[int, ...] | None) -> int | list[int] | None:
    return list(eos) if isinstance(eos, tuple) else eos


def _required(raw: dict[str, Any], name: str) -> Any:
    if name not in raw or raw[name] is None:
        raise ValueError(f"config.json is missing required field {name!r}")
    return raw[name]


def _int(raw: dict[str, Any], name: str, default: Any = ...) -> Any:
    value = _required(raw, name) if default is ... else raw.get(name, default)
    if value is None:
        return None
    if not is_int(value):
        raise ValueError(f"config.json field {name!r} must be an int, got {value!r}")
    return value


def _number(raw: dict[str, Any], name: str, default: Any = ...) -> float:
    value = _required(raw, name) if default is ... else raw.get(name, default)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(f"config.json field {name!r} must be a number, got {value!r}")
    return float(value)


def _bool(raw: dict[str, Any], name: str, default: bool) -> bool:
    value = raw.get(name, default)
    if not isinstance(value, bool):
        raise ValueError(f"config.json field {name!r} must be true or false, got {value!r}")
    return value


def _parse_rope(raw: dict[str, Any]) -> tuple[float, RopeScaling | None]:
    params = raw.get("rope_parameters")
    if params is not None:
        field = "rope_parameters"
    else:
        params, field = raw.get("rope_scaling"), "rope_scaling"
    if params is not None and not isinstance(params, dict):
        raise ValueError(f"config.json field {field!r} must be an object or null, got {params!r}")
    params = dict(params or {})
    if any(isinstance(v, dict) for v in params.values()):
        raise ValueError(f"per-layer-type RoPE parameters are not supported: {field}={params!r}")
    unknown = sorted(set(params) - _ROPE_KEYS)
    if unknown:
        raise ValueError(f"config.json {field} has unknown keys {unknown} (value {params!r})")
    for where, value in (
        ("partial_rotary_factor", raw.get("partial_rotary_factor")),
        (f"{field}.partial_rotary_factor", params.get("partial_rotary_factor")),
    ):
        if value not in (None, 1, 1.0):
            raise ValueError(f"{where} must be 1 (full rotary), got {value!r}")
    theta = params.get("rope_theta", raw.get("rope_theta"))
    if theta is None:
        raise ValueError(
            "config.json is missing required field 'rope_theta' (top level or in rope_parameters)"
        )
    theta = _number({"rope_theta": theta}, "rope_theta")
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type == "default":
        return theta, None
    if rope_type not in ("linear", "yarn"):
        raise ValueError(f"{field}.rope_type must be 'default', 'linear' or 'yarn', got {rope_type!r}")
    original = None
    if rope_type == "yarn":
        # transformers' standardize_rope_params gives a top-level value priority over the RoPE dict's.
        original = raw.get("original_max_position_embeddings")
        if original is None:
            original = params.get("original_max_position_embeddings", raw.get("max_position_embeddings"))
        original = _int({"original_max_position_embeddings": original}, "original_max_position_embeddings")
    factor = params.get("factor")
    if factor is None and rope_type == "yarn":
        factor = _int(raw, "max_position_embeddings") / original
    factor = _number({f"{field}.factor": factor}, f"{field}.factor")
    optional = {
        k: params.get(k) for k in ("attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim")
    }
    for name, value in optional.items():
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
            raise ValueError(f"{field}.{name} must be a number, got {value!r}")
    truncate = params.get("truncate")
    if truncate is not None and not isinstance(truncate, bool):
        raise ValueError(f"{field}.truncate must be true or false, got {truncate!r}")
    return theta, RopeScaling(
        rope_type=rope_type,
        factor=factor,
        original_max_position_embeddings=original,
        truncate=truncate,
        **{k: None if v is None else float(v) for k, v in optional.items()},
    )


def _parse(raw: dict[str, Any]) -> ArchConfig:
    architectures = raw.get("architectures")
    if not isinstance(architectures, list) or len(architectures) != 1 or architectures[0] not in _MODEL_TYPES:
        raise ValueError(
            f"config.json field 'architectures' must be [{DENSE!r}] or [{MOE!r}], got {architectures!r}"
        )
    is_moe = architectures[0] == MOE
    model_type = raw.get("model_type")
    if model_type is not None and model_type != _MODEL_TYPES[architectures[0]]:
        raise ValueError(
            f"config.json field 'model_type' must be {_MODEL_TYPES[architectures[0]]!r} for "
            f"{architectures[0]}, got {model_type!r}"
        )
    if raw.get("use_sliding_window", False) is not False:
        raise ValueError(
            "use_sliding_window must be false (sliding-window attention is not supported), got "
            f"{raw['use_sliding_window']!r}"
        )
    for i, kind in enumerate(raw.get("layer_types") or ()):
        if kind != "full_attention":
            raise ValueError(f"layer_types[{i}] must be 'full_attention', got {kind!r}")
    if raw.get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act must be 'silu', got {raw['hidden_act']!r}")
    heads = _int(raw, "num_attention_heads")
    hidden = _int(raw, "hidden_size")
    positive_int("num_attention_heads", heads)  # checked here because the default head_dim divides by it
    # An absent or null optional size takes HF's default; any value given (0 included) is validated as given.
    kv_heads = _int(raw, "num_key_value_heads", None)
    head_dim = _int(raw, "head_dim", None)
    theta, scaling = _parse_rope(raw)
    fields: dict[str, Any] = dict(
        architectures=tuple(architectures),
        vocab_size=_int(raw, "vocab_size"),
        hidden_size=hidden,
        intermediate_size=_int(raw, "intermediate_size"),
        num_hidden_layers=_int(raw, "num_hidden_layers"),
        num_attention_heads=heads,
        num_key_value_heads=heads if kv_heads is None else kv_heads,
        head_dim=(hidden // heads if is_moe else 128) if head_dim is None else head_dim,
        rms_norm_eps=_number(raw, "rms_norm_eps"),
        rope_theta=theta,
        rope_scaling=scaling,
        max_position_embeddings=_int(raw, "max_position_embeddings"),
        tie_word_embeddings=_bool(raw, "tie_word_embeddings", False),
        attention_bias=_bool(raw, "attention_bias", False),
        bos_token_id=_int(raw, "bos_token_id", None),
        pad_token_id=_int(raw, "pad_token_id", None),
        torch_dtype=raw.get("torch_dtype", raw.get("dtype")),
    )
    eos = raw.get("eos_token_id")
    if isinstance(eos, list):
        if not all(is_int(e) for e in eos):
            raise ValueError(
                f"config.json field 'eos_token_id' must be an int or a list of ints, got {eos!r}"
            )
        eos = tuple(eos)
    elif eos is not None:
        eos = _int(raw, "eos_token_id")
    fields["eos_token_id"] = eos
    if is_moe:
        experts = raw.get("num_experts", raw.get("num_local_experts"))
        if (
            "num_experts" in raw
            and "num_local_experts" in raw
            and raw["num_experts"] != raw["num_local_experts"]
        ):
            raise ValueError(
                f"num_experts={raw['num_experts']!r} disagrees with "
                f"num_local_experts={raw['num_local_experts']!r}"
            )
        layers = raw.get("mlp_only_layers") or []
        if not isinstance(layers, list):
            raise ValueError(f"config.json field 'mlp_only_layers' must be a list, got {layers!r}")
        fields.update(
            num_experts=_int({"num_experts": experts}, "num_experts"),
            num_experts_per_tok=_int(raw, "num_experts_per_tok"),
            moe_intermediate_size=_int(raw, "moe_intermediate_size"),
            norm_topk_prob=_bool(raw, "norm_topk_prob", False),
            decoder_sparse_step=_int(raw, "decoder_sparse_step", 1),
            mlp_only_layers=tuple(layers),
            router_aux_loss_coef=_number(raw, "router_aux_loss_coef", 0.001),
        )
    extra = {k: v for k, v in raw.items() if k not in _CONSUMED}
    if not is_moe:
        # A dense config's MoE-looking fields mean nothing to Qwen3ForCausalLM; keep them verbatim.
        extra.update(
            {
                k: raw[k]
                for k in (
                    "num_experts",
                    "num_local_experts",
                    "num_experts_per_tok",
                    "moe_intermediate_size",
                    "norm_topk_prob",
                    "decoder_sparse_step",
                    "mlp_only_layers",
                    "router_aux_loss_coef",
                )
                if k in raw
            }
        )
    fields["extra_json"] = json.dumps(extra, sort_keys=True)
    return ArchConfig(**fields)
