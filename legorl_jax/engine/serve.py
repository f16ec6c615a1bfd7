"""The embedded engine behind SGLang's native HTTP API (aiohttp), so one client speaks to both.

    python -m legorl_jax.engine.serve --model DIR --host 127.0.0.1 --port P [--max-running N --max-len L]

SGLang's own flags are accepted too (`--model-path`, `--tp 1`, `--enable-return-routed-experts`, which is
always on here), so `sglang_launcher.ServerProcess` starts this server exactly as it starts SGLang.

`--return-routed-experts always` (default `request`: only when a request asks, as SGLang) makes every
/generate of a MoE model carry routed experts even when the request did not ask: sglang-router 0.3.2 drops
the request's `return_routed_experts`, so behind it (engine/fleet.py) this is the only way routing comes
back. Unasked, the rows start where the request's `tracestate: legorl=routed_experts_start:S` member says
(our client sends it; the router forwards that header; wire.py), else at 0: the whole sequence
(`routed_experts_start_len` in the response says which). A request that asks still gets what it asked
for. `/get_server_info` says which mode (`"return_routed_experts": "request" | "always"`).
The KV cache is sized to a budget (`--mem-fraction`, default 0.5 of the memory free after loading, or
`--kv-gib`; engine/kv_budget.py): a model whose config names more positions than fit gets a shorter
`max_len` and fewer prefix-cache slots, never the out-of-memory killer; the sizing is printed at start and
`/get_model_info` reports `max_total_num_tokens` and `kv_cache_gib`. A cache that cannot hold one slot of an
asked `--max-len` exits 2 with the numbers.
The port opens only once the model is loaded and the smallest prefill bucket and the decode program are
compiled (a warm-up request), so `/health` answering means ready. SIGTERM or SIGINT closes the port,
aborts what is in flight and exits 0.

Routes (field names and formats: wire.py):
- `POST /generate`: token in (`input_ids`) or `text` (tokenized with the model's tokenizer); response
  `text`, `output_ids`, `meta_info` (id, finish_reason, prompt_tokens, completion_tokens, cached_tokens
  (prompt tokens served from the prefix cache; `session_id` asks it to keep a conversation), weight_version,
  output/input_token_logprobs with `return_logprob`, routed_experts and routed_experts_start_len with
  `return_routed_experts` or `--return-routed-experts always`).
  `logprob_start_len >= 0` also scores the prompt from that position on (its first entry is null, as
  SGLang's is: SGLang computes no logits before it), with the request's temperature (1 when greedy).
- `GET /health` (200 ready, 503 not), `GET /get_model_info`, `GET /get_server_info` (load figures).
- `POST /update_weights_from_disk {model_path, weight_version, abort_all_requests}`: in place, requests in
  flight continue on the new weights (jax_engine.py); a null weight_version keeps the current one.
- `POST|GET /flush_cache` empties the prefix cache (400 while requests run, as SGLang),
  `POST /abort_request {rid | abort_all}`,
  `POST /pause_generation {mode: abort (default, as SGLang) | in_place | drain}`, `POST /continue_generation`.
  `drain` is our extension (SGLang has no such mode): admission stops, the running requests decode to
  their end, and the call answers once none runs (`engine/weight_update.py`'s `drain` policy).

Every error is JSON: 400 `{"error": {"message", "field", "type"}}` for bad input (the message names the
field and the received value; a prompt longer than the context says the limit, type
"context_overflow"), 404/405 for unknown routes, 500 with a one-line message for an engine failure.
The client never sees a stack trace (it is logged here).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import signal
import sys
import time
import uuid
from typing import Any

from aiohttp import web

from legorl_jax.engine.base import (
    PAUSE_MODES,
    BadRequestError,
    ContextOverflowError,
    EngineError,
    SamplingParams,
)
from legorl_jax.engine.jax_engine import JaxEngine
from legorl_jax.engine.kv_budget import KVBudgetError
from legorl_jax.engine.wire import (
    CONTEXT_OVERFLOW,
    ROUTING_KEY_HEADER,
    TRACESTATE_HEADER,
    GenerateRequest,
    WireError,
    check_prompt_fields,
    error_json,
    generation_json,
    logprob_entries,
    parse_generate,
    routed_start_from_tracestate,
)

log = logging.getLogger(__name__)

ENGINE_KEY = web.AppKey("engine", JaxEngine)
ROUTED_EXPERTS_KEY = web.AppKey("return_routed_experts", str)
ROUTED_EXPERTS_MODES = ("request", "always")
MAX_BODY_BYTES = 256 * 2**20


def _bad_request(message: str, field: str | None = None, kind: str = "bad_request") -> web.Response:
    return web.json_response(error_json(message, field, kind), status=400)


async def _json_body(request: web.Request, *, optional: bool = False) -> dict[str, Any]:
    raw = await request.read()
    if not raw.strip() and optional:
        return {}
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise WireError(f"the request body is not valid JSON: {exc}", "body") from None
    if not isinstance(body, dict):
        raise WireError(f"the request body must be a JSON object, got {type(body).__name__}", "body")
    return body


@web.middleware
async def _errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """Maps every failure to a JSON error (module docstring); nothing else reaches the client."""
    try:
        return await handler(request)
    except ContextOverflowError as exc:
        return _bad_request(str(exc), "input_ids", CONTEXT_OVERFLOW)
    except (WireError, BadRequestError) as exc:  # before EngineError: a BadRequestError is one too
        return _bad_request(str(exc), exc.field)
    except EngineError as exc:
        log.error("engine failure on %s: %s", request.path, exc)
        return web.json_response(error_json(str(exc), None, "engine_error"), status=500)
    except (ValueError, TypeError) as exc:
        return _bad_request(str(exc), getattr(exc, "field", None))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return web.json_response(
            error_json(f"{exc.reason}: {request.method} {request.path}", None, "http"), status=exc.status
        )
    except Exception as exc:  # noqa: BLE001 - log the trace, answer one line
        log.exception("unexpected failure on %s", request.path)
        return web.json_response(
            error_json(f"internal error: {type(exc).__name__}", None, "internal"), status=500
        )


# ----------------------------------------------------------------------------------------------------
# /generate


def _prompt_ids(engine: JaxEngine, req: GenerateRequest) -> list[int] | Any:
    if req.input_ids is not None:
        return req.input_ids
    if engine.tokenizer is None:
        raise WireError("text needs the model's tokenizer, and this server has none: send input_ids", "text")
    if req.text is None:
        raise WireError("send input_ids or text, got neither", "input_ids")
    return engine.tokenizer.encode(req.text)


def _output_text(engine: JaxEngine, ids: Any, sampling: SamplingParams, matched: Any) -> str:
    if engine.tokenizer is None:
        return ""
    text = engine.tokenizer.decode(ids, skip_special_tokens=sampling.skip_special_tokens)
    if isinstance(matched, str) and not sampling.no_stop_trim:
        at = text.find(matched)
        text = text[:at] if at >= 0 else text
    return text


async def _input_logprobs(
    engine: JaxEngine, ids: Any, start: int, sampling: SamplingParams
) -> list[list[Any]]:
    temperature = sampling.temperature if sampling.temperature > 0 else 1.0
    # As SGLang (0.5.23): the first scored position's value is null whatever `start` is.
    scored: Any = (
        await engine.prompt_logprobs(ids, start + 1, temperature=temperature) if len(ids) > start + 1 else []
    )
    values = [math.nan] + [float(v) for v in scored]
    return logprob_entries(values, ids[start:])


async def generate(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    began = time.monotonic()
    req = parse_generate(await _json_body(request), engine.config.vocab_size)
    ids = _prompt_ids(engine, req)
    check_prompt_fields(req, len(ids))
    rid = req.rid or uuid.uuid4().hex
    # Unasked (the router dropped the fields) under `always`: the routing from the start our client's
    # tracestate member names, else the whole sequence's (docstring).
    routed = req.return_routed_experts or request.app[ROUTED_EXPERTS_KEY] == "always"
    if req.return_routed_experts or not routed:
        routed_start = req.routed_experts_start_len
    else:
        routed_start = routed_start_from_tracestate(request.headers.get(TRACESTATE_HEADER), len(ids))
    input_logprobs = None
    if req.return_logprob and req.logprob_start_len >= 0:
        input_logprobs = await _input_logprobs(engine, ids, req.logprob_start_len, req.sampling)
    gen = await engine.generate(
        ids,
        req.sampling,
        return_routed_experts=routed,
        routed_experts_start_len=routed_start,
        rid=rid,
        # Behind sglang-router the body's session_id is dropped; its routing key header is our session id.
        session_id=req.session_id or request.headers.get(ROUTING_KEY_HEADER) or None,
        top_logprobs=req.top_logprobs_num if req.return_logprob else 0,
    )
    body = generation_json(
        gen,
        rid=rid,
        text=_output_text(engine, gen.output_ids, req.sampling, gen.matched_stop),
        return_logprob=req.return_logprob,
        input_logprobs=input_logprobs,
        return_routed_experts=routed,
        e2e_latency=time.monotonic() - began,
    )
    return web.json_response(body)


# ----------------------------------------------------------------------------------------------------
# status and control


async def health(request: web.Request) -> web.Response:
    ok = await request.app[ENGINE_KEY].health()
    return web.Response(status=200 if ok else 503, text="" if ok else "engine is not healthy")


async def model_info(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    c = engine.config
    routing = None
    if c.is_moe:
        routing = {
            "num_layers": c.num_moe_layers,
            "top_k": c.num_experts_per_tok,
            "num_experts": c.num_experts,
        }
    return web.json_response(
        {
            "model_path": engine.model_path,
            "tokenizer_path": engine.model_path if engine.tokenizer is not None else None,
            "is_generation": True,
            "architectures": list(c.architectures),
            "weight_version": engine.weight_version,
            "context_length": engine.max_len,
            # The KV cache as sized at start (kv_budget.py): SGLang reports max_total_num_tokens likewise.
            "max_total_num_tokens": engine.kv_sizing.slots * engine.max_len,
            "kv_cache_gib": round(engine.kv_sizing.total_bytes / (1 << 30), 4),
            "vocab_size": c.vocab_size,
            "routing": routing,
            # `/generate` takes `session_id` (the prefix cache hint); clients send it only when this is true.
            "session_hint": True,
        }
    )


async def server_info(request: web.Request) -> web.Response:
    return web.json_response(
        {**request.app[ENGINE_KEY].stats(), "return_routed_experts": request.app[ROUTED_EXPERTS_KEY]}
    )


def _bool_field(body: dict[str, Any], key: str, default: bool) -> bool:
    value = body.get(key, default)
    if not isinstance(value, bool):
        raise WireError(f"{key} must be a bool, got {value!r}", key)
    return value


async def update_weights_from_disk(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    body = await _json_body(request)
    path = body.get("model_path")
    if not isinstance(path, str) or not path:
        raise WireError(f"model_path must be a directory path, got {path!r}", "model_path")
    version = body.get("weight_version")
    if version is not None and (not isinstance(version, str) or not version):
        raise WireError(
            f"weight_version must be a non-empty string or null, got {version!r}", "weight_version"
        )
    aborted = await engine.abort_all() if _bool_field(body, "abort_all_requests", False) else 0
    try:
        await engine.update_weights(path, version or engine.weight_version)
    except (ValueError, TypeError, OSError) as exc:
        return web.json_response(
            {"success": False, "message": str(exc), "num_paused_requests": 0}, status=400
        )
    return web.json_response(
        {
            "success": True,
            "message": (
                f"Succeeded to update model weights (weight_version={engine.weight_version}, "
                f"aborted={aborted})."
            ),
            "num_paused_requests": 0,
        }
    )


async def flush_cache(request: web.Request) -> web.Response:
    if await request.app[ENGINE_KEY].flush_cache():
        return web.Response(text="Cache flushed.\n")
    return _bad_request("Cache not flushed because there are pending requests.", None, "busy")


async def abort_request(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    body = await _json_body(request)
    if _bool_field(body, "abort_all", False):
        await engine.abort_all()
        return web.Response()
    rid = body.get("rid")
    if not isinstance(rid, str) or not rid:
        raise WireError(f"rid must be a non-empty string (or abort_all: true), got {rid!r}", "rid")
    await engine.abort(rid)
    return web.Response()


async def pause_generation(request: web.Request) -> web.Response:
    body = await _json_body(request, optional=True)
    mode = body.get("mode", "abort")
    if mode not in PAUSE_MODES:
        raise WireError(f"mode must be one of {PAUSE_MODES} (retract is not supported), got {mode!r}", "mode")
    affected = await request.app[ENGINE_KEY].pause(mode)
    return web.json_response({"message": f"Generation paused ({mode}, {affected} requests).", "status": "ok"})


async def continue_generation(request: web.Request) -> web.Response:
    await request.app[ENGINE_KEY].resume()
    return web.json_response({"message": "Generation continued.", "status": "ok"})


def make_app(engine: JaxEngine, *, return_routed_experts: str = "request") -> web.Application:
    """The aiohttp application serving `engine` (module docstring). The caller owns the engine."""
    if return_routed_experts not in ROUTED_EXPERTS_MODES:
        raise ValueError(
            f"return_routed_experts must be one of {ROUTED_EXPERTS_MODES}, got {return_routed_experts!r}"
        )
    app = web.Application(middlewares=[_errors], client_max_size=MAX_BODY_BYTES)
    app[ENGINE_KEY] = engine
    app[ROUTED_EXPERTS_KEY] = return_routed_experts
    app.router.add_post("/generate", generate)
    app.router.add_get("/health", health)
    app.router.add_get("/get_model_info", model_info)
    app.router.add_get("/get_server_info", server_info)
    app.router.add_post("/update_weights_from_disk", update_weights_from_disk)
    app.router.add_route("*", "/flush_cache", flush_cache)
    app.router.add_post("/abort_request", abort_request)
    app.router.add_post("/pause_generation", pause_generation)
    app.router.add_post("/continue_generation", continue_generation)
    return app


async def start_site(
    engine: JaxEngine, host: str, port: int, *, return_routed_experts: str = "request"
) -> web.AppRunner:
    """Serves `engine` on host:port until the returned runner is cleaned up."""
    app = make_app(engine, return_routed_experts=return_routed_experts)
    # A client that hangs up cancels its handler, and so aborts its request (SGLang does the same).
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


# ----------------------------------------------------------------------------------------------------
# command line


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m legorl_jax.engine.serve", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--model", "--model-path", dest="model", required=True, help="HF model directory")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--max-running", type=int, default=32, help="decode slots (concurrent requests)")
    p.add_argument(
        "--max-len",
        type=int,
        default=None,
        help="context length (default: the model's, capped to what the KV budget gives every slot)",
    )
    p.add_argument(
        "--mem-fraction",
        type=float,
        default=DEFAULT_MEM_FRACTION,
        help=(
            "KV cache budget: this fraction of the memory free at start, after the weights "
            f"(default {DEFAULT_MEM_FRACTION}; SGLang's --mem-fraction-static)"
        ),
    )
    p.add_argument(
        "--kv-gib", type=float, default=None, help="KV cache budget in GiB (wins over --mem-fraction)"
    )
    p.add_argument("--min-bucket", type=int, default=16, help="smallest prefill length bucket")
    p.add_argument(
        "--chunked-prefill-size",
        type=int,
        default=4096,
        help="longest prompt chunk prefilled at once, bounding prefill memory (default 4096, as engine.yaml)",
    )
    p.add_argument(
        "--prefix-cache-slots",
        type=int,
        default=None,
        help=(
            "spare KV slots keeping finished requests' prefixes resident (default: max-running; 0: no cache)"
        ),
    )
    p.add_argument(
        "--prefix-cache-tokens",
        type=int,
        default=None,
        help="most tokens the prefix cache keeps (default: no limit)",
    )
    p.add_argument(
        "--return-routed-experts",
        default="request",
        choices=ROUTED_EXPERTS_MODES,
        help=(
            "request: routed experts only when a request asks (SGLang's behaviour); always: every response "
            "carries them (from the start our client's tracestate member names, else the whole sequence's), "
            "so they pass through sglang-router, which drops the request field"
        ),
    )
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--weight-version", default="default")
    p.add_argument("--no-warmup", action="store_true", help="open the port before compiling anything")
    p.add_argument(
        "--no-background-compile",
        action="store_true",
        help="compile every new bucket in the engine thread (no larger bucket covers a call meanwhile)",
    )
    # SGLang's flags, so the launcher can start this server like SGLang.
    p.add_argument(
        "--tp", "--tp-size", dest="tp", type=int, default=1, help="must be 1 (the engine runs on one device)"
    )
    p.add_argument(
        "--enable-return-routed-experts", action="store_true", help="accepted; routing is always available"
    )
    return p


DEFAULT_MEM_FRACTION = 0.5
"""Half of what is free: the server's KV cache never takes the memory its own prefill and the host need."""


