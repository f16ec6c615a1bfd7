"""SGLang's native HTTP wire format, both ways: our server speaks it, our client reads it.

One module owns the field names so the server (serve.py) and the client (sglang_client.py) cannot drift:

- `parse_generate(body) -> GenerateRequest` validates a `POST /generate` body: `input_ids` (a flat list of
  ints) or `text`, `sampling_params` (SGLang's names; `sampling_seed` is the seed), `return_logprob`,
  `logprob_start_len` (-1: output tokens only), `return_routed_experts`, `routed_experts_start_len`,
  `rid`, `session_id` (our prefix cache's hint to keep the conversation resident). SGLang fields we do
  not implement are accepted only at their neutral value (`stream: false`,
  `n: 1`, `repetition_penalty: 1`, ...), anything else is a `WireError` naming the field and value; so
  is a key SGLang does not have (a typo never passes silently).
- `generate_request_json(...)` builds the same body on the client side.
- `generation_json(...)` writes the response: `text`, `output_ids`, `meta_info.{id, finish_reason {type,
  matched | length | message}, prompt_tokens, completion_tokens, cached_tokens, weight_version,
  e2e_latency, output_token_logprobs [[logprob, id, null], ...], input_token_logprobs,
  output_top_logprobs (with `top_logprobs_num` k > 0: per output position its k likeliest
  [[logprob, id, null], ...]), routed_experts}`; `routed_experts` is base64 of little-endian int32
  `[P + N - 1 - start, L, K]`. Our extensions: `routed_experts_start_len` beside `routed_experts` (the
  position of its first row: a server that returns routing unasked, `serve.py --return-routed-experts
  always`, starts where our `tracestate` member says, else at 0), and, sent only when an update landed
  mid-request, `stale_kv_tokens` (`Generation.stale_kv_tokens`: a count, of the *last* output tokens, as
  our engine flags them: every token after the update). When an update landed mid-request the
  reply also carries SGLang's own (0.5.23) `weight_versions`: spans `[{version, start, end}, ...]` of output
  token positions, in order, covering every output token (`weight_version_spans`).
- Headers: `x-smg-routing-key` (sglang-router's routing key: the session id) and our member of
  `tracestate` naming the asked routing start, both read by our server when a router dropped the body's
  fields (ROUTING_KEY_HEADER, ROUTED_START_MEMBER below).
- `generation_from_json(...)` reads a response back into a `Generation` (routing stored compactly). Rows
  that start before the asked `routed_experts_start_len` (the response says where they start) are cut to
  it, so a request whose fields a router dropped reads exactly what it asked for. `weight_versions` spans
  become `Generation.token_weight_versions` (None when one version sampled every token); a server that
  sends spans but no `stale_kv_tokens` (real SGLang) gets the tokens after the first span counted as
  sampled over old K/V: only an in-place update leaves a request running across versions.

Errors a server reports are `{"error": {"message": ..., "field": ..., "type": ...}}` with HTTP 400;
`type` is "context_overflow" for a prompt that does not fit (SGLang's own message says "longer than the
model's context length", which the client recognises too).
"""

from __future__ import annotations

import base64
import dataclasses
import math
from typing import Any

import numpy as np

from legorl_jax.engine.base import MAX_TOP_LOGPROBS, SamplingParams, check_input_ids
from legorl_jax.types import FINISH_REASONS, Generation

