"""Bytes per device of the trainer on a mesh preset, measured by the compiler; the largest context that fits.

    python tools/mesh_memory.py                                  # the default table (H200 and TPU presets)
    python tools/mesh_memory.py --preset h200x8 --model qwen3-30b-a3b
    python tools/mesh_memory.py --preset v5p-64 --model qwen3-30b-a3b --remat minimal --markdown out.md

For a preset (`conf/mesh/<name>.yaml`, with whatever axes `MeshConfig` has: a `context` axis shards the
row's tokens) and a model (Qwen3 MoE architectures written out below from their HF config.json), on a
mesh of the preset's shape over this process's CPU devices (as many as the preset has: the tool asks JAX
for them before it starts), nothing allocated:

- params, optimiser, grads: the train state (fp32 master weights and AdamW moments, `train/state.py`) from
  `jax.eval_shape`, each leaf's shard under the preset's rules counted; grads = the fp32 accumulator of
  `lax.scan` plus one micro-batch's gradient (2 x params);
- batch: the packed batch of `--micro-batches` micro-batches of one row per batch shard (token, target,
  position, segment, mask, advantage and behaviour log-prob fields, and the int32 routing [L, K] per token);
- activations: XLA's compiled temporaries (`memory_analysis().temp_size_in_bytes`, per device) of the
  forward and backward of the model's own code at the preset's real shapes, bf16 compute, one row of the
  context per batch shard (a preset whose batch takes no expert axis, as h200x8_long (one row) or
  h200x8x8_long (one row per host), measures rows split along their tokens by its `seq` rule), under
  `--remat` (`train.remat`): a scan of one decoder layer (`temp_1`) and of two (`temp_2`), whose
  difference less the same difference on a 128-token row (the second layer's weight buffers, which do not
  grow with the row) is what one more layer keeps for the backward (`kept`), and the log-prob head's
  gradient (`head`: the fused kernel on the final hidden states). The model's L layers need L x kept +
  max(temp_1, head): every layer's saved state, plus the larger of one layer's and the head's working sets.
  Whatever attention, MoE or kernels the model uses is what gets compiled, so a new attention shows up here
  without touching this tool.

"fits" = the largest context, in steps of `--step` tokens (doubling, then bisecting), whose sum stays within
`--device-gib` (default: the preset's device, `DEVICE_GIB`) x (1 - `--headroom`). XLA:CPU compiles the
CPU lowering (the MoE's tiled experts, the XLA attention and log-prob paths); the GPU / TPU kernels keep
the same linear shapes.
"""

from __future__ import annotations

import argparse
import functools
import math
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import yaml
from flax import nnx
from jax.sharding import Mesh, NamedSharding

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from legorl_jax.config import MESH_AXES, REMAT_POLICIES, DistributedConfig, MeshConfig, TrainConfig  # noqa: E402
from legorl_jax.kernels.logprobs import token_logprobs  # noqa: E402
from legorl_jax.model.architecture import ArchConfig  # noqa: E402
from legorl_jax.model.decoder import LayerContext, LayerRun  # noqa: E402
from legorl_jax.model.policy import Policy, positions_from_segments  # noqa: E402
from legorl_jax.model.sharding import (  # noqa: E402
    Rules,
    logical_to_spec,
    rules_from_config,
    state_shardings,
    use_rules,
)
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
# A tiny MoE of the tests' size: a fast table on the 8-device CPU preset (`--preset cpu8 --model tiny-moe`).
MODELS["tiny-moe"] = ArchConfig(
    **(_QWEN3_MOE | dict(vocab_size=256, head_dim=8, num_experts=4, num_experts_per_tok=2)),
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    moe_intermediate_size=16,
)
# Memory per device of each preset's accelerator, GiB (H200: 141 GB, of which ~139 GiB usable as the
# device reports; TPU v5p: 95 GB per chip; v6e: 32 GB per chip).
DEVICE_GIB = {"h200": 139.0, "v5p": 95e9 / GIB, "v6e": 32e9 / GIB}
# (preset, model) rows of the default table: the H200 presets and the TPU ones beside them.
DEFAULT_ROWS = (
    ("h200x8", "qwen3-30b-a3b"),
    ("h200x8_long", "qwen3-30b-a3b"),
    ("h200x8x2", "qwen3-30b-a3b"),
    ("h200x8x8", "qwen3-235b-a22b"),
    ("h200x8x8_long", "qwen3-235b-a22b"),
    ("v5p-8", "qwen3-30b-a3b"),
    ("v5p-64", "qwen3-30b-a3b"),
    ("v6e-8", "qwen3-30b-a3b"),
)
_ROW_FIELDS_BYTES = (
    7 * 4
)  # tokens, targets, positions, segment_ids (int32); mask, advantages, logprobs (fp32)
COMPUTE = jnp.bfloat16


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


