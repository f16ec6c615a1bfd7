"""Resuming aborted requests: one `Generation` from pieces cut by weight updates (update policy
`abort_resume`, weight_update.py), on any `Engine`.

    resumed = await generate_resuming(engine, prompt_ids, sampling, max_resumes=8,
                                      return_routed_experts=True, routed_experts_start_len=s, rid="sess-3")
    resumed.generation, resumed.resumes, resumed.prefill_tokens

A piece that ends with finish_reason "abort" while its budget is not spent is re-issued (as verl's partial
rollout does): prompt + every token sampled so far as the new prompt, `max_new_tokens` reduced by them,
routing asked from the request's own `routed_experts_start_len`, rid `<rid>-resume<k>`. The pieces are
merged into one Generation of the original request: output ids, log-probs and top log-probs of each piece
exactly as it sampled them, per-token weight versions, the finish reason and matched stop of the last
piece, `cached_tokens` of the first, and the routing rows of the last piece that sampled anything: they
cover [routed_experts_start_len, P + N - 1) as for a request never cut.

Why the last piece's rows: a routing row at position t serves twice, for the logits of token t + 1 and for
the K/V every later token attends to. A re-issue after a weight update re-prefills the prompt and the cut
tokens on the new weights (the engine flushed its cache with the update), so its tokens were sampled over
the new weights' routing of *every* earlier position, not the cut piece's. Those rows are what the trainer
must replay for its recompute of the newest tokens to be exact (R3), and they are the only tokens it can be
on-policy for: the cut pieces' tokens are of older versions (`offpolicy/*_cross` in the alignment figures),
and for them the new forward's rows are the current policy's own routing, not a mix of old routing and new
weights that no policy computed. (Real SGLang 0.5.23 returns a re-prefill's rows from any start in
[0, prompt_tokens]; tests/engine/test_sglang_real.py checks the replay against it.)

Bounded: at most `max_resumes` re-issues, and only while `engine.health()` is true, so an abort that is
not a weight update (the engine closing, an operator's abort) surfaces as the aborted Generation after at
most that many tries, never a loop. A piece aborted without all of its routing rows (a server that drops
them on abort) cannot be continued truthfully: its abort surfaces too. A cancelled call is not an abort:
the cancellation propagates.

Seeds: an engine keys each token's randomness on (seed, absolute position) (base.py), so the re-issue
keeps the request's seed: a seeded request cut by an abort samples every later token with the key it would
have had uncut, and with unchanged weights gives exactly the uncut tokens (a weight update changes the
logits, not the keys). An unseeded request draws a fresh seed per piece. (Real SGLang's per-request seed
does not promise position keying; there a resumed seeded request is reproducible but not the uncut one.)

Limit: a stop string split across two pieces is not matched (each piece checks its own text; stop token
ids always are).

Cost: `prefill_tokens` counts prompt positions a re-issue forwards again that an aborted piece had already
forwarded (P + n - 1 for a piece that sampled n >= 1 tokens, less what the re-issue found in the
prefix cache): the extra prefill `abort_resume` pays.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from legorl_jax.engine.base import Engine, SamplingParams, check_input_ids
from legorl_jax.types import Generation


@dataclasses.dataclass(frozen=True)
class Resumed:
    """A request's merged Generation and what resuming it cost."""

    generation: Generation
    resumes: int  # re-issues after an abort
    prefill_tokens: int  # prompt positions forwarded again by those re-issues (module docstring)