# sampling_params keys we implement -> SamplingParams field.
_SAMPLING_FIELDS = {
    "max_new_tokens": "max_new_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "stop": "stop",
    "stop_token_ids": "stop_token_ids",
    "sampling_seed": "seed",
    "ignore_eos": "ignore_eos",
    "skip_special_tokens": "skip_special_tokens",
    "no_stop_trim": "no_stop_trim",
}
# SGLang sampling keys accepted only at their neutral value (None is neutral for all of them).
_NEUTRAL_SAMPLING = {
    "n": 1,
    "repetition_penalty": 1.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "min_new_tokens": 0,
    "json_schema": None,
    "regex": None,
    "ebnf": None,
    "structural_tag": None,
    "spaces_between_special_tokens": True,
    "custom_params": None,
    "logit_bias": None,
}
# Top-level /generate keys accepted only at their neutral value.
_NEUTRAL_REQUEST = {
    "stream": False,
    "token_ids_logprob": None,
    "return_text_in_logprobs": False,
    "return_hidden_states": False,
    "return_entropy": False,
    "lora_path": None,
    "image_data": None,
    "input_embeds": None,
    "custom_logit_processor": None,
    "return_sampling_mask": False,
    # sglang-router (0.3.2) re-serializes every /generate body it forwards with these defaults.
    "model": None,
    "background": False,
    "return_bytes": False,
}
_IGNORED_REQUEST = (
    "log_metrics",  # the router's defaults again: they change nothing in the reply
    "no_logs",
    "priority",
    "extra_key",
    "routed_dp_rank",
    "data_parallel_rank",
    "bootstrap_host",
)
_REQUEST_FIELDS = ("input_ids", "text", "sampling_params", "return_logprob", "logprob_start_len",
                   "return_routed_experts", "routed_experts_start_len", "rid", "session_id",
                   "top_logprobs_num")  # fmt: skip

CONTEXT_OVERFLOW = "context_overflow"

ROUTING_KEY_HEADER = "x-smg-routing-key"
"""sglang-router's routing key header: the fleet sends a session's id in it (engine/fleet.py), and our
server reads it as the `session_id` hint when a router dropped the body field."""

TRACESTATE_HEADER = "tracestate"
ROUTED_START_MEMBER = "legorl"
"""Whenever our client asks for routing it also sends the asked `routed_experts_start_len` as its own member
of the W3C `tracestate` header, `tracestate: legorl=routed_experts_start:S` (a vendor's list-member, the
header's purpose: vendor state carried unchanged across hops). sglang-router 0.3.2 drops the body field
and forwards only a few headers (the routing key, `X-Request-ID`, `traceparent`, `tracestate`,
`X-Correlation-ID`, `Authorization`; checked against the real router), so our server under
`--return-routed-experts always` starts the routing it sends unasked there instead of at 0: a fleet's
response then carries the N rows asked, not the P + N - 1 of the whole sequence (a real model's row is
L * K int32, 2 KiB in base64 for 48 layers x top 8). Without the member it sends them all (still
correct: the client cuts to the asked start). Other servers ignore it."""


def routed_start_tracestate(start: int) -> str:
    """The `tracestate` member naming routing start `start` (see ROUTED_START_MEMBER)."""
    return f"{ROUTED_START_MEMBER}=routed_experts_start:{int(start)}"


def routed_start_from_tracestate(value: str | None, prompt_tokens: int) -> int:
    """The routing start our member of a `tracestate` header names (0 without the header or the member);
    a `WireError` naming the value unless it is `routed_experts_start:S`, S an integer in [0, prompt_tokens].
    Other vendors' members are left alone."""
    for member in (value or "").split(","):
        key, _, state = member.strip().partition("=")
        if key != ROUTED_START_MEMBER:
            continue
        kind, _, number = state.partition(":")
        if (
            kind != "routed_experts_start"
            or not number.isascii()
            or not number.isdigit()
            or int(number) > prompt_tokens
        ):
            raise WireError(
                f"{TRACESTATE_HEADER} member {ROUTED_START_MEMBER!r} must be 'routed_experts_start:S' with S "
                f"an integer in [0, prompt_tokens={prompt_tokens}], got {member.strip()!r}",
                TRACESTATE_HEADER,
            )
        return int(number)
    return 0


