"""Latency the capture proxy adds over calling the engine directly, on its chat-completions and its Responses
surface, beside the LiteLLM proxy, at 1/16/64 sessions.

    python tools/bench_proxy.py [--sessions 1,16,64] [--turns 10] [--rounds 3] [--engine-ms 500] \
        [--tool-ms 1000] [--start-ms 1000]

Needs the bench extra (`pip install -e '.[bench]'`: LiteLLM's proxy server), unless `--without-litellm`
leaves that peer out. Five processes on this machine:
- a backend standing in for the model: it answers SGLang's `/generate` (token ids in and out, log-probs and
  routing rows, through our wire format) and OpenAI's `/v1/chat/completions` (the same reply as text) after
  the same fixed `--engine-ms`, so every path pays the same "model" time and the difference is the proxy's;
- ours: `python -m legorl_jax.proxy` (train mode: chat template render, incremental prompt, parse, record);
- a relay: a bare aiohttp server forwarding `/generate` bodies through an aiohttp client on the same event
  loop as ours, doing nothing else: what one more HTTP hop costs here, the floor under a proxy on this stack;
- LiteLLM: `litellm --model openai/bench --api_base BACKEND/v1` (its OpenAI-compatible route, no recording);
- this process, the load: S concurrent sessions, each `--turns` calls with a growing history (each turn adds
  the reply and a ~200-token tool result), a start-up before the first call (uniform in [0, `--start-ms`]:
  harnesses take 0.4-15 s to start, tools/bench_rollout.py) and a tool time between calls (uniform in
  [0, `--tool-ms`]), the same seeded draws on every path: the agentic shape, sessions do not all call at the
  same instant.
Per configuration the same conversations go six ways: backend `/generate` directly (the baseline of ours and
the relay), ours on chat completions, ours on the Responses API (`/v1/responses`, the whole history resent
as items each turn, as Codex sends it), the relay, backend `/v1/chat/completions` directly (LiteLLM's
baseline), LiteLLM. Added latency = the path's p50 (p99) minus its baseline's p50 (p99). The six are
measured in rotating order for
`--rounds` rounds, so drift in the host's load hits them alike. Quiet host (tools/hostload.py): publishable
only if the load average was below 1 when the run began and other processes took under 0.15 of a core during
every path's run.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

BENCH_EXTRA_INSTALL = "pip install -e '.[bench]'"


def missing_from_bench_extra() -> list[str]:
    """The packages of the bench extra (LiteLLM with its `proxy` extra) that are not installed.

    Read from LiteLLM's own metadata, not imported: without them the LiteLLM proxy dies at start-up
    (`ImportError: backoff is not installed`) after ours and the backend were already started.
    """
    from packaging.requirements import Requirement

    try:
        requires = importlib.metadata.requires("litellm") or []
    except importlib.metadata.PackageNotFoundError:
        return ["litellm"]
    missing = []
    for line in requires:
        req = Requirement(line)
        # Only the proxy extra's requirements: true with extra "proxy", false with none.
        if req.marker is None or not req.marker.evaluate({"extra": "proxy"}):
            continue
        if req.marker.evaluate({"extra": ""}):
            continue
        try:
            importlib.metadata.distribution(req.name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(req.name)
    return missing


REPLY = (
    'Looking at the file.\n<tool_call>\n{"name": "bash", "arguments": {"command": "cat calc.py"}}\n'
    "</tool_call>"
)
TOOL_RESULT = "def add(a, b):\n    return a - b\n" * 12
BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}
BASH_RESPONSES = {"type": "function", **BASH["function"]}  # the same tool in the Responses API's shape
ENV = {**os.environ, "JAX_PLATFORMS": "cpu", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "XLA_FLAGS": ""}
LITELLM_KEY = "sk-bench-" + os.urandom(16).hex()  # LiteLLM's proxy refuses to start without a master key


# ----------------------------------------------------------------------------------------------------
# the backend process


def serve_backend(model_dir: str, port: int, engine_ms: float) -> None:
    from aiohttp import web

    from legorl_jax.engine.wire import generation_json
    from legorl_jax.model.tokenizer import load_tokenizer
    from legorl_jax.types import Generation

    tok = load_tokenizer(model_dir)
    eos = tok.eos_token_ids[0]
    out = np.asarray([*tok.encode(REPLY), eos], np.int32)
    lps = np.full(len(out), -0.5, np.float32)

    async def generate(request: web.Request) -> web.Response:
        body = await request.json()
        ids = body["input_ids"]
        start = body.get("routed_experts_start_len", 0)
        await asyncio.sleep(engine_ms / 1000)
        rows = np.zeros((len(ids) + len(out) - 1 - start, 2, 2), np.int32)
        gen = Generation(
            out, lps, rows, "stop", "bench", len(ids), routed_experts_start=start, matched_stop=int(eos)
        )
        return web.json_response(
            generation_json(
                gen,
                rid=body.get("rid") or "r",
                text=REPLY,
                return_logprob=True,
                input_logprobs=None,
                return_routed_experts=True,
                e2e_latency=0.0,
            )
        )

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        prompt = sum(len(str(m.get("content", ""))) for m in body["messages"]) // 4
        await asyncio.sleep(engine_ms / 1000)
        call = {"id": "call_" + os.urandom(6).hex(), "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "cat calc.py"}'}}  # fmt: skip
        return web.json_response(
            {
                "id": "chatcmpl-bench",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "bench"),
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "tool_calls",
                        "message": {
                            "role": "assistant",
                            "content": "Looking at the file.",
                            "tool_calls": [call],
                        },
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": len(out),
                    "total_tokens": prompt + len(out),
                },
            }
        )

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def info(request: web.Request) -> web.Response:
        return web.json_response({"model_path": model_dir, "weight_version": "bench"})

    app = web.Application()
    app.router.add_post("/generate", generate)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/health", health)
    app.router.add_get("/get_model_info", info)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def serve_relay(port: int, upstream: str) -> None:
    """The floor of any proxy built on this stack: an aiohttp server that forwards each `/generate` body to
    the backend through an aiohttp client (the capture proxy's own client settings) and returns the reply's
    bytes, doing nothing else. Its added latency is what one more HTTP hop costs on this machine."""
    import aiohttp
    from aiohttp import web

    async def start(app: web.Application) -> None:
        app["http"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256))

    async def stop(app: web.Application) -> None:
        await app["http"].close()

    async def generate(request: web.Request) -> web.Response:
        body = await request.read()
        headers = {"Content-Type": "application/json"}
        async with request.app["http"].post(upstream + "/generate", data=body, headers=headers) as resp:
            return web.Response(body=await resp.read(), status=resp.status, content_type="application/json")

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_post("/generate", generate)
    app.router.add_get("/health", health)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None, loop=_event_loop())


def _event_loop():
    """The loop `python -m legorl_jax.proxy` runs on (uvloop where installed), so the relay is its floor."""
    from legorl_jax.proxy.__main__ import _loop_factory

    factory = _loop_factory()
    return factory() if factory is not None else asyncio.new_event_loop()


# ----------------------------------------------------------------------------------------------------
# the load


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_up(
    url: str, process: subprocess.Popen, log: pathlib.Path | None = None, timeout_s: float = 180
) -> None:
    import aiohttp

    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                tail = log.read_text()[-2000:] if log is not None and log.exists() else ""
                raise RuntimeError(f"the server for {url} exited with {process.returncode}:\n{tail}")
            try:
                async with http.get(url, timeout=aiohttp.ClientTimeout(total=2)) as resp:
                    if resp.status < 500:
                        return
            except (TimeoutError, aiohttp.ClientError):
                pass
            await asyncio.sleep(0.3)
    raise RuntimeError(f"{url} did not come up within {timeout_s:.0f} s")


FIRST = (
    {"role": "system", "content": "You fix bugs."},
    {"role": "user", "content": "Fix add() in calc.py."},
)


def after_turn(messages: list[dict], call_id: str) -> list[dict]:
    """The history after one turn: the reply (one tool call) and its ~200-token tool result."""
    call = {"id": call_id, "type": "function",
            "function": {"name": "bash", "arguments": '{"command": "cat calc.py"}'}}  # fmt: skip
    return [
        *messages,
        {"role": "assistant", "content": "Looking at the file.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": TOOL_RESULT},
    ]


def generate_prompts(tok, turns: int) -> list[list[int]]:
    """The token ids of each turn's prompt on the `/generate` paths (their conversations are all alike: the
    tool call ids are call_0, call_1, ...), rendered before the clock starts: a client that renders while it
    is timed loads the machine the direct path is measured on, which flatters every proxy."""
    messages, prompts = list(FIRST), []
    for turn in range(turns):
        prompts.append(tok.apply_chat_template(messages, tools=[BASH], add_generation_prompt=True))
        messages = after_turn(messages, f"call_{turn}")
    return prompts


async def conversation(
    http,
    path: str,
    url: str,
    turns: int,
    latencies: list[float],
    *,
    prompts: list[list[int]] | None = None,
    session_url=None,
    tool_s: list[float],
    start_s: float = 0.0,
) -> None:
    """One session's calls; `path` picks the wire: generate (the `prompts` as token ids), chat (OpenAI body),
    responses (the Responses API: instructions, the history as items, the reply's items appended each turn).
    Before its first call the session waits its start-up time, as a harness starts, and between calls its tool
    time, as an agent runs its tool (the same seeded draws on every path)."""
    await asyncio.sleep(start_s)
    messages = list(FIRST)
    items: list[dict] = [FIRST[1]]
    for turn in range(turns):
        if path == "responses":
            body = {"model": "bench", "instructions": FIRST[0]["content"], "input": items,
                    "tools": [BASH_RESPONSES]}  # fmt: skip
            target = session_url + "/responses"
        elif path == "generate":
            body = {"input_ids": prompts[turn], "return_logprob": True, "return_routed_experts": True,
                    "sampling_params": {"max_new_tokens": 256, "temperature": 1.0}}  # fmt: skip
            target = url + "/generate"
        else:
            body = {"model": "bench", "messages": messages, "tools": [BASH]}
            target = (session_url or url) + "/chat/completions"
        began = time.perf_counter()
        async with http.post(target, json=body) as resp:
            reply = await resp.json()
            if resp.status != 200:
                raise RuntimeError(f"{path} {target}: {resp.status} {json.dumps(reply)[:300]}")
        latencies.append(time.perf_counter() - began)
        await asyncio.sleep(tool_s[turn])
        call_id = f"call_{turn}"
        if path == "chat":
            call_id = reply["choices"][0]["message"]["tool_calls"][0]["id"]
        if path == "responses":
            call_id = reply["output"][-1]["call_id"]
            items += [
                *reply["output"],
                {"type": "function_call_output", "call_id": call_id, "output": TOOL_RESULT},
            ]
        messages = after_turn(messages, call_id)


async def run_path(
    name: str,
    urls: dict[str, str],
    tok,
    sessions: int,
    turns: int,
    tool_ms: float = 0.0,
    start_ms: float = 0.0,
) -> list[float]:
    import aiohttp

    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=0)
    headers = {"Authorization": f"Bearer {LITELLM_KEY}"} if name == "litellm" else {}
    async with aiohttp.ClientSession(connector=connector, headers=headers) as http:
        session_urls = [None] * sessions
        if name in OURS:
            admin = {"Authorization": "Bearer bench-admin-token"}
            for i in range(sessions):
                async with http.post(
                    urls["ours"] + "/admin/sessions", json={"task_id": "bench"}, headers=admin
                ) as r:
                    session_urls[i] = (await r.json())["openai_base_url"]
        path = {"direct-generate": "generate", "relay": "generate", "ours-responses": "responses"}.get(
            name, "chat"
        )
        base = {
            "direct-generate": urls["backend"],
            "relay": urls["relay"],
            "direct-chat": urls["backend"] + "/v1",
            "litellm": urls["litellm"] + "/v1",
            "ours": None,
            "ours-responses": None,
        }[name]
        prompts = generate_prompts(tok, turns) if path == "generate" else None
        rng = np.random.default_rng(0)
        tool_s = rng.uniform(0, tool_ms / 1000, size=(sessions, turns))
        start_s = rng.uniform(0, start_ms / 1000, size=sessions)
        await asyncio.gather(
            *(
                conversation(
                    http,
                    path,
                    base,
                    turns,
                    latencies,
                    prompts=prompts,
                    session_url=session_urls[i],
                    tool_s=list(tool_s[i]),
                    start_s=float(start_s[i]),
                )
                for i in range(sessions)
            )
        )
        if name in OURS:
            admin = {"Authorization": "Bearer bench-admin-token"}
            for u in session_urls:
                sid = u.rsplit("/s/", 1)[1].split("/")[0]
                async with http.delete(f"{urls['ours']}/admin/sessions/{sid}", headers=admin) as r:
                    await r.read()
    return latencies


OURS = ("ours", "ours-responses")


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000, q))


async def bench(args: argparse.Namespace) -> None:
    import hostload

    from legorl_jax.model.tokenizer import load_tokenizer

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    model_dir = args.model
    if model_dir is None:
        import make_tiny_model

        model_dir = str(
            make_tiny_model.make_tiny_model(tmp / "model", make_tiny_model.TinyModelSpec(max_positions=65536))
        )
    tok = load_tokenizer(model_dir)
    ports = {k: free_port() for k in ("backend", "ours", "litellm", "relay")}
    urls = {k: f"http://127.0.0.1:{p}" for k, p in ports.items()}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--serve-backend",
                str(ports["backend"]),
                "--model",
                model_dir,
                "--engine-ms",
                str(args.engine_ms),
            ],
            env=ENV,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "legorl_jax.proxy",
                "--engine-url",
                urls["backend"],
                "--model",
                model_dir,
                "--port",
                str(ports["ours"]),
                "--admin-token",
                "bench-admin-token",
                "--archive-dir",
                str(tmp / "archive"),
                "--context-length",
                "65536",
            ],
            env=ENV,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=open(tmp / "ours.log", "w"),
        ),  # fmt: skip
        subprocess.Popen(
            [sys.executable, __file__, "--serve-relay", str(ports["relay"]), "--upstream", urls["backend"]],
            env=ENV,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=open(tmp / "relay.log", "w"),
        ),
    ]
    if not args.without_litellm:
        procs.append(subprocess.Popen(
            [
                str(pathlib.Path(sys.executable).parent / "litellm"),
                "--model",
                "openai/bench",
                "--api_base",
                urls["backend"] + "/v1",
                "--port",
                str(ports["litellm"]),
                "--num_workers",
                "1",
            ],
            env={**ENV, "OPENAI_API_KEY": "x", "LITELLM_MASTER_KEY": LITELLM_KEY},
            stdout=subprocess.DEVNULL,
            stderr=open(tmp / "litellm.log", "w"),
        ))  # fmt: skip
    try:
        await wait_up(urls["backend"] + "/health", procs[0])
        await wait_up(urls["ours"] + "/health", procs[1], tmp / "ours.log")
        await wait_up(urls["relay"] + "/health", procs[2], tmp / "relay.log")
        names = ["direct-generate", "ours", "ours-responses", "relay"]
        if not args.without_litellm:
            await wait_up(urls["litellm"] + "/health/liveliness", procs[3], tmp / "litellm.log")
            names += ["direct-chat", "litellm"]
        for name in names:  # warm-up: imports, first renders, connection pools
            await run_path(name, urls, tok, 2, 2)
        meter = hostload.ForeignCPU()
        foreign: list[float] = []
        print(
            f"load average before: {meter.load_at_start:.2f}; rounds {args.rounds}; turns {args.turns}; "
            f"engine {args.engine_ms} ms; start-up uniform in [0, {args.start_ms:.0f}] ms; tool time "
            f"uniform in [0, {args.tool_ms:.0f}] ms"
        )
        rows = []
        for sessions in args.sessions:
            lat: dict[str, list[float]] = {n: [] for n in names}
            for r in range(args.rounds):
                order = names[r % len(names) :] + names[: r % len(names)]
                for name in order:
                    meter.lap()
                    lat[name] += await run_path(
                        name, urls, tok, sessions, args.turns, args.tool_ms, args.start_ms
                    )
                    foreign.append(meter.lap())
            rows.append((sessions, {n: (pct(v, 50), pct(v, 99), len(v)) for n, v in lat.items()}))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
    quiet, why = hostload.verdict(meter.load_at_start, foreign)
    print(f"load average after: {os.getloadavg()[0]:.2f} (this benchmark's own processes included)")
    print()
    print(
        "| sessions | calls/path | direct /generate p50 / p99 ms | ours p50 / p99 ms | **ours added** p50 / "
        "p99 ms | **ours Responses added** p50 / p99 ms | relay added p50 / p99 ms | direct chat p50 / p99 "
        "ms | LiteLLM p50 / p99 ms | LiteLLM added p50 / p99 ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for sessions, f in rows:
        dg, ours, resp, relay = (f[n] for n in ("direct-generate", "ours", "ours-responses", "relay"))
        peer = "n/a | n/a | n/a"
        if "litellm" in f:
            dc, lite = f["direct-chat"], f["litellm"]
            peer = (f"{dc[0]:.1f} / {dc[1]:.1f} | {lite[0]:.1f} / {lite[1]:.1f} | "
                    f"{lite[0] - dc[0]:.2f} / {lite[1] - dc[1]:.2f}")  # fmt: skip
        print(f"| {sessions} | {ours[2]} | {dg[0]:.1f} / {dg[1]:.1f} | {ours[0]:.1f} / {ours[1]:.1f} | "
              f"**{ours[0] - dg[0]:.2f} / {ours[1] - dg[1]:.2f}** | "
              f"**{resp[0] - dg[0]:.2f} / {resp[1] - dg[1]:.2f}** | "
              f"{relay[0] - dg[0]:.2f} / {relay[1] - dg[1]:.2f} | {peer} |")  # fmt: skip
    print()
    for sessions, f in rows:
        dg, ours, resp = (f[n] for n in ("direct-generate", "ours", "ours-responses"))
        p50, p99 = (resp[0] - dg[0]) / (ours[0] - dg[0]), (resp[1] - dg[1]) / (ours[1] - dg[1])
        print(f"{sessions} sessions: Responses added / chat added: p50 {p50:.2f}, p99 {p99:.2f}")
    print(
        "peer: LiteLLM proxy (litellm[proxy]) on its OpenAI-compatible route to the same backend, measured "
        "in the same run; relay: a bare aiohttp hop to the same backend (the floor of this stack)"
    )
    print(f"host: {why}")
    print("publishable:", "yes" if quiet else "NO: the host was busy; rerun on a quiet machine")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=lambda s: [int(x) for x in s.split(",")], default=[1, 16, 64])
    p.add_argument("--turns", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--engine-ms", type=float, default=500.0, help="the stand-in model's time per call")
    p.add_argument(
        "--tool-ms",
        type=float,
        default=1000.0,
        help="each session's tool time between calls: uniform in [0, this]",
    )
    p.add_argument(
        "--start-ms",
        type=float,
        default=1000.0,
        help="each session's start-up before its first call: uniform in [0, this]",
    )
    p.add_argument(
        "--model",
        default=None,
        help="HF directory for the tokenizer/template (default: a tiny model made here)",
    )
    p.add_argument(
        "--without-litellm",
        action="store_true",
        help="leave the LiteLLM peer out (no bench extra needed): ours on both surfaces and the relay only",
    )
    p.add_argument("--serve-backend", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--serve-relay", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--upstream", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve_relay is not None:
        serve_relay(args.serve_relay, args.upstream)
        return 0
    if args.serve_backend is not None:
        serve_backend(args.model, args.serve_backend, args.engine_ms)
        return 0
    missing = [] if args.without_litellm else missing_from_bench_extra()
    if missing:
        sys.exit(
            f"tools/bench_proxy.py needs the bench extra (LiteLLM's proxy server); not installed: "
            f"{', '.join(missing)}. Install it with: {BENCH_EXTRA_INSTALL}"
        )
    asyncio.run(bench(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
