"""The contracts between stages (docs/architecture.md §4).

Every stage talks to the next through the frozen dataclasses here; array fields carry their shape and
dtype in a comment. Fields may be added, never renamed, without updating docs/architecture.md §4.

Legend: P = prompt tokens, N = generated tokens, T = sequence length, L = MoE layers, K = experts per
token, B = packed rows.
"""

from __future__ import annotations

import dataclasses
import enum
import pathlib
from typing import TYPE_CHECKING, Any

import numpy as np
from jaxtyping import Float, Int

from legorl_jax.versions import version_number

if TYPE_CHECKING:  # annotations only: importing the stage contracts loads no jax and no verifier
    import jax

    from legorl_jax.tasks.report import VerifierReport

FinishReason = str  # "stop" | "length" | "abort"
FINISH_REASONS = ("stop", "length", "abort")


class Outcome(enum.Enum):
    """How a trial ended. Policy outcomes stay in the loss; infrastructure outcomes are dropped."""

    # Kept in the loss with the verifier's reward.
    SUBMITTED = "submitted"
    STEP_LIMIT = "step_limit"
    CONTEXT_OVERFLOW = "context_overflow"
    FORMAT_FAILURE = "format_failure"
    NO_TOOL_COLLAPSE = "no_tool_collapse"
    # Dropped from the loss, counted per reason.
    SANDBOX_FAILED = "sandbox_failed"
    ENGINE_FAILED = "engine_failed"
    HARNESS_CRASHED = "harness_crashed"
    VERIFIER_FAILED = "verifier_failed"
    TIMEOUT = "timeout"
    NODE_FAILED = "node_failed"  # the Ray node running the attempt died (rollout/executor.py)

    @property
    def is_infra_failure(self) -> bool:
        """True when the trial says nothing about the policy and must not be taught."""
        return self in _INFRA_OUTCOMES


_INFRA_OUTCOMES = frozenset(
    {
        Outcome.SANDBOX_FAILED,
        Outcome.ENGINE_FAILED,
        Outcome.HARNESS_CRASHED,
        Outcome.VERIFIER_FAILED,
        Outcome.TIMEOUT,
        Outcome.NODE_FAILED,
    }
)


@dataclasses.dataclass(frozen=True)
class Generation:
    """One engine call's result.

    `routed_experts` row i holds the experts that processed input position i of prompt + output
    (the last sampled token is never forwarded, hence P + N - 1 rows); rows before
    `routed_experts_start` were not requested and are absent.
    """

    output_ids: np.ndarray  # int32[N]
    output_logprobs: np.ndarray  # float32[N]; log_softmax(logits / temperature)[token], before top-k/top-p
    routed_experts: np.ndarray | None  # uint8|int16[P + N - 1 - routed_experts_start, L, K]
    finish_reason: FinishReason
    weight_version: str
    prompt_tokens: int
    routed_experts_start: int = 0
    # Weight version of each output token when an update landed mid-request (None: all `weight_version`).
    token_weight_versions: tuple[str, ...] | None = None
    matched_stop: int | str | None = None
    cached_tokens: int = 0  # prompt tokens served from the engine's prefix cache (not prefilled again)
    # With top_logprobs=k: the k most likely tokens at each output position and their log-probs (the same
    # log_softmax(logits / temperature) as output_logprobs), most likely first; None when not asked.
    output_top_ids: np.ndarray | None = None  # int32[N, k]
    output_top_logprobs: np.ndarray | None = None  # float32[N, k]
    # bool[N]: True where the output token was sampled over K/V computed, in part, under older weights than
    # the ones sampling it (an update landed mid-request and the request kept its KV cache, update policy
    # `in_place`; or a prefix cached before an update was reused). None: every token attended only to K/V
    # of its own weights.
    token_stale_kv: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.finish_reason not in FINISH_REASONS:
            raise ValueError(f"finish_reason must be one of {FINISH_REASONS}, got {self.finish_reason!r}")
        if len(self.output_ids) != len(self.output_logprobs):
            raise ValueError(
                f"output_ids has {len(self.output_ids)} tokens but output_logprobs has "
                f"{len(self.output_logprobs)}"
            )
        stale = self.token_stale_kv
        if stale is not None and (
            np.asarray(stale).dtype != np.bool_ or np.shape(stale) != (len(self.output_ids),)
        ):
            raise ValueError(
                f"token_stale_kv must be bool[{len(self.output_ids)}] (one flag per output token), got "
                f"{np.asarray(stale).dtype}{list(np.shape(stale))}"
            )

    @property
    def stale_kv_tokens(self) -> int:
        """How many output tokens were sampled over K/V of older weights (`token_stale_kv`)."""
        return 0 if self.token_stale_kv is None else int(np.count_nonzero(self.token_stale_kv))


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """A tool call parsed from the policy's output text."""

    id: str
    name: str
    arguments: str  # the JSON text as generated


