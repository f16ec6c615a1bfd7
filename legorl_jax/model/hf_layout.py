"""The HF tensor layout of a policy: names and shapes, conversion both ways, and building a policy.

HF layout (`save_pretrained` of Qwen3 / Qwen3-MoE): linear weights `[out, in]`;
experts per expert, `model.layers.{i}.mlp.experts.{e}.{gate,up}_proj.weight [F, D]`, `...down_proj.weight
[D, F]`; router `model.layers.{i}.mlp.gate.weight [E, D]`; dense MLPs `mlp.{gate,up,down}_proj`; q/k
norms `self_attn.{q,k}_norm.weight [head_dim]`; no `lm_head.weight` when embeddings are tied.

Ours: weights `[in, out]`, attention head-split (`q_proj [D, N, H]`, `o_proj [N, H, D]`), experts
stacked (`gate_proj [E, D, F]`), router `[D, E]`, and, with `scan_layers`, every layer parameter of a
run stacked on a leading axis. `hf_shapes` is the single statement of the HF side; `policy_tensors` and
`policy_from_tensors` are exact inverses (transposes and reshapes only), so load -> save(fp32) -> load
is bit-exact.

`init_policy` draws HF-layout tensors with numpy (normal(init_std = 0.02) weights, unit norms, zero biases;
each tensor from its own seed derived from its name) and builds the policy through `policy_from_tensors`, the
same path as `load_hf`: the layout flags cannot change the weights, and random init compiles nothing.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Iterator

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from legorl_jax.model import sharding
from legorl_jax.model.architecture import ArchConfig
from legorl_jax.model.layers import INIT_STD
from legorl_jax.model.policy import Policy, as_dtype, layer_runs
from legorl_jax.validate import is_int, positive_number

NUMPY_DTYPES = {
    "float32": np.dtype(np.float32),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float16": np.dtype(np.float16),
}


def _reshaper(*shape: int) -> Callable[[np.ndarray], np.ndarray]:
    """A tensor's reshape to `shape`, as an entry's `to_ours` / `to_hf`."""
    return lambda x: x.reshape(shape)


@dataclasses.dataclass(frozen=True)
class Entry:
    """One of our parameters and the HF tensor(s) it is made of."""

    path: tuple[str, ...]  # inside a decoder layer, or from the policy root for top-level entries
    hf_names: tuple[str, ...]  # one name, or one per expert (stacked on our axis 0)
    to_ours: Callable[[np.ndarray], np.ndarray]  # one HF tensor -> our array (or one expert's slice)
    to_hf: Callable[[np.ndarray], np.ndarray]  # inverse
    per_expert: bool = False  # hf_names[e] is expert e's slice of our array


def _linear(path: tuple[str, ...], name: str) -> Entry:
    return Entry(path, (name,), lambda w: w.T, lambda w: w.T)


def _same(path: tuple[str, ...], name: str) -> Entry:
    return Entry(path, (name,), lambda w: w, lambda w: w)


def _heads_in(path: tuple[str, ...], name: str, d: int, heads: int, h: int) -> Entry:
    """q/k/v: HF [heads*H, D] <-> ours [D, heads, H]."""
    return Entry(path, (name,), lambda w: w.T.reshape(d, heads, h), lambda w: w.reshape(d, heads * h).T)


def layer_entries(config: ArchConfig, layer: int) -> list[Entry]:
    c, p = config, f"model.layers.{layer}."
    d, n, k, h = c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim
    entries = [
        _same(("input_layernorm", "weight"), p + "input_layernorm.weight"),
        _same(("post_attention_layernorm", "weight"), p + "post_attention_layernorm.weight"),
        _heads_in(("self_attn", "q_proj"), p + "self_attn.q_proj.weight", d, n, h),
        _heads_in(("self_attn", "k_proj"), p + "self_attn.k_proj.weight", d, k, h),
        _heads_in(("self_attn", "v_proj"), p + "self_attn.v_proj.weight", d, k, h),
        Entry(
            ("self_attn", "o_proj"),
            (p + "self_attn.o_proj.weight",),
            lambda w: w.T.reshape(n, h, d),
            lambda w: w.reshape(n * h, d).T,
        ),
        _same(("self_attn", "q_norm", "weight"), p + "self_attn.q_norm.weight"),
        _same(("self_attn", "k_norm", "weight"), p + "self_attn.k_norm.weight"),
    ]
    if c.attention_bias:
        for name, heads in (("q", n), ("k", k), ("v", k)):
            entries.append(
                Entry(
                    ("self_attn", f"{name}_bias"),
                    (p + f"self_attn.{name}_proj.bias",),
                    _reshaper(heads, h),
                    _reshaper(heads * h),
                )
            )
        entries.append(_same(("self_attn", "o_bias"), p + "self_attn.o_proj.bias"))
    if c.layer_is_moe[layer]:
        entries.append(_linear(("mlp", "gate"), p + "mlp.gate.weight"))
        for proj in ("gate_proj", "up_proj", "down_proj"):
            names = tuple(p + f"mlp.experts.{e}.{proj}.weight" for e in range(c.num_experts))
            entries.append(Entry(("mlp", proj), names, lambda w: w.T, lambda w: w.T, per_expert=True))
    else:
        for proj in ("gate_proj", "up_proj", "down_proj"):
            entries.append(_linear(("mlp", proj), p + f"mlp.{proj}.weight"))
    return entries


def top_entries(config: ArchConfig) -> list[Entry]:
    entries = [
        _same(("embed_tokens",), "model.embed_tokens.weight"),
        _same(("norm", "weight"), "model.norm.weight"),
    ]
    if not config.tie_word_embeddings:
        entries.append(_linear(("lm_head",), "lm_head.weight"))
    return entries


def hf_shapes(config: ArchConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor an HF checkpoint of `config` holds, with its shape."""
    c = config
    d, n, k, h, v = c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.vocab_size
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d,)}
    if not c.tie_word_embeddings:
        shapes["lm_head.weight"] = (v, d)
    for i, is_moe in enumerate(c.layer_is_moe):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,)})
        shapes.update({p + "self_attn.q_proj.weight": (n * h, d), p + "self_attn.o_proj.weight": (d, n * h)})
        shapes.update({p + "self_attn.k_proj.weight": (k * h, d), p + "self_attn.v_proj.weight": (k * h, d)})
        shapes.update({p + "self_attn.q_norm.weight": (h,), p + "self_attn.k_norm.weight": (h,)})
        if c.attention_bias:
            shapes.update({p + "self_attn.q_proj.bias": (n * h,), p + "self_attn.o_proj.bias": (d,)})
            shapes.update({p + "self_attn.k_proj.bias": (k * h,), p + "self_attn.v_proj.bias": (k * h,)})
        if is_moe:
            f = c.moe_intermediate_size
            shapes[p + "mlp.gate.weight"] = (c.num_experts, d)
            for e in range(c.num_experts):
                q = p + f"mlp.experts.{e}."
                shapes.update(
                    {
                        q + "gate_proj.weight": (f, d),
                        q + "up_proj.weight": (f, d),
                        q + "down_proj.weight": (d, f),
                    }
                )
        else:
            f = c.intermediate_size
            shapes.update({p + "mlp.gate_proj.weight": (f, d), p + "mlp.up_proj.weight": (f, d)})
            shapes[p + "mlp.down_proj.weight"] = (d, f)
    return shapes