def device_gib_of(preset: str) -> float:
    """The memory of one device of `preset` (by its name's prefix, `DEVICE_GIB`)."""
    for prefix, gib in DEVICE_GIB.items():
        if preset.startswith(prefix):
            return gib
    raise ValueError(
        f"no device memory known for preset {preset!r} ({sorted(DEVICE_GIB)}): give --device-gib"
    )


def axis_sizes(mesh_config: MeshConfig) -> dict[str, int]:
    """The preset's mesh axes (every axis `MESH_AXES` has, `context` included where it exists)."""
    sizes = {axis: getattr(mesh_config, axis) for axis in MESH_AXES}
    if sizes.get("fsdp") == -1:
        raise ValueError("the preset's fsdp is -1 (all devices): a table needs a fixed device count")
    return sizes


def device_mesh(mesh_config: MeshConfig, devices: list | None = None) -> Mesh:
    """A mesh of the preset's shape over the first devices of this process (CPU devices in this tool)."""
    sizes = axis_sizes(mesh_config)
    needed = math.prod(sizes.values())
    devices = list(jax.devices() if devices is None else devices)
    if len(devices) < needed:
        raise ValueError(f"the preset needs {needed} devices, this process has {len(devices)}")
    grid = np.asarray(devices[:needed], dtype=object).reshape(tuple(sizes.values()))
    return Mesh(grid, tuple(sizes))


def _shard_bytes(shape: tuple[int, ...], dtype, sharding: NamedSharding) -> int:
    return math.prod(sharding.shard_shape(shape)) * jax.numpy.dtype(dtype).itemsize


def state_bytes(arch: ArchConfig, mesh_config: MeshConfig, mesh: Mesh) -> dict[str, int]:
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


def batch_shards(rules: Rules, mesh: Mesh) -> int:
    sizes = dict(zip(mesh.axis_names, mesh.devices.shape, strict=True))
    return math.prod(sizes[a] for a in dict(rules)["batch"])


def _sharded(shape: tuple[int, ...], dtype, axes: tuple, mesh: Mesh, rules: Rules) -> jax.ShapeDtypeStruct:
    spec = logical_to_spec(axes, shape, mesh=mesh, rules=rules)
    return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))


def _abstract_state(module: nnx.Module, mesh: Mesh, rules: Rules) -> nnx.State:
    """The module's state as ShapeDtypeStructs carrying their shardings."""
    shardings = state_shardings(module, mesh, rules)
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), nnx.state(module), shardings
    )


def layer_temporaries(
    arch: ArchConfig, mesh: Mesh, rules: Rules, context: int, remat: str, layers: int = 1
) -> int:
    """Compiled temporaries per device of the forward and backward of a scan of `layers` decoder layers
    (the model's own `LayerRun`, fp32 weights, bf16 activations) on one row of `context` tokens per batch
    shard, under the `remat` policy; the output cotangent is an input, as in the real backward."""
    rows = batch_shards(rules, mesh)
    # Built outside the mesh context: under it NNX would constrain the stacked weights as it makes them.
    run = nnx.eval_shape(
        lambda: LayerRun(
            arch,
            arch.is_moe,
            jax.random.split(jax.random.key(0), layers),
            dtype=jnp.float32,
            scan=True,
            remat=remat,
        )
    )
    with jax.set_mesh(mesh), use_rules(rules):
        graphdef = nnx.graphdef(run)
        state = _abstract_state(run, mesh, rules)
        hidden = _sharded((rows, context, arch.hidden_size), COMPUTE, ("batch", "seq", "embed"), mesh, rules)
        segments = _sharded((rows, context), jnp.int32, ("batch", "seq"), mesh, rules)

        def forward_backward(state, h, seg, cotangent):
            def forward(state, h):
                ctx = LayerContext(
                    positions=positions_from_segments(seg), token_mask=seg > 0, segment_ids=seg, slots=None
                )
                out, _, stats, _ = nnx.merge(graphdef, state)(h, ctx, None, None, 0)
                aux = jnp.zeros((), jnp.float32) if stats is None else jnp.sum(stats.prob_sums)
                return out, aux

            (_, aux), vjp = jax.vjp(forward, state, h)
            return vjp((cotangent, jnp.ones_like(aux)))

        compiled = jax.jit(forward_backward).lower(state, hidden, segments, hidden).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