async def _serve(args: argparse.Namespace) -> None:
    engine = JaxEngine.from_dir(
        args.model,
        dtype=args.dtype,
        max_running=args.max_running,
        max_len=args.max_len,
        min_bucket=args.min_bucket,
        prefill_chunk=args.chunked_prefill_size,
        weight_version=args.weight_version,
        cache_slots=args.max_running if args.prefix_cache_slots is None else args.prefix_cache_slots,
        cache_tokens=args.prefix_cache_tokens,
        compile_in_background=not args.no_background_compile,
        kv_gib=args.kv_gib,
        mem_fraction=args.mem_fraction,
    )
    print(f"legorl_jax.engine.serve: {engine.kv_sizing.describe()}", file=sys.stderr, flush=True)
    try:
        if not args.no_warmup:
            await engine.generate([0], SamplingParams(max_new_tokens=2, temperature=0.0), rid="warmup")
        runner = await start_site(
            engine, args.host, args.port, return_routed_experts=args.return_routed_experts
        )
        print(
            f"legorl_jax.engine.serve: ready on http://{args.host}:{args.port} ({engine.max_running} slots, "
            f"max_len {engine.max_len})",
            file=sys.stderr,
            flush=True,
        )
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()
    finally:
        engine.close()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.tp != 1:
        print(
            "legorl_jax.engine.serve: --tp must be 1 (the embedded engine runs on one device), "
            f"got {args.tp}",
            file=sys.stderr,
        )
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        asyncio.run(_serve(args))
    except KVBudgetError as exc:
        print(f"legorl_jax.engine.serve: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