def _layer_slots(policy_layout: tuple[tuple[bool, int, int], ...]) -> Iterator[tuple[int, int, int]]:
    """(layer, run index, index inside the run) for every decoder layer."""
    for run, (_, first, count) in enumerate(policy_layout):
        for j in range(count):
            yield first + j, run, j


def _get(tree: dict, path: tuple) -> object:
    for key in path:
        tree = tree[key]
    return tree


def _set(tree: dict, path: tuple, value: object) -> None:
    for key in path[:-1]:
        tree = tree[key]
    tree[path[-1]] = value


def _from_hf(entry: Entry, read: Callable[[str], np.ndarray]) -> np.ndarray:
    parts = [entry.to_ours(read(name)) for name in entry.hf_names]
    return np.stack(parts) if entry.per_expert else parts[0]


def policy_from_tensors(
    config: ArchConfig,
    read: Callable[[str], np.ndarray],
    *,
    dtype: str = "float32",
    compute_dtype: str | None = None,
    scan_layers: bool = True,
    remat: str | bool = False,
    mesh: Mesh | None = None,
    rules: sharding.Rules | None = None,
) -> Policy:
    """A policy whose parameters are the HF tensors `read(name)` returns (already shape-checked).

    With `mesh`, each parameter goes straight to its sharding (`sharding.state_shardings`), so no device
    ever holds more than its shards; without, to the default device. One parameter (for scanned runs:
    one stack of layers) is on the host at a time.
    """
    as_dtype(dtype)
    target = NUMPY_DTYPES[dtype]

    def build() -> Policy:
        return Policy(config, rngs=nnx.Rngs(params=0), dtype=dtype, compute_dtype=compute_dtype,
                      scan_layers=scan_layers, remat=remat)  # fmt: skip

    abstract = nnx.eval_shape(build)
    graphdef, state = nnx.split(abstract)
    pure = nnx.to_pure_dict(state)
    placement = None if mesh is None else nnx.to_pure_dict(sharding.state_shardings(abstract, mesh, rules))

    def put(path: tuple, value: np.ndarray) -> None:
        array = jnp.asarray(value) if placement is None else jax.device_put(value, _get(placement, path))
        _set(pure, path, array)

    for entry in top_entries(config):
        put(entry.path, _from_hf(entry, read).astype(target))
    for run, (_, first, count) in enumerate(layer_runs(config)):
        per_layer = [layer_entries(config, first + j) for j in range(count)]
        for k, entry in enumerate(per_layer[0]):
            values = [_from_hf(entries[k], read).astype(target) for entries in per_layer]
            if scan_layers:
                put(("runs", run, "layers", *entry.path), np.stack(values))
            else:
                for j, value in enumerate(values):
                    put(("runs", run, "layers", j, *entry.path), value)
    nnx.replace_by_pure_dict(state, pure)
    return nnx.merge(graphdef, state)


