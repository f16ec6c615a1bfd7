"""Bytes per device of the trainer on a mesh preset, from the abstract state (nothing is allocated), and the
largest context that fits.

    python tools/mesh_memory.py                                  # the multi-host presets' table
    python tools/mesh_memory.py --preset h200x8 --model qwen3-30b-a3b --device-gib 139
    python tools/mesh_memory.py --markdown out.md

For a preset (`conf/mesh/<name>.yaml`) and a model (Qwen3 MoE architectures written out below from their
HF config.json), the policy is built with `nnx.eval_shape` and the train state (fp32 master weights and
AdamW moments, `train/state.py`) with `jax.eval_shape`; each leaf is sharded by the preset's rules on an
`AbstractMesh` of the preset's axis sizes (no devices needed) and its shard counted. Columns, per device:

- params, optimiser (AdamW mu and nu, sharded like the parameters: what the trainer's compiled init
  gives them), grads (the fp32 accumulator of `lax.scan` plus one micro-batch's gradient);
- batch: the packed batch of `--micro-batches` micro-batches (token, target, position, segment, mask,
  advantage and behaviour log-prob fields, and the int32 routing [L, K] per token), rows sharded over
  the logical `batch` axis with one row of the context per batch shard per micro-batch;
- activations of one micro-batch with rematerialised layers (`model.remat=true`): each layer's input
  kept for the backward (bf16), and one layer's working set recomputed in the backward: q/k/v/o,
  the routed experts' gate/up/down rows (top-k × 3 × moe_intermediate + top-k × hidden per token), and
  the attention scores and probabilities of the largest causal query block (`attention.CAUSAL_CHUNKS`
  blocks: the last sees every key), float32, forward and gradient. An estimate, not a compiled figure:
  XLA's temporaries come on top, hence the `--headroom` (default 10 %) left free.

"fits" = the largest context, in steps of 1024 tokens, at which the sum stays within `--device-gib` ×
(1 - headroom). Dense attention is quadratic in the context, so it is what bounds the context today.
"""

from __future__ import annotations

import argparse
import math
import pathlib
import sys

import jax
import optax
import yaml
from flax import nnx
from jax.sharding import AbstractMesh, NamedSharding

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from legorl_jax.config import MESH_AXES, DistributedConfig, MeshConfig, TrainConfig  # noqa: E402
from legorl_jax.model.architecture import ArchConfig  # noqa: E402
from legorl_jax.model.attention import CAUSAL_CHUNKS  # noqa: E402
from legorl_jax.model.policy import Policy  # noqa: E402
from legorl_jax.model.sharding import logical_to_spec, rules_from_config, state_shardings  # noqa: E402
from legorl_jax.train.state import init_train_state, make_optimizer  # noqa: E402

GIB = 1024**3
_QWEN3_MOE = dict(
    architectures=("Qwen3MoeForCausalLM",),
    vocab_size=151936,
    head_dim=128,
    rms_norm_eps=1e-6,
    rope_theta=1000000.0,
    max_position_embeddings=40960,
    num_experts=128,
    num_experts_per_tok=8,
    norm_topk_prob=True,
)
MODELS = {
    # Qwen/Qwen3-30B-A3B config.json
    "qwen3-30b-a3b": ArchConfig(
        **_QWEN3_MOE,
        hidden_size=2048,
        intermediate_size=6144,
        num_hidden_layers=48,
        num_attention_heads=32,
        num_key_value_heads=4,
        moe_intermediate_size=768,
    ),
    # Qwen/Qwen3-235B-A22B config.json
    "qwen3-235b-a22b": ArchConfig(
        **_QWEN3_MOE,
        hidden_size=4096,
        intermediate_size=12288,
        num_hidden_layers=94,
        num_attention_heads=64,
        num_key_value_heads=4,
        moe_intermediate_size=1536,
    ),
}
# (preset, model) rows of the default table: the multi-host presets and the one-host one they extend.
DEFAULT_ROWS = (
    ("h200x8", "qwen3-30b-a3b"),
    ("h200x8x2", "qwen3-30b-a3b"),
    ("h200x8x2", "qwen3-235b-a22b"),
    ("h200x8x8", "qwen3-235b-a22b"),
)
_ROW_FIELDS_BYTES = (
    7 * 4
)  # tokens, targets, positions, segment_ids (int32); mask, advantages, logprobs (fp32)


