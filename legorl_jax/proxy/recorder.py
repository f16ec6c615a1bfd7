"""The token record of one proxy session: branches of the conversation, verbatim sampled ids, masks, routing.

Owns the prefix check and the incremental prompt (docs/alignment.md §1), with no I/O:

    rec = Recorder(renderer, shared_tokens="mask")
    plan = rec.plan(messages, tools, kind="main")        # which branch, the prompt ids, what to recompute
    ... engine.generate(plan.prompt_ids, ..., routed_experts_start_len=plan.routing_start) ...
    rec.commit(plan, generation, assistant_message, recomputed=None)
    rec.sequences()                                       # one `types.Sequence` per branch

A request *extends* a branch when the branch's messages are a message-wise prefix of the request (equal
messages; an assistant message the proxy returned matches by tool-call ids, since harnesses re-serialise
arguments, or by its visible text) and the tools are the same. Its prompt is then the branch's ids (every
earlier prompt token and every sampled token, verbatim) followed by the new messages rendered as the chat
template renders them at that point, generation prompt included: a sampled token is never re-tokenised.
Where the delta starts is found by counting the template's end-of-turn marker (`<|im_end|>` for ChatML):
the branch's render holds n markers, the request's render ends its branch part at the n-th, and the delta is
the text after it (after the marker's start when the sampled output did not end with the marker itself, so
the template's own end of turn becomes context). Counting, unlike a text prefix test, still holds when the
template renders earlier turns differently once the conversation moves on (Qwen3 drops `<think>` of turns
before the last user message): the branch keeps what was sampled, which is what the engine is fed.

Anything else (compaction, an injected reminder, an edited or dropped message, changed tools) opens a new
branch from the full render. Its tokens shared with an earlier branch:
- the common token prefix with the closest branch was trained there, so it is mask 0 here (`shared_masked`);
- beyond that prefix, runs of tokens that an earlier branch sampled verbatim (re-rendered replies) are, with
  `shared_tokens="recompute"`, mask 1 with log-probs the engine recomputes on this branch (`recomputed`),
  with `"mask"` mask 0 (`rerendered_masked`). Never a placeholder log-prob on a mask-1 token.
The end-of-turn tokens the template writes after a sampled stop token are context (mask 0).

Weights versions: every sampled token keeps the version it was sampled under
(`Generation.token_weight_versions` when an update landed mid-request, else `weight_version`) as its number
(`versions.version_number`; the engine's initial version `initial_version` is 0), -1 on prompt and tool
tokens: `Sequence.token_versions` and the archive's `b{i}_token_versions`. A recomputed re-rendered token
gets the version of the turn's generation's last token (`Generation.weight_version`): the scoring call follows
that generation at once and reports no version of its own, so an update landing between the two would tag
it one version early.
A version that is not a number of this run (a server started under another name) leaves the branch's
numbers unrecorded (`token_versions` None); the version strings stay in the branch summary and the turns
(`turn_versions`: per turn whose tokens span several versions, each token's version).
A sampled token that the engine sampled over K/V of older weights (`Generation.token_stale_kv`) is 1 in
`Sequence.stale_kv` and the archive's `b{i}_stale_kv` (both absent when no token of the branch was); a
recomputed re-rendered token is scored by a call of its own and counts as fresh.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import orjson

from legorl_jax.types import Generation
from legorl_jax.types import Sequence as TrainSequence
from legorl_jax.versions import version_numbers

log = logging.getLogger(__name__)

SHARED_TOKEN_MODES = ("mask", "recompute")
# Beyond every new shape of turn, the fast delta render is checked against the full render every Nth turn.
VERIFY_EVERY = 16
# A sampled run shorter than this found again in a new branch is a coincidence (an end-of-turn token, "ok").
MIN_RERENDERED_RUN = 4


def text_of(content: Any) -> str:
    """The text of a message content: a string, or the `text` of its content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type") == "text")


def canonical_tools(tools: Sequence[Mapping[str, Any]] | None) -> str:
    return json.dumps(list(tools or ()), sort_keys=True, ensure_ascii=False)