def head_temporaries(arch: ArchConfig, mesh: Mesh, rules: Rules, context: int) -> int:
    """Compiled temporaries per device of the log-prob head's gradient (the fused kernel, fp32 head weights
    cast to bf16) on one row of `context` tokens per batch shard."""
    rows = batch_shards(rules, mesh)
    with jax.set_mesh(mesh), use_rules(rules):
        hidden = _sharded((rows, context, arch.hidden_size), COMPUTE, ("batch", "seq", "embed"), mesh, rules)
        head = _sharded((arch.hidden_size, arch.vocab_size), jnp.float32, ("embed", "vocab"), mesh, rules)
        targets = _sharded((rows, context), jnp.int32, ("batch", "seq"), mesh, rules)

        def gradient(h, w, t):
            def total(h, w):
                lp = token_logprobs(h.reshape(-1, h.shape[-1]), w.astype(COMPUTE), t.reshape(-1))
                return jnp.sum(lp)

            return jax.grad(total, argnums=(0, 1))(h, w)

        compiled = jax.jit(gradient).lower(hidden, head, targets).compile()
    return int(compiled.memory_analysis().temp_size_in_bytes)


def layer_input_bytes(arch: ArchConfig, mesh: Mesh, rules: Rules, context: int) -> int:
    """Bytes per device of a decoder layer's input hidden state ([rows, context, D] bf16, sharded as the
    activations are) on one row of `context` tokens per batch shard."""
    rows = batch_shards(rules, mesh)
    hidden = _sharded((rows, context, arch.hidden_size), COMPUTE, ("batch", "seq", "embed"), mesh, rules)
    return math.prod(hidden.sharding.shard_shape(hidden.shape)) * jnp.dtype(COMPUTE).itemsize


BASELINE_CONTEXT = 128  # a row this short keeps next to nothing: what a second layer adds there is weights


@functools.cache
def _second_layer(arch: ArchConfig, mesh: Mesh, rules: Rules, context: int, remat: str) -> tuple[int, int]:
    one = layer_temporaries(arch, mesh, rules, context, remat, layers=1)
    return one, layer_temporaries(arch, mesh, rules, context, remat, layers=2) - one


@functools.cache
def activations(arch: ArchConfig, mesh: Mesh, rules: Rules, context: int, remat: str) -> dict[str, int]:
    """Measured activation bytes per device at `context` (module docstring).

    What a second scanned layer adds to the temporaries is what it keeps for the backward plus buffers of
    its weights (gathered copies, its gradient before the reduction) that the model needs once at a time,
    not once per layer, and that the grads column already counts. The latter do not grow with the row, so
    they are measured at `BASELINE_CONTEXT` tokens and taken off: `kept` is the per-layer activation.
    XLA may overlap those weight buffers with the long row's working set (h200x8_long at 131,072 tokens:
    the second layer adds 241 MiB there, 597 MiB at 128 tokens), so `kept` is never taken below what
    every remat policy saves, the layer's input hidden state (`layer_input_bytes`)."""
    one, added = _second_layer(arch, mesh, rules, context, remat)
    _, weights = _second_layer(arch, mesh, rules, BASELINE_CONTEXT, remat)
    head = head_temporaries(arch, mesh, rules, context)
    kept = max(layer_input_bytes(arch, mesh, rules, context), added - weights)
    total = arch.num_hidden_layers * kept + max(one, head)
    return {"temp_1": one, "temp_2": one + added, "kept": kept, "head": head, "total": total}


def largest_context(fits, step: int, limit: int) -> int:
    """The largest multiple of `step` up to `limit` for which `fits(context)` holds (0: none), assuming
    memory grows with the context: doubling until it fails, then bisecting between."""
    if not fits(step):
        return 0
    low, high = 1, None  # in units of step: low fits, high does not
    while high is None:
        if low * 2 * step > limit:
            high = limit // step + 1
            if fits((high - 1) * step):
                return (high - 1) * step
            break
        if fits(low * 2 * step):
            low *= 2
        else:
            high = low * 2
    while high - low > 1:
        mid = (low + high) // 2
        if fits(mid * step):
            low = mid
        else:
            high = mid
    return low * step


