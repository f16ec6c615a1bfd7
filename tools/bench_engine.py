"""Benchmark of the embedded engine through its HTTP server, against HF transformers `generate`, in one run.

    python tools/bench_engine.py                             # tiny MoE, concurrency 1, 8, 32, sequential 16
    python tools/bench_engine.py --concurrency 1,8,16,32 --new-tokens 64 --prompt-len 32 --markdown out.md

What is measured (generated tokens per second of wall time, every request generating exactly
`--new-tokens` tokens with `ignore_eos` / `min_new_tokens`, temperature 1, no top-k/top-p):
- ours: `python -m legorl_jax.engine.serve` started by `sglang_launcher.ServerProcess` (the same path the
  trainer uses for SGLang), `--max-running` slots, driven by `SGLangEngine` with c requests in flight at
  once (c per round, `--rounds` rounds, each a fresh batch of c distinct prompts); the server is warmed up
  (its programs compiled) before timing.
- HF: `model.generate` in `.venv-ref` (torch CPU + transformers, tools/make_ref_venv.sh) in a worker
  subprocess of this script (`--hf-worker`), the c prompts of a round as one batch (equal lengths, no
  padding): HF's best case for c concurrent requests, static batching. Warmed up by one short untimed
  generate per batch size.
- sequential: the same 16 requests through our server one after another, against 16 in flight at once.

Both sides run on this machine's CPU with their default thread pools, never at the same time: rounds alternate
(ours, HF, ours, HF, ...) so load drift on a shared host hits both alike. The table prints ours, HF, and their
ratio per concurrency, and the batching gain. The model is `tools/make_tiny_model.py`'s default tiny MoE
(written to a temporary directory unless --model is given).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def prompts_for(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    """n distinct prompts of `length` ids below `vocab` (a fixed LCG, so both venvs agree without numpy)."""
    state, out = seed * 7919 + 17, []
    for _ in range(n):
        row = []
        for _ in range(length):
            state = (state * 1103515245 + 12345) % 2**31
            row.append(300 + state % (vocab - 300))  # stay clear of the tokenizer's special ids
        out.append(row)
    return out


# ----------------------------------------------------------------------------------------------------
# HF worker (runs in .venv-ref: imports torch/transformers only)


def hf_worker(args: argparse.Namespace) -> None:
    """Loads the model, then answers one JSON line per JSON command line {"c", "seed", "new_tokens"}."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads()}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        c, n = cmd["c"], cmd["new_tokens"]
        ids = torch.tensor(prompts_for(c, args.prompt_len, model.config.vocab_size, seed=cmd["seed"]))
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=n,
                min_new_tokens=n,
                do_sample=True,
                top_k=0,
                top_p=1.0,
                temperature=1.0,
                pad_token_id=0,
            )
        elapsed = time.perf_counter() - start
        print(
            json.dumps({"elapsed": elapsed, "tokens": int(out.shape[0] * (out.shape[1] - ids.shape[1]))}),
            flush=True,
        )