def same_message(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> bool:
    """Message equivalence of the prefix check (module docstring)."""
    if ours.get("role") != theirs.get("role"):
        return False
    if ours.get("role") == "assistant":
        a, b = ours.get("tool_calls") or [], theirs.get("tool_calls") or []
        if a or b:
            if len(a) != len(b):
                return False
            if all(c.get("id") for c in a) and all(c.get("id") for c in b):
                return [c["id"] for c in a] == [c["id"] for c in b]
            return [c.get("function", {}).get("name") for c in a] == [
                c.get("function", {}).get("name") for c in b
            ]
        return text_of(ours.get("content")).strip() == text_of(theirs.get("content")).strip()
    keys = ("content", "tool_call_id")
    return all(
        (text_of(ours.get(k)) if k == "content" else ours.get(k))
        == (text_of(theirs.get(k)) if k == "content" else theirs.get(k))
        for k in keys
    )


class Renderer:
    """The model's chat template as the recorder uses it: full renders and end-of-turn aware deltas."""

    def __init__(
        self, tokenizer: Any, template_kwargs: Mapping[str, Any] | None = None, *, fast: bool = True
    ):
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})
        self.fast = fast
        self.fast_renders = self.verified_renders = self.fast_mismatches = 0
        self._checked_shapes: set[tuple] = set()
        self._heads: dict[tuple, int] = {}  # stand-in structure -> end-of-turn markers in its render
        probe = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "PROBE-REPLY"}]
        text = self.render(probe, None, generation_prompt=False)
        tail = text[text.rfind("PROBE-REPLY") + len("PROBE-REPLY") :]
        self.end_marker: str | None = None
        self.end_marker_id: int | None = None
        for eos in tokenizer.eos_token_ids:
            marker = tokenizer.decode([eos])
            if marker and tail.startswith(marker):
                self.end_marker, self.end_marker_id = marker, int(eos)
                break
        if self.end_marker is None:
            raise ValueError(
                f"the chat template closes an assistant turn with {tail!r}, which starts with none of the "
                f"stop tokens {[tokenizer.decode([e]) for e in tokenizer.eos_token_ids]}: the proxy cannot "
                "tell where a sampled reply ends in the history"
            )
        # Branches keep their marker count incrementally (one render per turn, not two): that needs a reply
        # to add exactly one marker and the generation prompt none.
        asked = self.render(probe[:1], None, generation_prompt=True)
        if text.count(self.end_marker) != asked.count(self.end_marker) + 1:
            raise ValueError(
                f"the chat template writes {self.end_marker!r} into its generation prompt or more than once "
                f"per reply ({asked!r} / {text!r}); the proxy counts it to find where each turn ends"
            )

    def render(self, messages: Sequence[Mapping[str, Any]], tools: Any, *, generation_prompt: bool) -> str:
        return self.tokenizer.render(
            messages, tools=tools or None, add_generation_prompt=generation_prompt, **self.template_kwargs
        )

    def full(self, messages: Sequence[Mapping[str, Any]], tools: Any) -> list[int]:
        return self.tokenizer.encode(self.render(messages, tools, generation_prompt=True))

    def _tail(
        self,
        before: Sequence[Mapping[str, Any]],
        new: Sequence[Mapping[str, Any]],
        tools: Any,
        markers: int,
        closed: bool,
    ) -> str | None:
        """The text of `new` and the generation prompt after the `markers`-th end-of-turn marker."""
        full = self.render([*before, *new], tools, generation_prompt=True)
        at = -1
        for _ in range(markers):
            at = full.find(self.end_marker, at + 1)
            if at < 0:
                return None
        return full[at + len(self.end_marker) if closed else at :]

    def delta(
        self,
        before: Sequence[Mapping[str, Any]],
        new: Sequence[Mapping[str, Any]],
        tools: Any,
        *,
        closed: bool,
        markers: int,
        verify: bool = False,
    ) -> tuple[list[int], int] | None:
        """(ids of `new` and the generation prompt after `before` as the template renders them there, the
        number of end-of-turn markers in the render of `before` + `new`).

        `markers`: how many the render of `before` holds; `closed`: the sampled reply ended with the marker
        itself. None when the longer render does not hold that many (a new branch is opened).

        Fast path: the new messages are rendered after a stand-in for `before` (its first and last messages,
        without the tool schemas), so a turn costs a render of its new messages, not of the whole history.
        A template whose rendering of new messages depended on more than that would differ, so the full
        render is made too and compared whenever the shape of the turn (the new messages' roles, tools offered
        or not, how the last reply ended, the last message's role and number of tool calls) has not been
        checked yet, and when `verify` asks for it; the first difference turns the fast path off for good
        (`fast_mismatches`). The stand-in's own marker count is cached by its structure (`_head`).
        """
        if markers == 0:
            return None
        tail = None
        if self.fast and len(before) > 2:
            stand_in = [before[0], before[-1]]
            try:
                head = self._head(stand_in)
                tail = self._tail(stand_in, new, None, head, closed)
            except (ValueError, TypeError):  # the template refuses the stand-in (e.g. roles must alternate)
                tail = None
            self.fast_renders += tail is not None
            last = before[-1]
            shape = (
                tuple(m.get("role") for m in new),
                bool(tools),
                closed,
                last.get("role"),
                len(last.get("tool_calls") or ()),
            )
            if tail is not None and (verify or shape not in self._checked_shapes):
                slow = self._tail(before, new, tools, markers, closed)
                self.verified_renders += 1
                if slow != tail:
                    self.fast_mismatches += 1
                    self.fast = False
                    log.warning(
                        "the chat template renders new turns differently after a stand-in history; "
                        "rendering the whole history from now on"
                    )
                    tail = slow
                else:
                    self._checked_shapes.add(shape)
        if tail is None:
            tail = self._tail(before, new, tools, markers, closed)
            if tail is None:
                return None
        body = tail[len(self.end_marker) :] if not closed else tail
        return self.tokenizer.encode(tail), markers + body.count(self.end_marker)

    def _head(self, stand_in: list[Mapping[str, Any]]) -> int:
        """End-of-turn markers in the render of the stand-in history, cached by its structure: the first
        message itself (the system prompt, the same every turn) and the last one's role, fields and number
        of tool calls. A message whose text holds the marker itself is never cached. The fast path's checks
        against the full render (new shapes, every VERIFY_EVERY turns) cover this count too."""
        first, last = stand_in
        texts = (text_of(first.get("content")), text_of(last.get("content")))
        if any(self.end_marker in x for x in texts):
            return self.render(stand_in, None, generation_prompt=False).count(self.end_marker)
        key = (
            orjson.dumps(first, option=orjson.OPT_SORT_KEYS, default=str),
            last.get("role"),
            tuple(sorted(k for k, v in last.items() if v not in (None, "", []))),
            len(last.get("tool_calls") or ()),
        )
        head = self._heads.get(key)
        if head is None:
            head = self.render(stand_in, None, generation_prompt=False).count(self.end_marker)
            if len(self._heads) > 4096:
                self._heads.clear()
            self._heads[key] = head
        return head

    def full_with_markers(self, messages: Sequence[Mapping[str, Any]], tools: Any) -> tuple[list[int], int]:
        text = self.render(messages, tools, generation_prompt=True)
        return self.tokenizer.encode(text), text.count(self.end_marker)

    def count_tokens(self, messages: Sequence[Mapping[str, Any]], tools: Any) -> int:
        return len(self.full(messages, tools))