def table_row(
    preset: str,
    model: str,
    *,
    remat: str = "full",
    device_gib: float | None = None,
    headroom: float = 0.1,
    micro_batches: int = 4,
    step: int = 4096,
    limit: int = 262144,
    report_at: int = 32768,
    arch: ArchConfig | None = None,
    devices: list | None = None,
) -> dict:
    """One row of the table: state bytes, measured activations at `report_at`, the largest context."""
    mesh_config = load_preset(preset)
    mesh = device_mesh(mesh_config, devices)
    rules = rules_from_config(mesh_config)
    arch = MODELS[model] if arch is None else arch
    device_gib = device_gib_of(preset) if device_gib is None else device_gib
    fixed = state_bytes(arch, mesh_config, mesh)
    budget = device_gib * GIB * (1 - headroom)
    routing_bytes = arch.num_moe_layers * arch.num_experts_per_tok * 4

    def batch(context: int) -> int:
        return micro_batches * context * (_ROW_FIELDS_BYTES + routing_bytes)

    def total(context: int) -> int:
        act = activations(arch, mesh, rules, context, remat)["total"]
        return fixed["params"] + fixed["optimiser"] + fixed["grads"] + batch(context) + act

    static = fixed["params"] + fixed["optimiser"] + fixed["grads"]
    fits = 0 if static > budget else largest_context(lambda c: total(c) <= budget, step, limit)
    measured = activations(arch, mesh, rules, report_at, remat)
    devices_n = int(mesh.devices.size)
    return {
        "preset": preset,
        "model": model,
        "remat": remat,
        "devices": devices_n,
        "hosts": max(1, devices_n // 8),
        "device_gib": device_gib,
        "params_b": fixed["param_count"] / 1e9,
        "params": fixed["params"] / GIB,
        "optimiser": fixed["optimiser"] / GIB,
        "grads": fixed["grads"] / GIB,
        "batch_per_1k": batch(1024) / GIB,
        "report_at": report_at,
        "layer_temp": measured["temp_1"] / GIB,
        "layer_kept": measured["kept"] / GIB,
        "head": measured["head"] / GIB,
        "activations": measured["total"] / GIB,
        "fits": fits,
        "fits_total": total(fits) / GIB if fits else None,
        "batch_shards": batch_shards(rules, mesh),
    }


def render(rows: list[dict], headroom: float, micro_batches: int) -> str:
    at = rows[0]["report_at"] if rows else 0
    lines = [
        f"Bytes per device (GiB), {headroom:.0%} of each device kept free, fp32 master weights, batch of "
        f"{micro_batches} micro-batches of one row per batch shard; activations compiled by XLA at {at:,} "
        "tokens a row (one layer's temporaries, what each further layer keeps, the log-prob head's, and the "
        "model's total):",
        "",
        "| preset | model | remat | devices | params | optimiser | grads | batch / 1k tokens | layer temp | "
        "kept / layer | head | activations | largest context |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['preset']} ({r['devices']} x {r['device_gib']:.0f} GiB) | {r['model']} "
            f"({r['params_b']:.1f} B) | {r['remat']} | {r['devices']} | {r['params']:.2f} | "
            f"{r['optimiser']:.2f} | {r['grads']:.2f} | {r['batch_per_1k']:.3f} | {r['layer_temp']:.2f} | "
            f"{r['layer_kept']:.3f} | {r['head']:.2f} | {r['activations']:.2f} | "
            + (f"{r['fits']:,} tokens |" if r["fits"] else "does not fit |")
        )
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", help="one conf/mesh preset (default: the table's rows)")
    parser.add_argument("--model", choices=sorted(MODELS), help="with --preset")
    parser.add_argument("--remat", choices=REMAT_POLICIES, default=TrainConfig().remat)
    parser.add_argument("--device-gib", type=float, help="memory per device (default: the preset's)")
    parser.add_argument("--headroom", type=float, default=0.1)
    parser.add_argument("--micro-batches", type=int, default=4)
    parser.add_argument("--step", type=int, default=4096, help="granularity of the context search")
    parser.add_argument("--limit", type=int, default=262144, help="largest context tried")
    parser.add_argument("--report-at", type=int, default=32768, help="context of the activation columns")
    parser.add_argument("--markdown", type=pathlib.Path)
    args = parser.parse_args(argv)
    if (args.preset is None) != (args.model is None):
        parser.error("--preset and --model go together")
    if not 0 <= args.headroom < 1:
        parser.error(f"--headroom must be in [0, 1), got {args.headroom}")
    pairs = DEFAULT_ROWS if args.preset is None else ((args.preset, args.model),)
    needed = max(math.prod(axis_sizes(load_preset(p)).values()) for p, _ in pairs)
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", needed)  # before the backend starts
    rows = []
    for preset, model in pairs:
        rows.append(
            table_row(
                preset,
                model,
                remat=args.remat,
                device_gib=args.device_gib,
                headroom=args.headroom,
                micro_batches=args.micro_batches,
                step=args.step,
                limit=args.limit,
                report_at=args.report_at,
            )
        )
        print(render(rows[-1:], args.headroom, args.micro_batches).splitlines()[-1], flush=True)
    text = render(rows, args.headroom, args.micro_batches)
    print(text)
    if args.markdown is not None:
        args.markdown.write_text(text + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
