"""The `Engine` protocol every rollout backend implements, its sampling parameters and its errors.

An engine turns a prompt (token ids, never text: the capture proxy renders, the engine never
re-tokenizes) into one `Generation` (legorl_jax/types.py, docs/architecture.md §4):

    gen = await engine.generate(input_ids, SamplingParams(temperature=1.0, max_new_tokens=256),
                                return_routed_experts=True, routed_experts_start_len=0, rid="trial-3/turn-2",
                                top_logprobs=0,                     # k > 0: the k likeliest per position
                                session_id="sess-7")                # a hint: keep this conversation cached
    lps = await engine.prompt_logprobs(input_ids, start=5)          # float32[P - 5]
    await engine.update_weights("runs/ckpt/step-10", version="10")  # or an in-process params state
    ok = await engine.health()
    await engine.abort("trial-3/turn-2")                            # that request finishes with "abort"

Implementations: `legorl_jax.engine.jax_engine.JaxEngine` (in process, on the policy) and
`legorl_jax.engine.sglang_client.SGLangEngine` (HTTP, real SGLang or our own server). Both give the
same results for the same request: the behaviour log-prob of docs/alignment.md §1, routed experts as rows
`[routed_experts_start_len, P + N - 1)`, finish reasons `stop | length | abort`, a weight version.
`session_id` is only a hint (SGLang-style): an engine with a prefix cache keeps that conversation's KV
resident between its turns (evicted after entries without a hint); an engine or server without one ignores
it, and results never depend on it.

`SamplingParams` uses SGLang's names and constant defaults (SGLang's `--sampling-defaults openai`;
the model's generation_config.json is never read): temperature 1, top_p 1, top_k -1 (off), min_p 0,
max_new_tokens 128. Temperature 0 is greedy; its log-probs are then log_softmax(logits) (temperature 1),
since log_softmax(logits / 0) is undefined. `seed` makes a request reproducible: each token's random
key is derived from (seed, the token's position), so the same request yields the same tokens whether
it runs alone or among others. `ignore_eos` disables the model's end-of-sequence ids only;
`stop_token_ids` and `stop` strings always apply. A matched stop token is part of `output_ids` (the
policy sampled it and the trainer learns from it).
"""

from __future__ import annotations

import dataclasses
import math
import os
import uuid
from typing import Any, Protocol, runtime_checkable

import numpy as np

from legorl_jax.types import Generation

# Seeds are split into two uint32 halves on the device, so any value below 2**64 is a distinct stream.
MAX_SEED = 2**64
# The most alternatives `top_logprobs` may ask for per position (OpenAI's limit too).
MAX_TOP_LOGPROBS = 20
# What `pause(mode)` of an engine with one accepts: SGLang's in_place and abort, and our drain
# (engine/weight_update.py); SGLang's retract is not supported.
PAUSE_MODES = ("in_place", "abort", "drain")


class EngineError(RuntimeError):
    """The engine could not serve a request (a server error, a dead engine thread, a malformed reply)."""


class EngineUnavailableError(EngineError, ConnectionError):
    """The engine could not be reached at all (connection refused, the server is not up)."""


class EngineTimeoutError(EngineError, TimeoutError):
    """A request took longer than its timeout (the request was aborted where the engine allows it)."""