@dataclasses.dataclass(frozen=True)
class Turn:
    """One model call as captured by the proxy, verbatim at generation time."""

    prompt_ids: np.ndarray  # int32[P]
    output_ids: np.ndarray  # int32[N]
    output_logprobs: np.ndarray  # float32[N]
    routed_experts: np.ndarray | None  # uint8|int16[rows, L, K]; rows cover [routed_experts_start, P + N - 1)
    finish_reason: FinishReason
    weight_version: str
    tool_calls: tuple[ToolCall, ...] = ()
    routed_experts_start: int = 0
    started_at: float = 0.0  # unix seconds
    finished_at: float = 0.0
    branch: int = 0  # which branch of the conversation this call extends (0 = the main thread)


@dataclasses.dataclass(frozen=True)
class Sequence:
    """One training sequence: the whole conversation of one branch, as token ids.

    `behaviour_logprobs` is defined wherever `loss_mask` is 1 (never a placeholder 0.0 on a mask-1
    token). Rows of `routed_experts` that were never recorded are -1 (route natively).
    """

    token_ids: np.ndarray  # int32[T]
    loss_mask: np.ndarray  # int8[T]; 1 = sampled by the policy
    behaviour_logprobs: np.ndarray  # float32[T]
    routed_experts: (
        np.ndarray | None
    )  # int16[T, L, K]; row i = experts at input position i, -1 = not recorded
    weight_versions: tuple[str, ...] = ()  # the distinct versions its sampled tokens came from, in order
    # int32[T]: the weights version (optimiser step, `versions.version_number`) each sampled token
    # was sampled under; -1 where loss_mask is 0. None: not recorded (all of `weight_versions[0]`).
    token_versions: np.ndarray | None = None
    # int8[T]: 1 where a sampled token was sampled over K/V of older weights than its own
    # (`Generation.token_stale_kv`), else 0. None: none was (and every record written before it existed).
    stale_kv: np.ndarray | None = None

    def __post_init__(self) -> None:
        t = len(self.token_ids)
        for name in ("loss_mask", "behaviour_logprobs"):
            if len(getattr(self, name)) != t:
                raise ValueError(f"{name} has length {len(getattr(self, name))}, token_ids has {t}")
        for name in ("token_versions", "stale_kv"):
            value = getattr(self, name)
            if value is not None and len(value) != t:
                raise ValueError(f"{name} has length {len(value)}, token_ids has {t}")
        if self.routed_experts is not None and self.routed_experts.shape[0] != t:
            raise ValueError(f"routed_experts has {self.routed_experts.shape[0]} rows, token_ids has {t}")

    @property
    def num_sampled(self) -> int:
        return int(np.asarray(self.loss_mask).sum())