class WireError(ValueError):
    """A request or response that does not follow the wire format; `field` names where."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _neutral(value: Any, neutral: Any) -> bool:
    if value is None or value == neutral:
        return True
    return isinstance(value, (list, dict)) and not value and neutral is None


# ----------------------------------------------------------------------------------------------------
# requests


@dataclasses.dataclass(frozen=True)
class GenerateRequest:
    """A validated `POST /generate` body."""

    input_ids: np.ndarray | None  # int32[P]; None when `text` was sent
    text: str | None
    sampling: SamplingParams
    return_logprob: bool = False
    logprob_start_len: int = -1
    return_routed_experts: bool = False
    routed_experts_start_len: int = 0
    rid: str | None = None
    session_id: str | None = None  # the prefix cache's hint: keep this conversation resident between turns
    top_logprobs_num: int = 0  # k > 0: the k likeliest tokens of each output position (with return_logprob)


def parse_sampling(params: Any) -> SamplingParams:
    """`sampling_params` as a SamplingParams, or a WireError naming `sampling_params.<key>`."""
    if params is None:
        return SamplingParams()
    if not isinstance(params, dict):
        raise WireError(f"sampling_params must be an object, got {params!r}", "sampling_params")
    kwargs: dict[str, Any] = {}
    for key, value in params.items():
        if key in _SAMPLING_FIELDS:
            if value is not None:
                kwargs[_SAMPLING_FIELDS[key]] = tuple(value) if isinstance(value, list) else value
        elif key in _NEUTRAL_SAMPLING:
            if not _neutral(value, _NEUTRAL_SAMPLING[key]):
                raise WireError(
                    f"sampling_params.{key}={value!r} is not supported by this engine "
                    f"(only {_NEUTRAL_SAMPLING[key]!r} or null)",
                    f"sampling_params.{key}",
                )
        else:
            raise WireError(
                f"sampling_params.{key} is not a known sampling parameter (value {value!r})",
                f"sampling_params.{key}",
            )
    try:
        return SamplingParams(**kwargs)
    except ValueError as exc:
        ours = str(exc).split(" ", 1)[0].removeprefix("sampling_params.")
        wire = {v: k for k, v in _SAMPLING_FIELDS.items()}.get(ours)
        message = (
            str(exc).replace(f"sampling_params.{ours} ", f"sampling_params.{wire} ", 1) if wire else str(exc)
        )
        raise WireError(message, f"sampling_params.{wire}" if wire else "sampling_params") from None


def parse_generate(body: Any, vocab_size: int | None = None) -> GenerateRequest:
    """A `/generate` body as a GenerateRequest (module docstring); WireError on anything malformed."""
    if not isinstance(body, dict):
        raise WireError(f"the request body must be a JSON object, got {type(body).__name__}", "body")
    for key, value in body.items():
        if key in _NEUTRAL_REQUEST:
            if not _neutral(value, _NEUTRAL_REQUEST[key]):
                raise WireError(
                    f"{key}={value!r} is not supported by this engine (only {_NEUTRAL_REQUEST[key]!r})", key
                )
        elif key not in _REQUEST_FIELDS and key not in _IGNORED_REQUEST:
            raise WireError(f"{key} is not a /generate field (value {str(value)[:60]!r})", key)
    ids, text = body.get("input_ids"), body.get("text")
    if (ids is None) == (text is None):
        raise WireError("send exactly one of input_ids and text", "input_ids")
    if ids is not None:
        if isinstance(ids, list) and ids and isinstance(ids[0], list):
            raise WireError(
                "input_ids must be a flat list of ints: batched requests are not supported", "input_ids"
            )
        try:
            ids = check_input_ids(ids, vocab_size)
        except (TypeError, ValueError) as exc:
            raise WireError(str(exc), "input_ids") from None
    if text is not None and (not isinstance(text, str) or not text):
        raise WireError(
            f"text must be a non-empty string (batched requests are not supported), got {text!r}", "text"
        )
    flags: dict[str, Any] = {}
    for key in ("return_logprob", "return_routed_experts"):
        flags[key] = body.get(key) if body.get(key) is not None else False
        if not isinstance(flags[key], bool):
            raise WireError(f"{key} must be a bool, got {flags[key]!r}", key)
    start = body.get("logprob_start_len", -1)
    start = -1 if start is None else start
    if not _is_int(start) or start < -1:
        raise WireError(f"logprob_start_len must be an int >= -1, got {start!r}", "logprob_start_len")
    routed_start = body.get("routed_experts_start_len", 0)
    routed_start = 0 if routed_start is None else routed_start
    if not _is_int(routed_start) or routed_start < 0:
        raise WireError(
            f"routed_experts_start_len must be an int >= 0, got {routed_start!r}", "routed_experts_start_len"
        )
    rid = body.get("rid")
    if rid is not None and (not isinstance(rid, str) or not rid):
        raise WireError(f"rid must be a non-empty string, got {rid!r}", "rid")
    session_id = body.get("session_id")
    if session_id is not None and (not isinstance(session_id, str) or not session_id):
        raise WireError(f"session_id must be a non-empty string, got {session_id!r}", "session_id")
    top = body.get("top_logprobs_num", 0)
    top = 0 if top is None else top
    if not _is_int(top) or not 0 <= top <= MAX_TOP_LOGPROBS:
        raise WireError(
            f"top_logprobs_num must be an int in [0, {MAX_TOP_LOGPROBS}], got {top!r}", "top_logprobs_num"
        )
    if top and flags["return_logprob"] and start >= 0:
        raise WireError(
            f"top_logprobs_num={top} with logprob_start_len={start}: top log-probs of prompt positions are "
            f"not supported (send logprob_start_len -1 for the output positions' only)",
            "top_logprobs_num",
        )
    return GenerateRequest(
        input_ids=ids,
        text=text,
        sampling=parse_sampling(body.get("sampling_params")),
        logprob_start_len=start,
        routed_experts_start_len=routed_start,
        rid=rid,
        session_id=session_id,
        top_logprobs_num=top,
        **flags,
    )


def check_prompt_fields(req: GenerateRequest, prompt_tokens: int) -> None:
    """The fields whose range depends on the prompt's length (known after tokenizing `text`)."""
    if req.return_logprob and req.logprob_start_len >= prompt_tokens:
        raise WireError(
            f"logprob_start_len={req.logprob_start_len} must be < the prompt's {prompt_tokens} tokens "
            "(or -1)",
            "logprob_start_len",
        )
    if req.routed_experts_start_len > prompt_tokens:
        raise WireError(
            f"routed_experts_start_len={req.routed_experts_start_len} must lie in "
            f"[0, prompt_tokens={prompt_tokens}]",
            "routed_experts_start_len",
        )