def load_preset(name: str) -> MeshConfig:
    """`conf/mesh/<name>.yaml` as a MeshConfig (its own keys over the schema defaults)."""
    path = ROOT / "conf" / "mesh" / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise ValueError(f"no mesh preset {name!r}; known: {known}")
    raw = yaml.safe_load(path.read_text()) or {}
    raw.pop("defaults", None)
    raw["distributed"] = DistributedConfig(**raw.get("distributed", {}))
    return MeshConfig(**raw)


def abstract_mesh(mesh_config: MeshConfig, devices: int | None = None) -> AbstractMesh:
    sizes = {axis: getattr(mesh_config, axis) for axis in MESH_AXES}
    if sizes["fsdp"] == -1:
        if devices is None:
            raise ValueError("the preset's fsdp is -1 (all devices): give --devices")
        sizes["fsdp"] = devices // math.prod(v for k, v in sizes.items() if k != "fsdp")
    return AbstractMesh(tuple(sizes[a] for a in MESH_AXES), MESH_AXES)


def _shard_bytes(shape: tuple[int, ...], dtype, sharding: NamedSharding) -> int:
    return math.prod(sharding.shard_shape(shape)) * jax.numpy.dtype(dtype).itemsize


def state_bytes(arch: ArchConfig, mesh_config: MeshConfig, mesh: AbstractMesh) -> dict[str, int]:
    """Per-device bytes of parameters and AdamW moments, from `jax.eval_shape` of the train state."""
    rules = rules_from_config(mesh_config)
    policy = nnx.eval_shape(lambda: Policy(arch, rngs=nnx.Rngs(params=0), dtype="float32", scan_layers=True))
    shardings = nnx.filter_state(state_shardings(policy, mesh, rules), nnx.Param)
    params = nnx.filter_state(nnx.state(policy), nnx.Param)
    state = jax.eval_shape(lambda p: init_train_state(p, make_optimizer(TrainConfig()), seed=0), params)
    param_leaves = jax.tree.leaves(state.params)
    sharding_leaves = jax.tree.leaves(shardings)
    per_param = [
        _shard_bytes(x.shape, x.dtype, s) for x, s in zip(param_leaves, sharding_leaves, strict=True)
    ]
    opt = 0
    for moment in ("mu", "nu"):  # AdamW's moments mirror the parameters leaf for leaf, sharded like them
        leaves = jax.tree.leaves(optax.tree_utils.tree_get(state.opt_state, moment))
        opt += sum(_shard_bytes(x.shape, x.dtype, s) for x, s in zip(leaves, sharding_leaves, strict=True))
    total_params = sum(x.size for x in param_leaves)
    return {
        "params": sum(per_param),
        "optimiser": opt,
        "grads": 2 * sum(per_param),
        "param_count": total_params,
    }


def batch_shards(mesh_config: MeshConfig, mesh: AbstractMesh) -> int:
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes, strict=True))
    return math.prod(sizes[a] for a in dict(rules_from_config(mesh_config))["batch"])


def activation_bytes(arch: ArchConfig, mesh_config: MeshConfig, mesh: AbstractMesh, context: int) -> int:
    """One micro-batch's activations per device, one row of `context` tokens (module docstring)."""
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes, strict=True))
    heads_spec = logical_to_spec(
        ("heads",), (arch.num_attention_heads,), mesh=mesh, rules=rules_from_config(mesh_config)
    )
    heads = arch.num_attention_heads // math.prod(sizes[a] for a in (heads_spec[0] or ()))
    bf16, f32 = 2, 4
    h, d = arch.hidden_size, arch.head_dim
    kept = arch.num_hidden_layers * context * h * bf16
    per_token = (
        arch.num_attention_heads * d * 2  # q and the attention output
        + 2 * arch.num_key_value_heads * d  # k, v
        + arch.num_experts_per_tok * (3 * arch.moe_intermediate_size + h)  # routed gate/up/act, down
        + 4 * h  # norms, residual, router input
    ) * bf16
    largest_block = context - context * (CAUSAL_CHUNKS - 1) // CAUSAL_CHUNKS
    scores = 2 * 2 * heads * largest_block * context * f32  # scores + probabilities, forward + gradient
    return kept + 2 * per_token * context + scores