class BadRequestError(EngineError, ValueError):
    """The engine rejected the request as malformed (HTTP 400); `field` names the offending field if known."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


class ContextOverflowError(BadRequestError):
    """The prompt does not fit the engine's context (it leaves no room for a single generated token)."""

    def __init__(self, message: str, *, prompt_tokens: int | None = None, limit: int | None = None):
        super().__init__(message, field="input_ids")
        self.prompt_tokens = prompt_tokens
        self.limit = limit


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, (float, np.floating))) and math.isfinite(float(value))


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How one request samples; validated on construction (module docstring for the semantics)."""

    max_new_tokens: int = 128
    """Most tokens to generate (0: only the prompt is forwarded); the context length caps it too."""
    temperature: float = 1.0
    """Softmax temperature; 0 is greedy."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p (1: off)."""
    top_k: int = -1
    """Keep the k most likely tokens (-1: off)."""
    min_p: float = 0.0
    """Drop tokens whose probability is below min_p times the most likely one's (0: off)."""
    stop: tuple[str, ...] = ()
    """Strings that end the generation when the output text contains them."""
    stop_token_ids: tuple[int, ...] = ()
    """Token ids that end the generation (in addition to the model's end-of-sequence ids)."""
    seed: int | None = None
    """Per-request seed in [0, 2**64); None draws a fresh one (not reproducible)."""
    ignore_eos: bool = False
    """Keep generating past the model's end-of-sequence ids (stop_token_ids and stop still apply)."""
    skip_special_tokens: bool = True
    """Leave special tokens out of the returned text (the ids are never altered)."""
    no_stop_trim: bool = False
    """Keep the matched stop string at the end of the returned text."""

    def __post_init__(self) -> None:
        if not _is_int(self.max_new_tokens) or self.max_new_tokens < 0:
            raise ValueError(
                f"sampling_params.max_new_tokens must be an int >= 0, got {self.max_new_tokens!r}"
            )
        if not _is_number(self.temperature) or self.temperature < 0:
            raise ValueError(
                f"sampling_params.temperature must be a finite number >= 0, got {self.temperature!r}"
            )
        if not _is_number(self.top_p) or not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"sampling_params.top_p must lie in (0, 1], got {self.top_p!r}")
        if not _is_int(self.top_k) or not (self.top_k == -1 or self.top_k >= 1):
            raise ValueError(f"sampling_params.top_k must be -1 (off) or an int >= 1, got {self.top_k!r}")
        if not _is_number(self.min_p) or not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"sampling_params.min_p must lie in [0, 1], got {self.min_p!r}")
        stop = (self.stop,) if isinstance(self.stop, str) else self.stop
        if not isinstance(stop, (tuple, list)) or not all(isinstance(s, str) and s for s in stop):
            raise ValueError(
                f"sampling_params.stop must be a non-empty string or a list of them, got {self.stop!r}"
            )
        object.__setattr__(self, "stop", tuple(stop))
        ids = self.stop_token_ids
        if not isinstance(ids, (tuple, list)) or not all(_is_int(i) and i >= 0 for i in ids):
            raise ValueError(f"sampling_params.stop_token_ids must be a list of ints >= 0, got {ids!r}")
        object.__setattr__(self, "stop_token_ids", tuple(int(i) for i in ids))
        if self.seed is not None and (not _is_int(self.seed) or not 0 <= self.seed < MAX_SEED):
            raise ValueError(f"sampling_params.seed must be an int in [0, 2**64) or null, got {self.seed!r}")
        for name in ("ignore_eos", "skip_special_tokens", "no_stop_trim"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"sampling_params.{name} must be a bool, got {getattr(self, name)!r}")
        for name in ("max_new_tokens", "top_k"):
            object.__setattr__(self, name, int(getattr(self, name)))
        for name in ("temperature", "top_p", "min_p"):
            object.__setattr__(self, name, float(getattr(self, name)))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def filters(self) -> bool:
        """True when top-k, top-p or min-p removes any token (the sampler then sorts the vocabulary)."""
        return self.top_k != -1 or self.top_p < 1.0 or self.min_p > 0.0


# An HF directory (str or path), or in-process parameters: the trainer's `nnx.Param` state, or a Policy.
WeightSource = str | os.PathLike | Any


def check_input_ids(input_ids: Any, vocab_size: int | None = None, field: str = "input_ids") -> np.ndarray:
    """`input_ids` as int32[P] (P >= 1), or a ValueError/TypeError naming the field and the bad value."""
    if isinstance(input_ids, (str, bytes)):
        raise TypeError(
            f"{field} must be a list of token ids, got a {type(input_ids).__name__}: {input_ids[:40]!r}"
        )
    array = np.asarray(input_ids)
    if (
        array.dtype == object
        or (array.size and not np.issubdtype(array.dtype, np.integer))
        or array.dtype == bool
    ):
        raise TypeError(f"{field} must be a list of ints, got {_preview(input_ids)}")
    if array.ndim != 1:
        raise ValueError(f"{field} must be a flat list of token ids, got shape {array.shape}")
    if array.size == 0:
        raise ValueError(f"{field} is empty: generation needs at least one prompt token")
    bad = np.flatnonzero(
        (array < 0) | (array >= (vocab_size if vocab_size is not None else np.iinfo(np.int32).max))
    )
    if bad.size:
        limit = f"[0, vocab_size={vocab_size})" if vocab_size is not None else "[0, 2**31)"
        raise ValueError(f"{field}[{bad[0]}] = {int(array[bad[0]])} is outside {limit}")
    return array.astype(np.int32)