@dataclasses.dataclass(frozen=True)
class SessionFlags:
    """What the policy did in a capture-proxy session that decides its outcome. On disk (the archive's
    `trajectory.json`, the proxy's admin close) it is `to_dict()`'s object of the four names."""

    context_overflow: bool = False  # a prompt left no room to generate (the policy's outcome)
    no_tool_collapse: bool = False  # too many replies in a row without a tool call (the policy's outcome)
    format_failure: bool = False  # a main-thread reply whose tool calls did not parse
    engine_failed: bool = False  # the engine failed behind the proxy (the trial is dropped)

    def to_dict(self) -> dict[str, bool]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionFlags:
        """The flags of a `to_dict()` object; an unknown name or a non-bool is a ValueError naming it."""
        names = {f.name for f in dataclasses.fields(cls)}
        for key, value in data.items():
            if key not in names:
                raise ValueError(f"unknown session flag {key!r} (known: {sorted(names)})")
            if not isinstance(value, bool):
                raise ValueError(f"session flag {key} must be a bool, got {value!r}")
        return cls(**data)

    def raised(self) -> tuple[str, ...]:
        """The names of the flags that are set, in field order."""
        return tuple(name for name, value in self.to_dict().items() if value)


@dataclasses.dataclass(frozen=True)
class SessionRecord:
    """A closed capture-proxy session, as the rollout reads it (the archive's `trajectory.json` holds the
    same record as JSON, with each turn's token ids)."""

    session_id: str
    trial_dir: pathlib.Path  # where the session was archived
    flags: SessionFlags
    counters: dict[str, Any]  # calls, tokens, tool calls, no-tool replies, model_s, tool_s, ...
    messages: tuple[dict[str, Any], ...]  # the main thread's last conversation (display only)
    branches: tuple[dict[str, Any], ...]  # one summary per branch of the conversation
    turns: tuple[dict[str, Any], ...]  # every model call in order: branch, kind, tool calls, token counts
    sequences: tuple[Sequence, ...]  # what the trainer trains on

    @property
    def model_s(self) -> float:
        """Seconds the session's model calls took."""
        return float(self.counters.get("model_s", 0.0))

    @property
    def tool_s(self) -> float:
        """Seconds between the session's model calls (the harness running its tools)."""
        return float(self.counters.get("tool_s", 0.0))


@dataclasses.dataclass(frozen=True)
class Trajectory:
    """One trial: what the harness did, what the policy sampled, and the verifier's verdict."""

    trial_id: str
    task_id: str
    group_id: str
    sequences: tuple[Sequence, ...]
    reward: float
    outcome: Outcome
    messages: tuple[dict[str, Any], ...] = ()  # for display only; never re-tokenized
    features: dict[str, float] = dataclasses.field(
        default_factory=dict
    )  # tool calls, edits, test runs, turns
    timings: dict[str, float] = dataclasses.field(default_factory=dict)  # seconds per phase
    verifier_report: VerifierReport | None = None  # None when the diff was never graded
    attempts: tuple[str, ...] = ()  # every attempt's outcome value, the one that counts last (retries before)

    @property
    def valid(self) -> bool:
        """False for infrastructure failures: they contribute nothing to the loss or group statistics."""
        return not self.outcome.is_infra_failure

    @property
    def version_tokens(self) -> dict[int, int]:
        """Sampled tokens per weights version number (`versions.version_number`), oldest first.

        A sequence without `token_versions` counts every sampled token under its one `weight_versions`
        entry, numbered from the engine's default initial version "default"; with several versions, or a
        version without a number, it is a ValueError naming the trial (its tokens cannot be attributed)."""
        counts: dict[int, int] = {}
        for j, seq in enumerate(self.sequences):
            mask = np.asarray(seq.loss_mask) == 1
            if not mask.any():
                continue
            if seq.token_versions is not None:
                numbers, tokens = np.unique(np.asarray(seq.token_versions)[mask], return_counts=True)
            elif len(seq.weight_versions) == 1:
                numbers = np.asarray([version_number(seq.weight_versions[0])], np.int64)
                tokens = np.asarray([int(mask.sum())], np.int64)
            else:
                raise ValueError(
                    f"trajectory {self.trial_id!r} sequence {j} records no per-token versions and "
                    f"weight_versions {seq.weight_versions!r}: its sampled tokens have no one version"
                )
            for number, n in zip(numbers, tokens, strict=True):
                counts[int(number)] = counts.get(int(number), 0) + int(n)
        if -1 in counts:
            raise ValueError(f"trajectory {self.trial_id!r} has {counts[-1]} sampled tokens of version -1")
        return dict(sorted(counts.items()))

    @property
    def sampled_versions(self) -> frozenset[int]:
        """The weights version numbers its sampled tokens came from (empty when it sampled nothing)."""
        return frozenset(self.version_tokens)

    @property
    def oldest_version(self) -> int | None:
        """The oldest version among its sampled tokens (staleness = trainer version − this); None when it
        sampled nothing."""
        return min(self.version_tokens, default=None)