def table_row(preset: str, model: str, device_gib: float, headroom: float, micro_batches: int) -> dict:
    mesh_config = load_preset(preset)
    mesh = abstract_mesh(mesh_config)
    arch = MODELS[model]
    fixed = state_bytes(arch, mesh_config, mesh)
    budget = device_gib * GIB * (1 - headroom)
    routing_bytes = arch.num_moe_layers * arch.num_experts_per_tok * 4

    def batch(context: int) -> int:
        return micro_batches * context * (_ROW_FIELDS_BYTES + routing_bytes)

    def total(context: int) -> int:
        return (
            fixed["params"]
            + fixed["optimiser"]
            + fixed["grads"]
            + batch(context)
            + activation_bytes(arch, mesh_config, mesh, context)
        )

    fits = 0
    while total(fits + 1024) <= budget:
        fits += 1024
    return {
        "preset": preset,
        "model": model,
        "devices": math.prod(mesh.axis_sizes),
        "hosts": math.prod(mesh.axis_sizes) // 8,
        "params_b": fixed["param_count"] / 1e9,
        "params": fixed["params"] / GIB,
        "optimiser": fixed["optimiser"] / GIB,
        "grads": fixed["grads"] / GIB,
        "batch_per_1k": batch(1024) / GIB,
        "act_32k": activation_bytes(arch, mesh_config, mesh, 32768) / GIB,
        "fits": fits,
        "batch_shards": batch_shards(mesh_config, mesh),
    }


def render(rows: list[dict], device_gib: float, headroom: float, micro_batches: int) -> str:
    lines = [
        f"Bytes per device (GiB) on {device_gib:g} GiB devices, {headroom:.0%} kept free, fp32 master "
        f"weights, batch of {micro_batches} micro-batches of one row per batch shard:",
        "",
        "| preset | model | devices | params | optimiser | grads | batch / 1k tokens | activations @ 32k | "
        "largest context |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['preset']} ({r['hosts']} host{'s' if r['hosts'] > 1 else ''}) | {r['model']} "
            f"({r['params_b']:.1f} B) | {r['devices']} | {r['params']:.2f} | {r['optimiser']:.2f} | "
            f"{r['grads']:.2f} | {r['batch_per_1k']:.3f} | {r['act_32k']:.1f} | "
            + (f"{r['fits']:,} tokens |" if r["fits"] else "does not fit |")
        )
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", help="one conf/mesh preset (default: the table's rows)")
    parser.add_argument("--model", choices=sorted(MODELS), help="with --preset")
    parser.add_argument("--device-gib", type=float, default=139.0, help="memory per device (H200: ~139 GiB)")
    parser.add_argument("--headroom", type=float, default=0.1)
    parser.add_argument("--micro-batches", type=int, default=4)
    parser.add_argument("--markdown", type=pathlib.Path)
    args = parser.parse_args(argv)
    if (args.preset is None) != (args.model is None):
        parser.error("--preset and --model go together")
    if not 0 <= args.headroom < 1:
        parser.error(f"--headroom must be in [0, 1), got {args.headroom}")
    pairs = DEFAULT_ROWS if args.preset is None else ((args.preset, args.model),)
    rows = [table_row(p, m, args.device_gib, args.headroom, args.micro_batches) for p, m in pairs]
    text = render(rows, args.device_gib, args.headroom, args.micro_batches)
    print(text)
    if args.markdown is not None:
        args.markdown.write_text(text + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