def check_generate_args(
    prompt: np.ndarray,
    sampling: Any,
    return_routed_experts: Any,
    routed_experts_start_len: Any,
    rid: Any,
    top_logprobs: Any = 0,
    session_id: Any = None,
) -> str:
    """Checks `Engine.generate`'s other arguments against the checked `prompt`; returns the rid
    (fresh if None)."""
    if session_id is not None and (not isinstance(session_id, str) or not session_id):
        raise ValueError(f"session_id must be a non-empty string or None, got {session_id!r}")
    if not _is_int(top_logprobs) or not 0 <= top_logprobs <= MAX_TOP_LOGPROBS:
        raise ValueError(f"top_logprobs must be an int in [0, {MAX_TOP_LOGPROBS}], got {top_logprobs!r}")
    if not isinstance(sampling, SamplingParams):
        raise TypeError(f"sampling must be a SamplingParams, got {type(sampling).__name__}")
    if not isinstance(return_routed_experts, bool):
        raise TypeError(f"return_routed_experts must be a bool, got {return_routed_experts!r}")
    start = routed_experts_start_len
    if not _is_int(start) or not 0 <= start <= len(prompt):
        raise ValueError(
            f"routed_experts_start_len must be an int in [0, prompt_tokens={len(prompt)}], got {start!r}"
        )
    if rid is not None and (not isinstance(rid, str) or not rid):
        raise ValueError(f"rid must be a non-empty string or None, got {rid!r}")
    return rid or uuid.uuid4().hex


def check_logprob_args(ids: np.ndarray, start: Any, temperature: Any) -> None:
    """Checks `Engine.prompt_logprobs`'s `start` (in [1, P]) and `temperature` (finite, > 0)."""
    if not _is_int(start) or not 1 <= start <= len(ids):
        raise ValueError(
            f"start must be an int in [1, {len(ids)}] (the first token has no context), got {start!r}"
        )
    if not _is_number(temperature) or not temperature > 0:
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@runtime_checkable
class Engine(Protocol):
    """A rollout backend (module docstring). All methods are coroutines; none blocks the event loop."""

    async def generate(
        self,
        input_ids: Any,
        sampling: SamplingParams,
        *,
        return_routed_experts: bool = False,
        routed_experts_start_len: int = 0,
        rid: str | None = None,
        top_logprobs: int = 0,
        session_id: str | None = None,
    ) -> Generation:
        """Samples a continuation of `input_ids`; `rid` names the request for `abort`; `top_logprobs` = k > 0
        also returns the k most likely tokens of each output position (`Generation.output_top_ids`);
        `session_id` is the prefix-cache hint of the module docstring."""
        ...

    async def prompt_logprobs(self, input_ids: Any, start: int, *, temperature: float = 1.0) -> np.ndarray:
        """float32[P - start]: entry i is log_softmax(logits / T)[input_ids[start + i]] given the tokens
        before it.

        `start` lies in [1, P] (the first token has no context to be scored in).
        """
        ...

    async def update_weights(self, source: WeightSource, version: str) -> None:
        """Loads new weights (an HF directory, or an in-process params state) and tags results with
        `version`."""
        ...

    async def health(self) -> bool:
        """True when the engine accepts requests."""
        ...

    async def abort(self, rid: str) -> None:
        """Finishes request `rid` now with reason "abort" (tokens so far are returned); unknown ids are
        ignored."""
        ...


@runtime_checkable
class Pausable(Protocol):
    """An engine that can hold its requests around a weight update (engine/weight_update.py): `pause(mode)`
    with a mode of `PAUSE_MODES`, then `resume()`. JaxEngine, SGLangEngine and EngineFleet are."""

    async def pause(self, mode: str = "in_place") -> Any: ...

    async def resume(self) -> None: ...


def updates_between_steps(engine: object) -> bool:
    """Whether `engine` swaps new weights in between its own decode steps (JaxEngine: an in_place update
    then needs no pause); engines say so with a class attribute `updates_between_steps = True`."""
    return getattr(type(engine), "updates_between_steps", False) is True


@runtime_checkable
class ReportsFigures(Protocol):
    """An engine with figures of its own for the run's metrics (EngineFleet: `engine/<i>/*`)."""

    async def metrics(self) -> dict[str, float]: ...


@runtime_checkable
class Settles(Protocol):
    """An engine of several whose own check says when a new request reaches a live one (EngineFleet: the
    router has taken a dead engine out, or it is back); a trial's retry waits on it (rollout/retry.py). A
    single engine's `health()` says the same."""

    async def settled(self) -> bool: ...