def sampling_json(sampling: SamplingParams) -> dict[str, Any]:
    """SGLang `sampling_params` for `sampling` (every field explicit, so server defaults never apply)."""
    out = {wire: getattr(sampling, ours) for wire, ours in _SAMPLING_FIELDS.items()}
    out["stop"], out["stop_token_ids"] = list(sampling.stop), list(sampling.stop_token_ids)
    if sampling.seed is None:
        del out["sampling_seed"]
    return out


def generate_request_json(
    input_ids: np.ndarray,
    sampling: SamplingParams,
    *,
    rid: str,
    return_routed_experts: bool,
    routed_experts_start_len: int,
    top_logprobs: int = 0,
    session_id: str | None = None,
) -> dict[str, Any]:
    """The `/generate` body the client sends (token in, log-probs always on)."""
    body = {
        "input_ids": np.asarray(input_ids).tolist(),  # python ints, ~10x faster than a loop
        "sampling_params": sampling_json(sampling),
        "return_logprob": True,
        "logprob_start_len": -1,
        "rid": rid,
    }
    if return_routed_experts:
        body["return_routed_experts"] = True
        body["routed_experts_start_len"] = routed_experts_start_len
    if top_logprobs:
        body["top_logprobs_num"] = top_logprobs
    if session_id is not None:
        body["session_id"] = session_id
    return body


