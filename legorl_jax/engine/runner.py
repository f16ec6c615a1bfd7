"""The device side of the embedded engine: the policy's weights, its KV cache and the jitted programs.

`ModelRunner(policy, num_slots, max_len, min_bucket=16, prefill_chunk=None, dtype=None, device=None,
max_batch=None, min_context=128, compile_in_background=True, scan_layers=None)` owns:
- the weights as `nnx.split(policy, nnx.Param, ...)` of the policy in its serving layout, on one device,
  in the engine's dtype;
- a `KVCache` of `num_slots` slots × `max_len` positions (model/cache.py), donated to every program
  (the engine's running slots plus the prefix cache's spare ones);
- the programs, all on `Policy.forward_cached` / `Policy.token_logprobs` (never a second forward):
  * `prefill(prompts, slots, starts, rows)`: each prompt[start:] (positions before `start` already hold
    their K/V in the slot: a cached prefix). Prompts whose rest fits one chunk (`prefill_chunk` tokens,
    default max_len) share calls: sorted by length, those in the same length bucket go in one call of
    up to `max_batch` rows. A longer prompt runs alone in chunks, each chunk attending to the ones
    before it through the cache. The first token is sampled from the last prompt position; returns per
    prompt (token, behaviour log-prob, routed experts int32[P - start, L, K]);
  * `decode(tokens, positions, slots, rows)`: one step (T = 1) over the live requests only, each row
    naming its slot; returns per live row (next token, log-prob, routed experts [L, K] of the token
    just forwarded);
  * `copy_slot(src, dst)`: one slot's K/V into another (a cached prefix another request extends);
  * `prompt_logprobs(ids, start, temperature)`: log-probs of given tokens, on the packed forward.

Cost follows the live tokens, through three kinds of buckets (padding sits at position -1: it writes
nothing and its outputs are dropped):
- batch: rows are padded to the smallest of 1, 2, 4, ... max_batch that holds them (SGLang captures its
  CUDA graphs for a list of batch sizes the same way), so a lone request pays for one row, not 32;
- context: a call attends to the first C positions of each slot only, C the smallest of min_context,
  2·min_context, ... max_len above every position in the call, so a 64-token conversation in a 32k
  allocation attends over min_context positions (at most twice the positions in use beyond that);
- length: prefill chunks are padded to `min_bucket · 2^i` capped at the chunk size.
Compilations are therefore bounded: a prefill program per (batch, length, context) bucket and a decode
program per (batch, context) bucket, each also in a variant returning the MAX_TOP_LOGPROBS likeliest
tokens (run only when a request in the call asks for top log-probs), all compiled on first use
(`num_programs_bound` counts them);
prompt log-probs use the length doubling up to max_len, one program per (bucket, temperature) (the
fused log-prob op takes its temperature as a static number; rollouts use one); one slot copy. Prefill
and decode programs come from `Programs` (programs.py): a call whose bucket is not compiled yet runs on
a compiled larger bucket (its own compiles in the background once it has come up often enough), and a
decode bucket in use has its next context bucket compiled ahead (`compile_in_background=False`: every new
bucket compiles in the caller); executables are shared by runners of the same model and shapes. Against
paged KV (vLLM, SGLang) this keeps every slot's positions contiguous and the kernels plain XLA: it saves
the attention compute, not the memory of a slot's full context.

Layer layout (model/layer_layout.py): the runner serves its decoder layers unrolled on CPU and scanned
elsewhere (`default_scan_layers`; `scan_layers` overrides), whatever layout the policy it is given has.
On CPU XLA copies each layer's slice of the scanned stacks out before its matmuls on every step (half the
decode forward of the 85M MoE, 2.4x its decode step; BENCHMARKS.md, issue 42). On GPU / TPU the scan is kept:
a 48-layer model's programs compiled 2.3-4x slower unrolled (measured on CPU), the engine compiles one per
bucket, and there the slice is a copy at memory bandwidth (not measured here: no accelerator was lent).
The served policy drops the trainer's remat (a forward never needs it; it changes no value, decoder.py).

Weights: `set_params(params)` takes an `nnx.Param` state of a policy of the engine's architecture (the
trainer's `state.params`, in either layout) or a `Policy`, and stores a copy on the runner's device (the
trainer donates its state to its next step, so the engine must never alias those buffers), moved into
the serving layout (a stack sliced into its layers, or layers stacked: one program, once per update)
and cast to the runner's dtype. Nothing touches disk. It is called by the engine thread between decode
steps only.

Logits: prefill computes them for the last prompt position only, from the final hidden state and
`Policy.lm_head_weight()` with the contraction the policy's own `_output` uses (float32 accumulate).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from legorl_jax.engine.base import MAX_TOP_LOGPROBS
from legorl_jax.engine.programs import Key, Programs
from legorl_jax.engine.sampler import SamplingRows, sample, top_logprobs
from legorl_jax.model.layer_layout import Gather, apply_plan, layout_plan
from legorl_jax.model.policy import Policy, as_dtype
from legorl_jax.validate import is_int, positive_int

# ArchConfig fields that do not change what the engine computes: the storage dtype (weights are cast to the
# engine's own), the training-only aux-loss coefficient, and the fields kept only for the HF round trip.
_NOT_ARCHITECTURE = frozenset({"torch_dtype", "router_aux_loss_coef", "extra_json"})


def prefill_buckets(max_len: int, min_bucket: int) -> tuple[int, ...]:
    """min_bucket, 2·min_bucket, ... up to max_len (the last one is max_len itself)."""
    positive_int("max_len", max_len)
    positive_int("min_bucket", min_bucket)
    out, b = [], min(min_bucket, max_len)
    while b < max_len:
        out.append(b)
        b *= 2
    out.append(max_len)
    return tuple(out)


def _logits_at(model: Policy, hidden: jax.Array) -> jax.Array:
    head = model.lm_head_weight().astype(hidden.dtype)
    return jnp.einsum("btd,dv->btv", hidden, head, preferred_element_type=jnp.float32)[:, 0].astype(
        jnp.float32
    )


def default_scan_layers(device: jax.Device | None = None) -> bool:
    """Whether the engine serves its layers scanned on `device` (default: the first): unrolled on CPU,
    scanned elsewhere (module docstring)."""
    return (device or jax.devices()[0]).platform != "cpu"


@functools.partial(jax.jit, static_argnames=("plan", "dtype"))
def _gather_as(leaves: list[jax.Array], plan: tuple[Gather, ...], dtype: Any) -> list[jax.Array]:
    """New buffers (`jnp.copy`: never an input handed back) of the plan's leaves, cast to `dtype` (None:
    kept)."""
    return [jnp.copy(x) if dtype is None else x.astype(dtype) for x in apply_plan(leaves, plan)]


def _sample_and_top(logits, rows, sample_pos, top):
    token, logprob = sample(logits, rows, sample_pos)
    return token, logprob, (top_logprobs(logits, rows, top) if top else None)


@functools.partial(jax.jit, static_argnames=("graphdef", "context", "top"), donate_argnames=("cache",))
def _prefill(graphdef, params, rest, cache, ids, positions, slots, last, rows, sample_pos, context, top):
    model = nnx.merge(graphdef, params, rest)
    out, cache = model.forward_cached(ids, positions, cache, slots, compute_logits=False, context=context)
    hidden = jnp.take_along_axis(out.hidden, last[:, None, None], axis=1)  # [B, 1, D]
    token, logprob, tops = _sample_and_top(_logits_at(model, hidden), rows, sample_pos, top)
    return token, logprob, tops, out.routed_experts, cache


@functools.partial(jax.jit, donate_argnames=("cache",))
def _copy_slot(cache, src, dst):
    return jax.tree.map(lambda x: x.at[:, dst].set(x[:, src]), cache)


@functools.partial(jax.jit, static_argnames=("graphdef", "context", "top"), donate_argnames=("cache",))
def _decode(graphdef, params, rest, cache, tokens, positions, slots, rows, context, top):
    model = nnx.merge(graphdef, params, rest)
    out, cache = model.forward_cached(
        tokens[:, None], positions[:, None], cache, slots, compute_logits=False, context=context
    )
    token, logprob, tops = _sample_and_top(_logits_at(model, out.hidden), rows, positions + 1, top)
    routed = None if out.routed_experts is None else out.routed_experts[:, :, 0]  # [L, S, K]
    return token, logprob, tops, routed, cache


def _build(graphdef: Any, abstract: tuple[Any, Any, Any], key: Key) -> Any:
    """Lowers and compiles the prefill or decode program of bucket `key` on abstract (params, rest, cache)."""
    params, rest, cache = abstract
    batch, top = key[1], key[-1]
    v, rows = np.zeros(batch, np.int32), SamplingRows.host([None] * batch, [0] * batch)
    if key[0] == "decode":
        _, _, context, _ = key
        lowered = _decode.lower(graphdef, params, rest, cache, v, v, v, rows, context=context, top=top)
    else:
        _, _, width, context, _ = key
        ids = np.zeros((batch, width), np.int32)
        lowered = _prefill.lower(
            graphdef, params, rest, cache, ids, ids, v, v, rows, v, context=context, top=top
        )
    return lowered.compile()


def _next_context(context_buckets: tuple[int, ...], key: Key) -> Key | None:
    """The same program at the next context bucket (None past the last)."""
    i = context_buckets.index(key[-2]) + 1
    return None if i == len(context_buckets) else (*key[:-2], context_buckets[i], key[-1])


@functools.partial(jax.jit, static_argnames=("graphdef", "temperature"))
def _prompt_logprobs(graphdef, params, rest, ids, targets, segment_ids, temperature):
    model = nnx.merge(graphdef, params, rest)
    return model.token_logprobs(ids, targets, segment_ids=segment_ids, temperature=temperature)


class ModelRunner:
    """Weights, KV cache and jitted programs of the embedded engine (module docstring)."""

    def __init__(
        self,
        policy: Policy,
        num_slots: int,
        max_len: int,
        *,
        min_bucket: int = 16,
        prefill_chunk: int | None = None,
        dtype: str | None = None,
        device: jax.Device | None = None,
        max_batch: int | None = None,
        min_context: int = 128,
        compile_in_background: bool = True,
        scan_layers: bool | None = None,
    ):
        if not isinstance(policy, Policy):
            raise TypeError(f"policy must be a legorl_jax.model.Policy, got {type(policy).__name__}")
        positive_int("max_running (slots)", num_slots)
        limit = policy.config.max_position_embeddings
        if not is_int(max_len) or not 2 <= max_len <= limit:
            raise ValueError(
                f"max_len must be an int in [2, max_position_embeddings={limit}], got {max_len!r}"
            )
        self.config = policy.config
        self.num_slots, self.max_len = num_slots, max_len
        chunk = max_len if prefill_chunk is None else prefill_chunk
        self.prefill_chunk = min(positive_int("prefill_chunk", chunk), max_len)
        self.buckets = prefill_buckets(self.prefill_chunk, min_bucket)
        max_batch = num_slots if max_batch is None else max_batch
        if not is_int(max_batch) or not 1 <= max_batch <= num_slots:
            raise ValueError(f"max_batch must be an int in [1, num_slots={num_slots}], got {max_batch!r}")
        self.batch_buckets = prefill_buckets(max_batch, 1)
        self.context_buckets = prefill_buckets(max_len, min_context)
        self.logprob_buckets = prefill_buckets(max_len, min_bucket)
        self.dtype_name = dtype or policy.dtype
        self.dtype = as_dtype(self.dtype_name, "engine dtype")
        self.device = device or jax.devices()[0]
        self._sharding = jax.sharding.SingleDeviceSharding(self.device)
        if scan_layers is not None and not isinstance(scan_layers, bool):
            raise ValueError(f"scan_layers must be a bool or None, got {scan_layers!r}")
        self.scan_layers = default_scan_layers(self.device) if scan_layers is None else scan_layers
        served = nnx.eval_shape(
            lambda: Policy(
                policy.config,
                rngs=nnx.Rngs(params=0),
                dtype=policy.dtype,
                compute_dtype=policy.compute_dtype,
                scan_layers=self.scan_layers,
            )
        )
        # The serving layout's abstract state: its leaves' shapes, and the Params' logical axes (no
        # `layers` axis when unrolled), for every update to be moved into.
        self.graphdef, self._params_like, *rest_like = nnx.split(served, nnx.Param, ...)
        (self._rest_like,) = rest_like  # the state that is not a parameter, in one
        _, params, *rest = nnx.split(policy, nnx.Param, ...)
        self.params = self._place(params, self._params_like)
        self.rest = self._place(rest[0], self._rest_like, cast=False)
        with jax.default_device(self.device):
            self.cache = policy.init_cache(num_slots, max_len, dtype=None if dtype is None else dtype)
        self.cache = jax.device_put(self.cache, self._sharding)
        abstract = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=self._sharding),
            (self.params, self.rest, self.cache),
        )
        leaves, treedef = jax.tree.flatten(abstract)
        signature = (self.graphdef, treedef, tuple((x.shape, str(x.dtype)) for x in leaves), self.device)
        self.programs = Programs(
            signature,
            functools.partial(_build, self.graphdef, abstract),
            functools.partial(_next_context, self.context_buckets),
            background=compile_in_background,
        )
        # The slot copy and prompt log-prob programs run (plain jax.jit); replaced, never mutated.
        self._plain: frozenset[tuple] = frozenset()

    # ------------------------------------------------------------------------------------------------
    # weights

    def _place(self, source: Any, like: Any, *, cast: bool = True) -> Any:
        """A copy of the state `source` on the runner's device in the layout of `like` (and, with `cast`,
        the runner's dtype); `source` is already checked."""
        plan = layout_plan(source, like)
        # device_put alone may hand back a buffer of the source (it does for an array replicated over a
        # mesh, even with may_alias=False), so the copy is a program of its own: its outputs are new buffers.
        placed = jax.tree.leaves(jax.device_put(source, self._sharding))
        leaves = _gather_as(placed, plan, self.dtype if cast else None)
        return jax.tree.unflatten(jax.tree.structure(like), leaves)

    def check_params(self, source: Any) -> Any:
        """The `nnx.Param` state of `source` (a state or a Policy), or a ValueError naming the mismatch."""
        if isinstance(source, Policy):
            differing = [
                f"{f.name}={getattr(source.config, f.name)!r} (engine: {getattr(self.config, f.name)!r})"
                for f in dataclasses.fields(self.config)
                if f.name not in _NOT_ARCHITECTURE
                and getattr(source.config, f.name) != getattr(self.config, f.name)
            ]
            if differing:
                raise ValueError(
                    f"update_weights: the policy's config differs from the engine's: {'; '.join(differing)}"
                )
            source = nnx.state(source, nnx.Param)
        if not isinstance(source, nnx.State):
            raise TypeError(
                "update_weights: in-process weights must be an nnx.State of params or a Policy, got "
                f"{type(source).__name__}"
            )
        try:
            layout_plan(source, self._params_like)
        except ValueError as err:
            raise ValueError(
                f"update_weights: the params state does not have the engine policy's structure: {err}; "
                "pass the trainer's state.params (either layer layout) or a Policy"
            ) from None
        return source

    def set_params(self, params: Any) -> None:
        """Replaces the weights with a device copy of `params` (already checked by `check_params`)."""
        self.params = self._place(params, self._params_like)
        # The caller may donate or delete its buffers right after this returns; the copy must be done.
        jax.block_until_ready(self.params)

    # ------------------------------------------------------------------------------------------------
    # programs

    @staticmethod
    def _bucket(length: int, buckets: tuple[int, ...]) -> int:
        for b in buckets:
            if length <= b:
                return b
        raise ValueError(f"{length} tokens exceed the largest bucket ({buckets[-1]})")

    def prefill(
        self,
        prompts: list[np.ndarray],
        slots: list[int],
        starts: list[int],
        rows: SamplingRows,
        *,
        want_top: bool = False,
    ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray | None], tuple[np.ndarray, np.ndarray] | None]:
        """Writes prompts[i][starts[i]:] into slots[i] (positions before starts[i] already hold their K/V).

        Prompts whose rest fits one chunk run together, grouped by length bucket, as many rows per call as
        the largest batch bucket holds; a longer one runs alone, chunk by chunk. Returns per prompt (first
        token int32[R], its log-prob float32[R], routed experts int32[P - start, L, K] or None), and with
        `want_top` the MAX_TOP_LOGPROBS likeliest tokens of the first position (float32[R, k], int32[R, k]).
        """
        count = len(prompts)
        tokens, logprobs = np.zeros(count, np.int32), np.zeros(count, np.float32)
        routed: list[np.ndarray | None] = [None] * count
        top = MAX_TOP_LOGPROBS if want_top else 0
        tops = (np.zeros((count, top), np.float32), np.zeros((count, top), np.int32)) if top else None
        for prompt, start in zip(prompts, starts, strict=True):
            if len(prompt) > self.max_len:
                raise ValueError(f"a prompt of {len(prompt)} tokens exceeds max_len={self.max_len}")
            if not 0 <= start < len(prompt):
                raise ValueError(
                    f"start={start} must lie in [0, {len(prompt)}) (the last prompt token always runs)"
                )
        rest = [len(p) - s for p, s in zip(prompts, starts, strict=True)]
        short = sorted((i for i in range(count) if rest[i] <= self.prefill_chunk), key=lambda i: rest[i])
        groups: list[list[int]] = []
        for i in short:
            if (
                groups
                and self._bucket(rest[groups[-1][0]], self.buckets) == self._bucket(rest[i], self.buckets)
                and len(groups[-1]) < self.batch_buckets[-1]
            ):
                groups[-1].append(i)
            else:
                groups.append([i])
        for group in groups:
            pieces = [(i, starts[i], len(prompts[i])) for i in group]
            self._prefill_call(prompts, slots, pieces, rows, (tokens, logprobs, routed, tops))
        for i in (i for i in range(count) if rest[i] > self.prefill_chunk):
            for begin in range(starts[i], len(prompts[i]), self.prefill_chunk):
                end = min(begin + self.prefill_chunk, len(prompts[i]))
                # Every chunk samples (one program for all); only the last chunk's token is the request's.
                self._prefill_call(prompts, slots, [(i, begin, end)], rows, (tokens, logprobs, routed, tops))
        return tokens, logprobs, routed, tops

    def _prefill_call(self, prompts, slots, pieces, rows, results) -> None:
        """One program call on pieces (prompt index, begin, end), padded to (batch, width) buckets; writes
        `results` (tokens, logprobs, routed, tops) at each piece's prompt index."""
        tokens, logprobs, routed, tops = results
        top = 0 if tops is None else tops[0].shape[1]
        wanted = (
            "prefill",
            self._bucket(len(pieces), self.batch_buckets),
            self._bucket(max(end - begin for _, begin, end in pieces), self.buckets),
            self._bucket(max(end for _, _, end in pieces), self.context_buckets),
            top,
        )
        key, program = self.programs.lookup(wanted)
        _, batch, width, _, _ = key
        ids = np.zeros((batch, width), np.int32)
        positions = np.full((batch, width), -1, np.int32)
        call_slots, last, sample_pos = (np.zeros(batch, np.int32) for _ in range(3))
        for r, (i, begin, end) in enumerate(pieces):
            n = end - begin
            ids[r, :n] = prompts[i][begin:end]
            positions[r, :n] = np.arange(begin, end, dtype=np.int32)
            call_slots[r], last[r], sample_pos[r] = slots[i], n - 1, end
        index = np.array([i for i, _, _ in pieces] + [pieces[0][0]] * (batch - len(pieces)))
        call_rows = jax.tree.map(lambda x: np.asarray(x)[index], rows)
        start = time.perf_counter()
        token, logprob, out_tops, out_routed, self.cache = program(
            self.params, self.rest, self.cache, ids, positions, call_slots, last, call_rows, sample_pos
        )
        token, logprob = np.asarray(token), np.asarray(logprob)
        self.programs.ran(wanted, key, time.perf_counter() - start)
        if tops is not None:
            for r, (i, _, _) in enumerate(pieces):
                tops[0][i], tops[1][i] = np.asarray(out_tops[0])[r], np.asarray(out_tops[1])[r]
        out_routed = None if out_routed is None else np.asarray(out_routed)  # [L, B, W, K]
        for r, (i, begin, end) in enumerate(pieces):
            tokens[i], logprobs[i] = token[r], logprob[r]
            if out_routed is not None:
                rows_here = out_routed[:, r, : end - begin].transpose(1, 0, 2)
                routed[i] = rows_here if routed[i] is None else np.concatenate([routed[i], rows_here])

    def copy_slot(self, src: int, dst: int) -> None:
        """Copies every position of slot `src`'s K/V into slot `dst` (a cached prefix another request
        extends)."""
        self._plain = self._plain | {("copy_slot",)}
        self.cache = _copy_slot(self.cache, np.int32(src), np.int32(dst))

    def decode(
        self,
        tokens: np.ndarray,
        positions: np.ndarray,
        slots: np.ndarray,
        rows: SamplingRows,
        *,
        want_routing: bool,
        want_top: bool = False,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, tuple[np.ndarray, np.ndarray] | None]:
        """One step over R live rows (R <= max_batch), run at the smallest batch bucket >= R and the smallest
        context bucket above every row's position (or on a compiled larger bucket while that one compiles).

        Returns int32[R] next tokens, float32[R] log-probs, int32[R, L, K] routing or None, and with
        `want_top` the MAX_TOP_LOGPROBS likeliest tokens of each row (float32[R, k], int32[R, k]) or None.
        """
        top = MAX_TOP_LOGPROBS if want_top else 0
        live = len(tokens)
        wanted = (
            "decode",
            self._bucket(live, self.batch_buckets),
            self._bucket(int(np.max(positions)) + 1, self.context_buckets),
            top,
        )
        key, program = self.programs.lookup(wanted)
        pad = key[1] - live
        if pad:
            tokens = np.pad(tokens, (0, pad))
            positions = np.pad(positions, (0, pad), constant_values=-1)
            slots = np.pad(slots, (0, pad))
            rows = jax.tree.map(lambda x: np.pad(np.asarray(x), (0, pad)), rows)
        start = time.perf_counter()
        token, logprob, tops, routed, self.cache = program(
            self.params, self.rest, self.cache, tokens, positions, slots, rows
        )
        token = np.asarray(token)
        self.programs.ran(wanted, key, time.perf_counter() - start)
        routed_host = (
            np.asarray(routed).transpose(1, 0, 2)[:live] if (want_routing and routed is not None) else None
        )
        tops_host = None if tops is None else (np.asarray(tops[0])[:live], np.asarray(tops[1])[:live])
        return token[:live], np.asarray(logprob)[:live], routed_host, tops_host

    def prompt_logprobs(self, ids: np.ndarray, start: int, temperature: float) -> np.ndarray:
        """float32[P - start]: log_softmax(logits / T) of ids[start:], each given the tokens before it."""
        p = len(ids)
        width = self._bucket(p, self.logprob_buckets)
        tokens = np.zeros((1, width), np.int32)
        tokens[0, :p] = ids
        targets = np.zeros((1, width), np.int32)
        targets[0, : p - 1] = ids[1:]
        segments = np.zeros((1, width), np.int32)
        segments[0, :p] = 1
        self._plain = self._plain | {("prompt_logprobs", width)}
        lp = _prompt_logprobs(
            self.graphdef, self.params, self.rest, tokens, targets, segments, float(temperature)
        )
        # lp[t] scores token t + 1 given tokens <= t.
        return np.asarray(lp)[0, start - 1 : p - 1].astype(np.float32)

    @property
    def compiled(self) -> frozenset[tuple]:
        """Bucket keys of the programs compiled for this runner's shapes (by any runner of them), and the
        slot copy / prompt log-prob programs this runner ran."""
        return self.programs.ready | self._plain

    @property
    def num_programs_bound(self) -> int:
        """The most programs one temperature can compile: a prefill per (batch, length, context) bucket, a
        decode per (batch, context) bucket, each with and without top log-probs; a log-prob program per
        bucket; one slot copy."""
        nb, nc = len(self.batch_buckets), len(self.context_buckets)
        return 2 * (nb * len(self.buckets) * nc + nb * nc) + len(self.logprob_buckets) + 1