def policy_tensors(policy: Policy, dtype: str | None = None) -> dict[str, np.ndarray]:
    """The policy's parameters as HF tensors, in `dtype` (the parameter dtype by default)."""
    dtype = dtype or policy.dtype
    if dtype not in NUMPY_DTYPES:
        raise ValueError(f"dtype must be one of {tuple(NUMPY_DTYPES)}, got {dtype!r}")
    target = NUMPY_DTYPES[dtype]
    config = policy.config
    pure = nnx.to_pure_dict(nnx.state(policy))
    out: dict[str, np.ndarray] = {}

    def emit(entry: Entry, ours: np.ndarray) -> None:
        if entry.per_expert:
            for e, name in enumerate(entry.hf_names):
                out[name] = np.ascontiguousarray(entry.to_hf(ours[e]))
        else:
            out[entry.hf_names[0]] = np.ascontiguousarray(entry.to_hf(ours))

    for entry in top_entries(config):
        emit(entry, np.asarray(_get(pure, entry.path)))
    for layer, run, j in _layer_slots(policy.run_layout):
        for entry in layer_entries(config, layer):
            if policy.scan_layers:
                ours = np.asarray(_get(pure, ("runs", run, "layers", *entry.path)))[j]
            else:
                ours = np.asarray(_get(pure, ("runs", run, "layers", j, *entry.path)))
            emit(entry, ours)
    return {name: value.astype(target) for name, value in out.items()}


def random_hf_tensors(config: ArchConfig, seed: int, init_std: float = INIT_STD) -> dict[str, np.ndarray]:
    """HF-layout float32 tensors for a random model; each tensor's stream depends on (seed, its name)."""
    out = {}
    for name, shape in hf_shapes(config).items():
        if name.endswith("norm.weight"):
            out[name] = np.ones(shape, np.float32)
        elif name.endswith(".bias"):
            out[name] = np.zeros(shape, np.float32)
        else:
            rng = np.random.default_rng(np.random.SeedSequence([seed, zlib.crc32(name.encode())]))
            out[name] = (init_std * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
    return out


def init_policy(
    arch_config: ArchConfig,
    *,
    seed: int = 0,
    dtype: str = "float32",
    compute_dtype: str | None = None,
    scan_layers: bool = True,
    remat: str | bool = False,
    init_std: float = INIT_STD,
) -> Policy:
    """A randomly initialised policy, for tests and benchmarks (weights independent of the layout flags).

    `init_std` widens the weight distribution (HF's initializer_range is 0.02); tests use a wider one so
    router probabilities have clear top-k margins and routing comparisons never hinge on a near-tie.
    """
    if not isinstance(arch_config, ArchConfig):
        raise TypeError(f"arch_config must be an ArchConfig, got {type(arch_config).__name__}")
    if not is_int(seed) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    positive_number("init_std", init_std)
    tensors = random_hf_tensors(arch_config, seed, float(init_std))
    return policy_from_tensors(
        arch_config,
        tensors.__getitem__,
        dtype=dtype,
        compute_dtype=compute_dtype,
        scan_layers=scan_layers,
        remat=remat,
    )