# ----------------------------------------------------------------------------------------------------
# responses


def routing_dtype(num_experts: int) -> np.dtype:
    """The compact storage type of expert ids (docs/alignment.md §2): uint8 up to 256 experts, else int16."""
    return np.dtype(np.uint8) if num_experts <= 256 else np.dtype(np.int16)


def encode_routed_experts(routed: np.ndarray) -> str:
    """base64 of the little-endian int32 bytes of `routed` [R, L, K] (SGLang's format)."""
    return base64.b64encode(np.ascontiguousarray(routed, dtype="<i4").tobytes()).decode("ascii")


def decode_routed_experts(text: Any, num_layers: int, top_k: int) -> np.ndarray:
    """int32[R, L, K] from SGLang's base64 string; WireError when the bytes do not fit [*, L, K]."""
    if not isinstance(text, str):
        raise WireError(
            f"meta_info.routed_experts must be a base64 string, got {type(text).__name__}", "routed_experts"
        )
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError as exc:
        raise WireError(f"meta_info.routed_experts is not valid base64: {exc}", "routed_experts") from None
    row = 4 * num_layers * top_k
    if len(raw) % row:
        raise WireError(
            f"meta_info.routed_experts has {len(raw)} bytes, not a multiple of "
            f"4 * L={num_layers} * K={top_k}",
            "routed_experts",
        )
    return np.frombuffer(raw, dtype="<i4").reshape(-1, num_layers, top_k).astype(np.int32)


def finish_reason_json(gen: Generation) -> dict[str, Any]:
    if gen.finish_reason == "stop":
        return {"type": "stop", "matched": gen.matched_stop}
    if gen.finish_reason == "length":
        return {"type": "length", "length": len(gen.output_ids)}
    return {"type": "abort", "message": "the request was aborted"}


def logprob_entries(logprobs: Any, ids: Any) -> list[list[Any]]:
    """[[logprob | None, token_id, None], ...] (None for a NaN: a token scored in no context)."""
    return [
        [None if math.isnan(lp) else float(lp), int(t), None] for lp, t in zip(logprobs, ids, strict=True)
    ]


def generation_json(
    gen: Generation,
    *,
    rid: str,
    text: str,
    return_logprob: bool,
    input_logprobs: list[list[Any]] | None,
    return_routed_experts: bool,
    e2e_latency: float,
) -> dict[str, Any]:
    """The `/generate` response for one Generation (module docstring)."""
    meta: dict[str, Any] = {
        "id": rid,
        "finish_reason": finish_reason_json(gen),
        "prompt_tokens": int(gen.prompt_tokens),
        "completion_tokens": len(gen.output_ids),
        "cached_tokens": int(gen.cached_tokens),
        "weight_version": gen.weight_version,
        "e2e_latency": e2e_latency,
    }
    if gen.token_weight_versions is not None:
        meta["weight_versions"] = weight_version_spans(gen.token_weight_versions)
    if gen.stale_kv_tokens:
        stale = np.asarray(gen.token_stale_kv)
        if not stale[len(stale) - gen.stale_kv_tokens :].all():
            raise ValueError(
                f"token_stale_kv flags tokens {np.flatnonzero(stale).tolist()[:8]} of {len(stale)}: the wire "
                "carries a count of the last output tokens"
            )
        meta["stale_kv_tokens"] = int(gen.stale_kv_tokens)
    if return_logprob:
        meta["output_token_logprobs"] = logprob_entries(gen.output_logprobs, gen.output_ids)
        meta["input_token_logprobs"] = input_logprobs
        if gen.output_top_ids is not None and gen.output_top_logprobs is not None:
            meta["output_top_logprobs"] = [
                logprob_entries(lps, ids)
                for lps, ids in zip(gen.output_top_logprobs, gen.output_top_ids, strict=True)
            ]
    if return_routed_experts and gen.routed_experts is not None:
        meta["routed_experts"] = encode_routed_experts(gen.routed_experts)
        meta["routed_experts_start_len"] = int(gen.routed_experts_start)
    return {"text": text, "output_ids": np.asarray(gen.output_ids).tolist(), "meta_info": meta}