@dataclasses.dataclass(frozen=True)
class TrainBatch:
    """Packed rows, on the host (numpy, from the packer) or on the mesh (jax, `Trainer.device_batch`).
    Segment id 0 marks padding; positions restart at 0 in each segment.

    Position t of a row is an *input* token; the quantities the loss needs (target, mask, behaviour
    log-prob, advantage) are stored at the position whose logits predict them, so `targets[b, t]` is the
    next token of the same segment and every per-token field lines up with it without shifting.

    A pytree (every field a leaf, `routed_experts`, `token_versions` and `stale_kv` empty subtrees when None)
    once `legorl_jax.train` is imported: `legorl_jax/train/batch.py` registers it, so that importing this
    module needs no jax.
    """

    tokens: Int[np.ndarray | jax.Array, "B T"]
    targets: Int[np.ndarray | jax.Array, "B T"]  # tokens[b, t + 1] within the segment, 0 where there is none
    positions: Int[np.ndarray | jax.Array, "B T"]
    segment_ids: Int[np.ndarray | jax.Array, "B T"]
    # 1.0 where the *target* at t (token t+1) was sampled by the policy
    loss_mask: Float[np.ndarray | jax.Array, "B T"]
    advantages: Float[np.ndarray | jax.Array, "B T"]
    behaviour_logprobs: Float[np.ndarray | jax.Array, "B T"]  # aligned with the target at t
    routed_experts: Int[np.ndarray | jax.Array, "L B T K"] | None  # -1 = route natively
    # The weights version number the target at t was sampled under, -1 where no sampled target; the
    # packer fills it, `Trainer.device_batch` drops it (the loss does not read it, the metrics do on host).
    token_versions: Int[np.ndarray | jax.Array, "B T"] | None = None
    # 1 where the target at t was sampled over K/V of older weights than its own (`Sequence.stale_kv`), 0
    # elsewhere; host only, like `token_versions` (the alignment metrics read it).
    stale_kv: Int[np.ndarray | jax.Array, "B T"] | None = None

    @property
    def rows(self) -> int:
        """B, the number of packed rows."""
        return int(self.tokens.shape[0])

    def select_rows(self, rows: slice) -> TrainBatch:
        """The given rows of every field (the routing's row axis is its second)."""
        routing = None if self.routed_experts is None else self.routed_experts[:, rows]
        return TrainBatch(
            tokens=self.tokens[rows],
            targets=self.targets[rows],
            positions=self.positions[rows],
            segment_ids=self.segment_ids[rows],
            loss_mask=self.loss_mask[rows],
            advantages=self.advantages[rows],
            behaviour_logprobs=self.behaviour_logprobs[rows],
            routed_experts=routing,
            token_versions=None if self.token_versions is None else self.token_versions[rows],
            stale_kv=None if self.stale_kv is None else self.stale_kv[rows],
        )