async def generate_resuming(
    engine: Engine,
    input_ids: Any,
    sampling: SamplingParams,
    *,
    max_resumes: int,
    return_routed_experts: bool = False,
    routed_experts_start_len: int = 0,
    rid: str | None = None,
    top_logprobs: int = 0,
    session_id: str | None = None,
) -> Resumed:
    """`engine.generate(...)`, its aborted pieces re-issued and merged (module docstring)."""
    if isinstance(max_resumes, bool) or not isinstance(max_resumes, int) or max_resumes < 0:
        raise ValueError(f"max_resumes must be an int >= 0, got {max_resumes!r}")
    prompt = check_input_ids(input_ids)
    pieces: list[Generation] = []
    sampled = np.zeros(0, np.int32)
    extra = 0
    while True:
        k = len(pieces)
        piece = await engine.generate(
            np.concatenate([prompt, sampled]),
            dataclasses.replace(sampling, max_new_tokens=sampling.max_new_tokens - len(sampled)),
            return_routed_experts=return_routed_experts,
            routed_experts_start_len=routed_experts_start_len,  # every row the piece forwarded (docstring)
            rid=None if rid is None else (rid if k == 0 else f"{rid}-resume{k}"),
            session_id=session_id,
            **({"top_logprobs": top_logprobs} if top_logprobs else {}),  # engines without it stay callable
        )
        if k and len(sampled) and len(piece.output_ids):  # it ran, and re-forwarded what a cut piece had
            extra += max(len(prompt) + len(sampled) - 1 - piece.cached_tokens, 0)
        pieces.append(piece)
        sampled = np.concatenate([sampled, np.asarray(piece.output_ids, np.int32)])
        if not (
            piece.finish_reason == "abort"
            and k < max_resumes
            and len(sampled) < sampling.max_new_tokens
            and _routing_complete(piece, return_routed_experts)
            and await engine.health()
        ):
            break
    return Resumed(_merge(pieces, prompt_tokens=len(prompt)), len(pieces) - 1, extra)


def _routing_complete(piece: Generation, asked: bool) -> bool:
    """True when the piece carries every row it should (or none was asked, or the model is dense)."""
    if not asked or piece.routed_experts is None:
        return True
    expected = max(piece.prompt_tokens + len(piece.output_ids) - 1 - piece.routed_experts_start, 0)
    return len(piece.routed_experts) == expected


def _merge(pieces: list[Generation], *, prompt_tokens: int) -> Generation:
    if len(pieces) == 1:
        return pieces[0]
    last = pieces[-1]
    # A piece aborted before it sampled anything was never prefilled (or its prompt rows are asked again by
    # the next piece): it adds nothing but its finish reason, when it is the last.
    pieces = [p for p in pieces if len(p.output_ids)] or [last]
    first = pieces[0]
    versions = tuple(
        v for p in pieces for v in (p.token_weight_versions or (p.weight_version,) * len(p.output_ids))
    )
    tops = [p.output_top_ids for p in pieces]
    return Generation(
        output_ids=np.concatenate([p.output_ids for p in pieces]).astype(np.int32),
        output_logprobs=np.concatenate([p.output_logprobs for p in pieces]).astype(np.float32),
        routed_experts=pieces[-1].routed_experts,  # the newest forward of every position (docstring)
        finish_reason=last.finish_reason,
        weight_version=versions[-1] if versions else last.weight_version,
        prompt_tokens=prompt_tokens,
        routed_experts_start=first.routed_experts_start,
        token_weight_versions=versions if len(set(versions)) > 1 else None,
        matched_stop=last.matched_stop,
        cached_tokens=first.cached_tokens,
        output_top_ids=None if any(t is None for t in tops) else np.concatenate(_present(tops), axis=0),
        output_top_logprobs=(
            None if any(t is None for t in tops) else np.concatenate([p.output_top_logprobs for p in pieces])
        ),
        token_stale_kv=(
            np.concatenate([_stale_flags(p) for p in pieces])
            if any(p.stale_kv_tokens for p in pieces)
            else None
        ),
    )


def _stale_flags(piece: Generation) -> np.ndarray:
    """bool[N]: the piece's per-token stale-K/V flags (all False when it has none)."""
    if piece.token_stale_kv is None:
        return np.zeros(len(piece.output_ids), np.bool_)
    return np.asarray(piece.token_stale_kv, np.bool_)


def _present(arrays: list[np.ndarray | None]) -> list[np.ndarray]:
    """The arrays of a list the caller found all present."""
    return [a for a in arrays if a is not None]
