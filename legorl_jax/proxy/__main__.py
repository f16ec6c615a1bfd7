"""`python -m legorl_jax.proxy`: the capture proxy in front of an SGLang-API server.

    python -m legorl_jax.proxy --engine-url http://127.0.0.1:30000 --model DIR --host 127.0.0.1 --port 8100 \
        --admin-token TOKEN [--mode eval] [--tool-parser qwen3_coder] [--temperature 1.0] \
        [--archive-dir runs/proxy]

`--engine-url` is an SGLang server or `python -m legorl_jax.engine.serve`; `--model` the HF directory whose
tokenizer, chat template and config the proxy renders with (the server's own model). The admin token guards
`/admin/...` (also read from LEGORL_PROXY_ADMIN_TOKEN). SIGTERM or SIGINT stops it; sessions still open are
archived first.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import pathlib
import signal
import sys

from legorl_jax.config import EngineConfig, ProxyConfig


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m legorl_jax.proxy", description=__doc__.split("\n\n")[0])
    p.add_argument("--engine-url", required=True, help="base URL of an SGLang-API server")
    p.add_argument("--model", required=True, help="HF model directory (tokenizer, chat template, config)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8100)
    p.add_argument("--admin-token", default=os.environ.get("LEGORL_PROXY_ADMIN_TOKEN"))
    p.add_argument("--mode", default="train", choices=("train", "eval"))
    p.add_argument("--tool-parser", default="qwen3")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-response-tokens", type=int, default=4096)
    p.add_argument("--context-length", type=int, default=None)
    p.add_argument(
        "--archive-dir",
        default="runs/proxy",
        help="closed sessions are archived here; the admin API's trial_dir must resolve inside it",
    )
    p.add_argument(
        "--max-resumes",
        type=int,
        default=EngineConfig.max_resumes,
        help="re-issues of one reply cut by a weight update (engine.update_policy=abort_resume)",
    )
    return p


async def _serve(args: argparse.Namespace) -> None:
    from legorl_jax.engine.sglang_client import SGLangEngine
    from legorl_jax.proxy.app import CaptureProxy

    config = ProxyConfig(
        mode=args.mode,
        tool_parser=args.tool_parser,
        temperature=args.temperature,
        max_response_tokens=args.max_response_tokens,
        context_length=args.context_length,
        archive_dir=args.archive_dir,
    )
    model_config = json.loads((pathlib.Path(args.model) / "config.json").read_text())
    routing = None
    if model_config.get("num_experts") or model_config.get("num_local_experts"):
        from legorl_jax.model.architecture import ArchConfig

        mc = ArchConfig.from_hf_dict(model_config)
        routing = (mc.num_moe_layers, mc.num_experts_per_tok, mc.num_experts)
    async with SGLangEngine(args.engine_url, routing=routing) as engine:
        proxy = CaptureProxy.from_model_dir(
            engine, args.model, config, admin_token=args.admin_token, max_resumes=args.max_resumes
        )
        base = await proxy.start(args.host, args.port)
        # Everything alive now (jax, flax, the tokenizer: a few hundred thousand objects) lives as long as
        # the process; out of the collector's sight, a full collection no longer walks it while a request
        # waits (it took ~100 ms at 64 sessions).
        gc.freeze()
        print(
            f"legorl_jax.proxy: ready on {base} (engine {args.engine_url}, mode {args.mode})",
            file=sys.stderr,
            flush=True,
        )
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            for sid in list(proxy.sessions):
                await proxy.close_session(sid)
            await proxy.stop()


def _loop_factory():
    """uvloop's event loop where it is installed (Linux, macOS): it roughly halves the event loop's cost per
    HTTP request, which is most of what the proxy adds to a model call; asyncio's own loop otherwise."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.admin_token:
        print("legorl_jax.proxy: --admin-token (or LEGORL_PROXY_ADMIN_TOKEN) is required", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        asyncio.run(_serve(args), loop_factory=_loop_factory())
    except (ValueError, OSError) as exc:
        print(f"legorl_jax.proxy: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