class HFWorker:
    """The HF worker subprocess in .venv-ref, one command at a time."""

    def __init__(self, args: argparse.Namespace, model_dir: pathlib.Path):
        python = ROOT / ".venv-ref" / "bin" / "python"
        if not python.exists():
            raise SystemExit(
                f"{python} is missing: run tools/make_ref_venv.sh (HF transformers + CPU torch) first"
            )
        cmd = [
            str(python),
            __file__,
            "--hf-worker",
            "--model",
            str(model_dir),
            "--prompt-len",
            str(args.prompt_len),
        ]
        env = {**os.environ, "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TRANSFORMERS_VERBOSITY": "error"}
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.info = self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the HF worker exited with code {self.proc.wait()}")
        return json.loads(line)

    def round(self, c: int, seed: int, new_tokens: int) -> tuple[int, float]:
        self.proc.stdin.write(json.dumps({"c": c, "seed": seed, "new_tokens": new_tokens}) + "\n")
        self.proc.stdin.flush()
        reply = self._read()
        return reply["tokens"], reply["elapsed"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(60)


# ----------------------------------------------------------------------------------------------------
# the run: ours and HF take turns round by round, so load drift on a shared host hits both alike


async def measure(args: argparse.Namespace, model_dir: pathlib.Path) -> dict:
    import asyncio
    import socket

    from legorl_jax.engine import SamplingParams
    from legorl_jax.engine.sglang_client import SGLangEngine
    from legorl_jax.engine.sglang_launcher import ServerProcess

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    max_len = args.prompt_len + args.new_tokens + 1
    argv = [
        sys.executable,
        "-m",
        "legorl_jax.engine.serve",
        "--model",
        str(model_dir),
        "--port",
        str(port),
        "--max-running",
        str(args.max_running),
        "--max-len",
        str(max_len),
        "--min-bucket",
        str(args.prompt_len),
    ]
    server = ServerProcess(argv, f"http://127.0.0.1:{port}", log_file=args.log)
    server.start()
    hf = HFWorker(args, model_dir)
    try:
        await server.wait_healthy(900)
        sampling = SamplingParams(max_new_tokens=args.new_tokens, ignore_eos=True, temperature=1.0)
        vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
        async with SGLangEngine(server.base_url, timeout_s=3600) as client:

            async def ours_round(prompts: list[list[int]]) -> tuple[int, float]:
                start = time.perf_counter()
                gens = await asyncio.gather(*[client.generate(p, sampling) for p in prompts])
                return sum(len(g.output_ids) for g in gens), time.perf_counter() - start

            await ours_round(prompts_for(args.max_running, args.prompt_len, vocab, seed=1))  # compile + warm
            totals = {c: {"ours": [0, 0.0], "hf": [0, 0.0]} for c in args.concurrency}
            for c in args.concurrency:
                await asyncio.to_thread(hf.round, c, 1, 2)  # HF warm-up at this batch size
                for r in range(args.rounds):
                    seed = 1000 * c + r
                    for side, (tokens, elapsed) in (
                        ("ours", await ours_round(prompts_for(c, args.prompt_len, vocab, seed))),
                        ("hf", await asyncio.to_thread(hf.round, c, seed, args.new_tokens)),
                    ):
                        totals[c][side][0] += tokens
                        totals[c][side][1] += elapsed
            batch = prompts_for(16, args.prompt_len, vocab, seed=16)
            start, tokens = time.perf_counter(), 0
            for p in batch:
                tokens += len((await client.generate(p, sampling)).output_ids)
            sequential = tokens / (time.perf_counter() - start)
            tokens, elapsed = await ours_round(batch)
    finally:
        hf.close()
        server.stop(30)
    return {
        "ours": {c: t["ours"][0] / t["ours"][1] for c, t in totals.items()},
        "hf": {c: t["hf"][0] / t["hf"][1] for c, t in totals.items()},
        "sequential16": sequential,
        "concurrent16": tokens / elapsed,
        "hf_info": hf.info,
    }


def table(args: argparse.Namespace, result: dict) -> str:
    rows = [
        "| concurrent requests | ours (tokens/s) | HF generate (tokens/s) | ours / HF |",
        "|---:|---:|---:|---:|",
    ]
    for c in args.concurrency:
        o, h = result["ours"][c], result["hf"][c]
        rows.append(f"| {c} | {o:,.0f} | {h:,.0f} | {o / h:.2f}x |")
    gain = result["concurrent16"] / result["sequential16"]
    rows += [
        "",
        "| 16 requests | ours (tokens/s) |",
        "|---|---:|",
        f"| one after another | {result['sequential16']:,.0f} |",
        f"| all in flight | {result['concurrent16']:,.0f} |",
        f"| batching gain | {gain:.2f}x |",
    ]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", type=pathlib.Path, default=None, help="HF dir (default: a fresh default tiny MoE)"
    )
    parser.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8, 32])
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-running", type=int, default=32)
    parser.add_argument("--log", default=None, help="server log file")
    parser.add_argument("--markdown", type=pathlib.Path, default=None, help="also write the table here")
    parser.add_argument("--hf-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.hf_worker:
        hf_worker(args)
        return
    if max(args.concurrency) > args.max_running:
        raise SystemExit(
            f"--max-running {args.max_running} must cover the largest --concurrency {max(args.concurrency)}"
        )

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model
        if model_dir is None:
            sys.path.insert(0, str(ROOT / "tools"))
            import make_tiny_model

            model_dir = make_tiny_model.make_tiny_model(pathlib.Path(tmp) / "tiny-moe", seed=0)
        import asyncio

        result = asyncio.run(measure(args, model_dir))
    load = os.getloadavg()
    header = (
        f"tiny MoE ({model_dir if args.model else 'make_tiny_model default'}), prompt {args.prompt_len} "
        f"tokens, {args.new_tokens} new tokens per request, {args.rounds} rounds; "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average {load[0]:.1f}; "
        f"torch {result['hf_info']['torch']} ({result['hf_info']['threads']} threads)"
    )
    text = header + "\n\n" + table(args, result)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")


if __name__ == "__main__":
    main()