@dataclasses.dataclass
class Branch:
    """One line of the conversation: the messages as they stand and its verbatim token record."""

    index: int
    kind: str  # "main" | "side"
    tools_key: str
    messages: list[dict[str, Any]]
    opened_by: str  # "first" | "rewrite" | "side"
    parent: int | None = None
    ids: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int32))  # int32[T]
    mask: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    routing: np.ndarray | None = None  # int16[T, L, K], -1 = not recorded
    versions: list[str] = dataclasses.field(default_factory=list)  # distinct, in the order first sampled
    token_versions: list[int] = dataclasses.field(default_factory=list)  # per token, -1 = not sampled
    stale_kv: list[int] = dataclasses.field(default_factory=list)  # per token, 1 = sampled over older K/V
    unnumbered: list[str] = dataclasses.field(default_factory=list)  # sampled versions without a number
    turns: list[int] = dataclasses.field(default_factory=list)
    closed: bool = True  # the last sampled reply ended with the end-of-turn marker
    markers: int = 0  # end-of-turn markers in the render of `messages`
    shared_masked: int = 0
    recomputed: int = 0
    rerendered_masked: int = 0

    def summary(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "kind": self.kind,
            "opened_by": self.opened_by,
            "parent": self.parent,
            "turns": list(self.turns),
            "tokens": len(self.ids),
            "sampled": int(sum(self.mask)),
            "shared_masked": self.shared_masked,
            "recomputed": self.recomputed,
            "rerendered_masked": self.rerendered_masked,
            "weight_versions": list(self.versions),
        }

    def version_array(self) -> np.ndarray | None:
        """int32[T]: the version number each token was sampled under, -1 where none; None when a version
        had no number (module docstring)."""
        if self.unnumbered:
            return None
        return np.asarray(self.token_versions, np.int32)

    def stale_kv_array(self) -> np.ndarray | None:
        """int8[T]: 1 where a token was sampled over K/V of older weights; None when none was."""
        return np.asarray(self.stale_kv, np.int8) if any(self.stale_kv) else None

    def number_versions(self, versions: Sequence[str], *, initial: str) -> list[int]:
        """The numbers of newly sampled tokens' versions (noting the versions and any without a number)."""
        distinct = list(dict.fromkeys(versions))
        self.versions.extend(v for v in distinct if v not in self.versions)
        numbers = version_numbers(versions, initial=initial)
        if numbers is None:
            self.unnumbered.extend(v for v in distinct if v not in self.unnumbered)
            return [-1] * len(versions)
        return numbers.tolist()


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one request will do to the record: extend `branch` or open a new one with these prompt ids."""

    branch: int | None  # None: a new branch
    kind: str
    messages: tuple[dict[str, Any], ...]
    tools_key: str
    prompt_ids: np.ndarray  # int32[P]
    routing_start: int  # first input position whose routing is not recorded yet
    markers: int  # end-of-turn markers in the render of `messages` (the reply will add one)
    parent: int | None = None
    shared_prefix: int = 0  # new branch: tokens shared with `parent`'s record
    rerendered: tuple[int, ...] = ()  # new branch: prompt positions an earlier branch sampled verbatim


class Recorder:
    """Branches of one session (module docstring)."""

    def __init__(self, renderer: Renderer, *, shared_tokens: str = "mask", initial_version: str = "default"):
        if shared_tokens not in SHARED_TOKEN_MODES:
            raise ValueError(f"shared_tokens must be one of {SHARED_TOKEN_MODES}, got {shared_tokens!r}")
        if not isinstance(initial_version, str) or not initial_version:
            raise ValueError(f"initial_version must be a non-empty string, got {initial_version!r}")
        self.renderer = renderer
        self.shared_tokens = shared_tokens
        self.initial_version = initial_version
        self.branches: list[Branch] = []
        # turn index -> each output token's version, for turns an update landed in (the rest: one version)
        self.turn_versions: dict[int, tuple[str, ...]] = {}

    def _extends(self, branch: Branch, messages: Sequence[Mapping[str, Any]]) -> bool:
        n = len(branch.messages)
        return n < len(messages) and all(
            same_message(a, b) for a, b in zip(branch.messages, messages, strict=False)
        )

    def plan(self, messages: Sequence[Mapping[str, Any]], tools: Any, *, kind: str) -> Plan:
        """Where the request goes and its prompt ids (module docstring)."""
        key = canonical_tools(tools)
        candidates = [
            b for b in self.branches if b.kind == kind and b.tools_key == key and self._extends(b, messages)
        ]
        if candidates:
            branch = max(candidates, key=lambda b: (len(b.messages), b.index))
            turns = len(branch.turns)
            found = self.renderer.delta(
                branch.messages,
                messages[len(branch.messages) :],
                tools,
                closed=branch.closed,
                markers=branch.markers,
                verify=turns % VERIFY_EVERY == 0,
            )
            if found is not None:
                delta, markers = found
                return Plan(
                    branch=branch.index,
                    kind=kind,
                    messages=tuple(messages),
                    tools_key=key,
                    prompt_ids=np.concatenate([branch.ids, np.asarray(delta, np.int32)]),
                    routing_start=max(len(branch.ids) - 1, 0),
                    markers=markers,
                )
        prompt, markers = self.renderer.full_with_markers(messages, tools)
        parent, shared = None, 0
        for b in self.branches:
            n = _common_prefix(b.ids, prompt)
            if n > shared:
                parent, shared = b.index, n
        rerendered = self._rerendered(prompt, shared) if self.branches else ()
        return Plan(
            branch=None,
            kind=kind,
            messages=tuple(messages),
            tools_key=key,
            prompt_ids=np.asarray(prompt, np.int32),
            routing_start=0,
            markers=markers,
            parent=parent,
            shared_prefix=shared,
            rerendered=rerendered,
        )

    def _rerendered(self, prompt: list[int], start: int) -> tuple[int, ...]:
        """Positions >= start of `prompt` inside a run of tokens some branch sampled (one turn's output)."""
        hay = np.asarray(prompt, np.int32)
        hits: set[int] = set()
        for b in self.branches:
            mask = np.asarray(b.mask, np.int8)
            ids = np.asarray(b.ids, np.int32)
            edges = np.flatnonzero(np.diff(np.concatenate([[0], mask, [0]])))
            for lo, hi in zip(edges[::2], edges[1::2], strict=True):
                if hi - lo < MIN_RERENDERED_RUN:
                    continue
                for at in _find_all(hay, ids[lo:hi], start):
                    hits.update(range(at, at + hi - lo))
        return tuple(sorted(hits))

    def commit(
        self,
        plan: Plan,
        generation: Generation,
        reply: dict[str, Any],
        *,
        turn: int,
        recomputed: np.ndarray | None = None,
    ) -> Branch:
        """Appends the prompt and the sampled tokens of `plan` to its branch (opened here if new).

        `recomputed`: float32[len(plan.rerendered)], the engine's log-probs of those positions on this
        branch (required with shared_tokens="recompute" when the plan has re-rendered positions).
        """
        prompt = plan.prompt_ids
        per_token = generation.token_weight_versions
        if per_token is not None and len(per_token) != len(generation.output_ids):
            raise ValueError(
                f"token_weight_versions has {len(per_token)} entries for {len(generation.output_ids)} "
                "output tokens"
            )
        if plan.branch is None:
            opened_by = "first" if not self.branches else ("side" if plan.kind == "side" else "rewrite")
            branch = Branch(len(self.branches), plan.kind, plan.tools_key, [], opened_by, parent=plan.parent)
            self.branches.append(branch)
            mask = [0] * len(prompt)
            logprobs = [0.0] * len(prompt)
            versions = [-1] * len(prompt)
            if plan.parent is not None:
                parent = self.branches[plan.parent]
                branch.shared_masked = int(sum(parent.mask[: plan.shared_prefix]))
            if plan.rerendered:
                if self.shared_tokens == "recompute":
                    if recomputed is None or len(recomputed) != len(plan.rerendered):
                        raise ValueError(
                            f"recomputed must hold {len(plan.rerendered)} log-probs for the re-rendered "
                            f"tokens, got {None if recomputed is None else len(recomputed)}"
                        )
                    scored = branch.number_versions(
                        [generation.weight_version] * len(plan.rerendered), initial=self.initial_version
                    )
                    for pos, lp, v in zip(plan.rerendered, recomputed, scored, strict=True):
                        mask[pos], logprobs[pos], versions[pos] = 1, float(lp), v
                    branch.recomputed = len(plan.rerendered)
                else:
                    branch.rerendered_masked = len(plan.rerendered)
            branch.mask, branch.logprobs, branch.token_versions = mask, logprobs, versions
            branch.stale_kv = [0] * len(prompt)
        else:
            branch = self.branches[plan.branch]
            old = len(branch.ids)
            branch.mask += [0] * (len(prompt) - old)
            branch.logprobs += [0.0] * (len(prompt) - old)
            branch.token_versions += [-1] * (len(prompt) - old)
            branch.stale_kv += [0] * (len(prompt) - old)
        out = np.asarray(generation.output_ids, np.int32)
        branch.ids = np.concatenate([prompt, out])
        branch.mask += [1] * len(out)
        branch.logprobs += np.asarray(generation.output_logprobs, np.float32).tolist()
        if per_token is not None and len(set(per_token)) > 1:
            self.turn_versions[turn] = tuple(per_token)
        branch.token_versions += branch.number_versions(
            per_token or (generation.weight_version,) * len(out), initial=self.initial_version
        )
        stale = generation.token_stale_kv
        branch.stale_kv += [0] * len(out) if stale is None else np.asarray(stale, np.int8).tolist()
        branch.messages = [*plan.messages, reply]
        branch.turns.append(turn)
        branch.closed = len(out) > 0 and int(out[-1]) == self.renderer.end_marker_id
        branch.markers = plan.markers + 1
        self._record_routing(branch, generation)
        return branch

    def _record_routing(self, branch: Branch, generation: Generation) -> None:
        rows = generation.routed_experts
        total = len(branch.ids)
        if rows is None:
            if branch.routing is not None:
                branch.routing = _grow(branch.routing, total)
            return
        rows = np.asarray(rows)
        shape = rows.shape[1:]
        if branch.routing is None:
            branch.routing = np.full((total, *shape), -1, np.int16)
        else:
            if branch.routing.shape[1:] != shape:
                raise ValueError(
                    f"routed_experts rows changed shape from {branch.routing.shape[1:]} to {shape}"
                )
            branch.routing = _grow(branch.routing, total)
        start = generation.routed_experts_start
        branch.routing[start : start + len(rows)] = rows.astype(np.int16)

    def sequences(self, kinds: Sequence[str] = ("main",)) -> list[TrainSequence]:
        """One training `Sequence` per branch of the given kinds that sampled anything."""
        out = []
        for b in self.branches:
            if b.kind not in kinds or not any(b.mask):
                continue
            out.append(
                TrainSequence(
                    token_ids=np.asarray(b.ids, np.int32),
                    loss_mask=np.asarray(b.mask, np.int8),
                    behaviour_logprobs=np.asarray(b.logprobs, np.float32),
                    routed_experts=None if b.routing is None else _grow(b.routing, len(b.ids)),
                    weight_versions=tuple(b.versions),
                    token_versions=b.version_array(),
                    stale_kv=b.stale_kv_array(),
                )
            )
        return out


def _grow(routing: np.ndarray, total: int) -> np.ndarray:
    if len(routing) >= total:
        return routing[:total]
    pad = np.full((total - len(routing), *routing.shape[1:]), -1, routing.dtype)
    return np.concatenate([routing, pad])


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


def _find_all(hay: np.ndarray, needle: np.ndarray, start: int) -> list[int]:
    """Start positions >= start where `needle` occurs in `hay` (non-overlapping, left to right)."""
    m = len(needle)
    if m == 0 or len(hay) - start < m:
        return []
    found, at = [], start
    first = needle[0]
    while at <= len(hay) - m:
        cand = np.flatnonzero(hay[at : len(hay) - m + 1] == first)
        hit = next(
            (at + int(c) for c in cand if np.array_equal(hay[at + int(c) : at + int(c) + m], needle)), None
        )
        if hit is None:
            break
        found.append(hit)
        at = hit + m
    return found