def _field(data: dict, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in data:
        raise WireError(f"the response has no {where}{key}", key)
    value = data[key]
    if not isinstance(value, kind):
        raise WireError(f"the response's {where}{key} has type {type(value).__name__}", key)
    return value


def generation_from_json(
    body: Any,
    *,
    prompt_tokens: int,
    routing: tuple[int, int, int] | None,
    routed_experts_start_len: int,
    return_routed_experts: bool,
    top_logprobs: int = 0,
) -> Generation:
    """A `/generate` response as a Generation; `routing` is (L, K, E) of an MoE model. WireError if
    malformed."""
    if not isinstance(body, dict):
        raise WireError(f"the /generate response must be an object, got {type(body).__name__}", "body")
    output_ids = _field(body, "output_ids", list, "")
    meta = _field(body, "meta_info", dict, "")
    entries = _field(meta, "output_token_logprobs", list, "meta_info.")
    if len(entries) != len(output_ids):
        raise WireError(
            f"meta_info.output_token_logprobs has {len(entries)} entries, output_ids {len(output_ids)}",
            "output_token_logprobs",
        )
    for i, (entry, token) in enumerate(zip(entries, output_ids, strict=True)):
        if (
            not isinstance(entry, list)
            or len(entry) < 2
            or entry[1] != token
            or not isinstance(entry[0], (int, float))
        ):
            raise WireError(
                f"meta_info.output_token_logprobs[{i}] = {entry!r} does not score "
                f"output_ids[{i}] = {token!r}",
                "output_token_logprobs",
            )
    finish = _field(meta, "finish_reason", dict, "meta_info.")
    reason = finish.get("type")
    if reason not in FINISH_REASONS:
        raise WireError(
            f"meta_info.finish_reason.type must be one of {FINISH_REASONS}, got {reason!r}", "finish_reason"
        )
    routed = None
    if (
        return_routed_experts
        and routing is not None
        and not (reason == "abort" and "routed_experts" not in meta)
    ):
        layers, top_k, experts = routing
        rows = decode_routed_experts(_field(meta, "routed_experts", str, "meta_info."), layers, top_k)
        # SGLang does not say where the rows start (at the asked start); our server does, and may start
        # earlier when it returns routing unasked (module docstring).
        sent = meta.get("routed_experts_start_len", routed_experts_start_len)
        if not _is_int(sent) or not 0 <= sent <= routed_experts_start_len:
            raise WireError(
                f"meta_info.routed_experts_start_len must be an int in [0, routed_experts_start_len="
                f"{routed_experts_start_len}] (the asked start), got {sent!r}",
                "routed_experts_start_len",
            )
        expected = max(prompt_tokens + len(output_ids) - 1 - sent, 0)
        if len(rows) != expected and reason != "abort":
            raise WireError(
                f"meta_info.routed_experts has {len(rows)} rows; expected "
                f"P={prompt_tokens} + N={len(output_ids)} - 1 - "
                f"routed_experts_start_len={sent} = {expected}",
                "routed_experts",
            )
        rows = rows[routed_experts_start_len - sent :]
        routed = rows.astype(routing_dtype(experts) if rows.size == 0 or rows.min() >= 0 else np.int16)
    top_ids = top_lps = None
    if top_logprobs:
        top_lps, top_ids = _top_logprobs(meta, len(output_ids), top_logprobs)
    versions = token_versions_from_spans(meta.get("weight_versions"), len(output_ids))
    n = len(output_ids)
    stale = meta.get("stale_kv_tokens")
    if stale is None:  # SGLang's reply: tokens after the first version's span ran over its K/V
        stale = 0 if versions is None else n - versions.count(versions[0])
    if not _is_int(stale) or not 0 <= stale <= n:
        raise WireError(
            f"meta_info.stale_kv_tokens must be an int in [0, {n}] (output tokens), got {stale!r}",
            "stale_kv_tokens",
        )
    return Generation(
        output_ids=np.asarray(output_ids, np.int32),
        output_logprobs=np.asarray([e[0] for e in entries], np.float32),
        routed_experts=routed,
        finish_reason=reason,
        weight_version=str(meta.get("weight_version", "default")),
        prompt_tokens=int(meta.get("prompt_tokens", prompt_tokens)),
        routed_experts_start=routed_experts_start_len,
        token_weight_versions=versions,
        matched_stop=finish.get("matched"),
        cached_tokens=int(meta.get("cached_tokens") or 0),
        output_top_ids=top_ids,
        output_top_logprobs=top_lps,
        token_stale_kv=np.arange(n) >= n - stale if stale else None,  # the last `stale` tokens
    )


def weight_version_spans(per_token: Any) -> list[dict[str, Any]]:
    """SGLang's `meta_info.weight_versions` for per-output-token versions: one `{version, start, end}` per
    run of equal versions (end exclusive)."""
    spans: list[dict[str, Any]] = []
    for i, version in enumerate(per_token):
        if spans and spans[-1]["version"] == version:
            spans[-1]["end"] = i + 1
        else:
            spans.append({"version": str(version), "start": i, "end": i + 1})
    return spans


def token_versions_from_spans(spans: Any, n: int) -> tuple[str, ...] | None:
    """Per-output-token versions from `meta_info.weight_versions` (None: absent, or one version throughout);
    a WireError naming the spans unless they are `{version, start, end}` runs covering [0, n) in order."""
    if spans is None:
        return None
    ok = isinstance(spans, list) and all(
        isinstance(s, dict) and isinstance(s.get("version"), str) and _is_int(s.get("start"))
        and _is_int(s.get("end")) for s in spans
    )  # fmt: skip
    if ok:
        edge = 0
        for span in spans:
            ok = ok and span["start"] == edge and span["end"] >= span["start"]
            edge = span["end"]
        ok = ok and edge == n
    if not ok:
        raise WireError(
            f"meta_info.weight_versions must be [{{version, start, end}}, ...] spans covering output tokens "
            f"[0, {n}) in order, got {str(spans)[:200]}",
            "weight_versions",
        )
    versions = tuple(span["version"] for span in spans for _ in range(span["end"] - span["start"]))
    return versions if len(set(versions)) > 1 else None


def _top_logprobs(meta: dict, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(float32[N, k], int32[N, k]) from `meta_info.output_top_logprobs` ([[[lp, id, text], ...], ...])."""
    entries = _field(meta, "output_top_logprobs", list, "meta_info.")
    if len(entries) != n:
        raise WireError(
            f"meta_info.output_top_logprobs has {len(entries)} positions, output_ids {n}",
            "output_top_logprobs",
        )
    lps, ids = np.zeros((n, k), np.float32), np.zeros((n, k), np.int32)
    for i, position in enumerate(entries):
        if (
            not isinstance(position, list)
            or len(position) != k
            or not all(
                isinstance(e, list) and len(e) >= 2 and isinstance(e[0], (int, float)) for e in position
            )
        ):
            raise WireError(
                f"meta_info.output_top_logprobs[{i}] must hold {k} [logprob, token_id, text] entries, got "
                f"{str(position)[:120]}",
                "output_top_logprobs",
            )
        lps[i] = [e[0] for e in position]
        ids[i] = [e[1] for e in position]
    return lps, ids


def error_json(message: str, field: str | None = None, kind: str = "bad_request") -> dict[str, Any]:
    return {"error": {"message": message, "field": field, "type": kind}}
