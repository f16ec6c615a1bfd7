"""Benchmark of the embedded engine through its HTTP server, against HF transformers `generate`, in one run.

    python tools/bench_engine.py                                  # tiny MoE; both workloads; quiet host only
    python tools/bench_engine.py --concurrency 1,8 --sessions 8 --turns 10 --markdown out.md
    python tools/bench_engine.py --rounds 1 --concurrency 1 --new-tokens 4 --sessions 2 --turns 2   # smoke

The server runs with its own defaults (the model's full context, 32 slots, the prefix cache on): what a
newcomer gets, never a setting tuned to the workload. Both sides run on this machine's CPU, never at the
same time. Two workloads:

- concurrency (c in `--concurrency`): c distinct prompts of `--prompt-len` tokens in flight at once, each
  generating exactly `--new-tokens` (ignore_eos / min_new_tokens), temperature 1; ours through
  `SGLangEngine`, HF as one static batch of c (equal lengths: HF's best case). Before each c, HF's thread
  count is measured (`--hf-threads` candidates, a short generate each, the fastest kept), so HF runs at
  its best on this machine. Rounds alternate ours, HF, ours, HF, ... and repeat until the spread of the
  per-round ratio ours/HF ((max - min) / median) is at most `--spread`, or `--max-rounds` is reached (at
  least `--rounds`); the spread is printed either way.
- agentic: `--sessions` G conversations in flight at once, `--turns` turns each; a turn's prompt is the
  last prompt + its output + a tool result of 100-300 tokens. Ours with the prefix cache (live), then the
  same prompts against a second server with the cache off (`--prefix-cache-slots 0`), in rounds repeated
  like the concurrency ones, and against HF `generate` once (per turn, the G prompts as one left-padded
  batch: HF re-encodes every turn, as any stateless server does). Reported: wall time, generated
  tokens/s, and for the cached server the prompt tokens computed against the new ones (cache hits from
  `meta_info.cached_tokens`). Each server first runs the workload untimed until a pass compiles no new
  program (engine/programs.py: a program compiles on first use when no larger one covers the call, or in
  the background once its key is met often enough), then every timed pass of the cached server starts
  from a flushed cache; the table says how many programs compiled during the timed passes, how many calls
  waited for a compile and how many ran on a larger bucket.

vLLM as a peer (`--vllm default,all`, concurrency workload only): vLLM's CPU build from `.venv-vllm`
(tools/make_vllm_venv.sh, `make vllm-env`) serving the same directory through its OpenAI server, token-id
prompts at /v1/completions (`return_token_ids`, `logprobs: 0`, `ignore_eos`, `min_tokens`), timed in the same
alternating rounds as a third (and fourth) side. `default` leaves its thread binding as it ships (one core
bound, the rest reserved); `all` sets `VLLM_CPU_OMP_THREADS_BIND=0-<n-1>`, `VLLM_CPU_NUM_OF_RESERVED_CPU=0`.
`--vllm-kv-gib` sets `VLLM_CPU_KVCACHE_SPACE`; `--vllm-dtype` its `--dtype` (its default `auto` serves a
float32 checkpoint in bfloat16 on CPU; ours serves float32). Every reply of ours and vLLM's must hold exactly
the asked tokens with finite log-probs, and HF's the asked count, or the run stops.

Quiet host (tools/hostload.py): a busy host hurts HF's thread pool far more than our decode loop, so the
ratios would flatter us. The run is publishable only if the 1-minute load average was below 1 when it began
and, during every round, other processes (and the hypervisor's steal) took under 0.15 of a core; the
load average itself, which counts this benchmark's own server and HF worker, is printed beside. Otherwise
the table is printed with a NOT PUBLISHABLE line and `--markdown` is refused (exit status 3).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))


def lcg_ids(n: int, vocab: int, state: int) -> tuple[list[int], int]:
    """n ids below `vocab` from a fixed LCG (both venvs agree without numpy), and the next state."""
    row = []
    for _ in range(n):
        state = (state * 1103515245 + 12345) % 2**31
        row.append(300 + state % (vocab - 300))  # stay clear of the tokenizer's special ids
    return row, state


def prompts_for(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    """n distinct prompts of `length` ids below `vocab`."""
    state, out = seed * 7919 + 17, []
    for _ in range(n):
        row, state = lcg_ids(length, vocab, state)
        out.append(row)
    return out


def spread(ratios: list[float]) -> float:
    """(max - min) / median of per-round ratios."""
    return (max(ratios) - min(ratios)) / statistics.median(ratios)


def load() -> float:
    return os.getloadavg()[0]


# ----------------------------------------------------------------------------------------------------
# HF worker (runs in .venv-ref: imports torch/transformers only)


def hf_worker(args: argparse.Namespace) -> None:
    """Loads the model, then answers one JSON line per JSON command line (see `HFWorker`)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads()}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "threads":
            torch.set_num_threads(cmd["n"])
            print(json.dumps({"threads": torch.get_num_threads()}), flush=True)
            continue
        n = cmd["new_tokens"]
        if cmd["op"] == "batch":
            ids = torch.tensor(
                prompts_for(cmd["c"], args.prompt_len, model.config.vocab_size, seed=cmd["seed"])
            )
            mask = torch.ones_like(ids)
        else:  # "prompts": ragged prompts, left-padded
            width = max(len(p) for p in cmd["prompts"])
            ids = torch.tensor([[0] * (width - len(p)) + p for p in cmd["prompts"]])
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in cmd["prompts"]])
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=True,
                                 top_k=0, top_p=1.0, temperature=1.0, pad_token_id=0)  # fmt: skip
        elapsed = time.perf_counter() - start
        tokens = int(out.shape[0] * (out.shape[1] - ids.shape[1]))
        print(json.dumps({"elapsed": elapsed, "tokens": tokens}), flush=True)


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

    def _ask(self, cmd: dict) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def threads(self, n: int) -> None:
        self._ask({"op": "threads", "n": n})

    def batch(self, c: int, seed: int, new_tokens: int) -> tuple[int, float]:
        reply = self._ask({"op": "batch", "c": c, "seed": seed, "new_tokens": new_tokens})
        return reply["tokens"], reply["elapsed"]

    def prompts(self, prompts: list[list[int]], new_tokens: int) -> tuple[int, float]:
        reply = self._ask({"op": "prompts", "prompts": prompts, "new_tokens": new_tokens})
        return reply["tokens"], reply["elapsed"]

    def best_threads(self, c: int, candidates: list[int], new_tokens: int) -> tuple[int, dict[int, float]]:
        """The thread count generating fastest for a batch of c (min of two short runs each), and all
        rates."""
        rates = {}
        for n in candidates:
            self.threads(n)
            runs = [self.batch(c, 7, new_tokens) for _ in range(2)]
            rates[n] = max(tokens / elapsed for tokens, elapsed in runs)
        best = max(rates, key=rates.get)
        self.threads(best)
        return best, rates

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(60)


# ----------------------------------------------------------------------------------------------------
# vLLM's CPU build as a peer (runs in .venv-vllm: tools/make_vllm_venv.sh)

VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
VLLM_CORES = ("default", "all")


def vllm_env(cores: str, kv_gib: float | None) -> dict[str, str]:
    """The environment of a vLLM CPU server: `default` leaves its thread binding alone (it binds its OpenMP
    threads to one core and reserves the rest), `all` binds them to every core of this machine and reserves
    none (`VLLM_CPU_OMP_THREADS_BIND`, `VLLM_CPU_NUM_OF_RESERVED_CPU`). `kv_gib` sets its KV cache
    (`VLLM_CPU_KVCACHE_SPACE`, GiB); None leaves its default."""
    if cores not in VLLM_CORES:
        raise ValueError(f"vLLM cores must be one of {VLLM_CORES}, got {cores!r}")
    env = {"VLLM_CPU_KVCACHE_SPACE": f"{kv_gib:g}"} if kv_gib is not None else {}
    if cores == "all":
        env["VLLM_CPU_OMP_THREADS_BIND"] = f"0-{(os.cpu_count() or 1) - 1}"
        env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"
    return env


class VLLMPeer:
    """One vLLM OpenAI server on the model (`python -m vllm.entrypoints.openai.api_server`: the `vllm serve`
    entry point looks up a distribution named `vllm`, and this one is `vllm-cpu`), asked with token-id
    prompts at /v1/completions (`return_token_ids`, `logprobs: 0`: the sampled token's log-prob). Every
    reply is checked: exactly the asked number of tokens, finite log-probs."""

    def __init__(self, args: argparse.Namespace, model_dir: pathlib.Path, cores: str):
        from legorl_jax.engine.sglang_launcher import ServerProcess

        if not VLLM_PYTHON.exists():
            raise SystemExit(f"{VLLM_PYTHON} is missing: run tools/make_vllm_venv.sh (make vllm-env) first")
        self.cores, self.env = cores, vllm_env(cores, args.vllm_kv_gib)
        port = free_port()
        argv = [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
                "--served-model-name", "bench", "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
        if args.vllm_dtype:  # vLLM's default ("auto") downcasts a float32 checkpoint to bfloat16 on CPU
            argv += ["--dtype", args.vllm_dtype]
        log = None if args.log is None else f"{args.log}.vllm-{cores}"
        self.server = ServerProcess(argv, f"http://127.0.0.1:{port}", log_file=log, env=self.env)
        self.http = None

    async def start(self) -> None:
        import aiohttp

        self.server.start()
        await self.server.wait_healthy(1800)
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3600))

    async def generate(self, prompt: list[int], new_tokens: int) -> int:
        body = {"model": "bench", "prompt": prompt, "max_tokens": new_tokens, "min_tokens": new_tokens,
                "ignore_eos": True, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "logprobs": 0,
                "return_token_ids": True}  # fmt: skip
        assert self.http is not None, "start() first"
        async with self.http.post(self.server.base_url + "/v1/completions", json=body) as resp:
            reply = await resp.json()
            if resp.status != 200:
                raise SystemExit(f"vLLM ({self.cores}) answered HTTP {resp.status}: {reply}")
        return check_vllm_choice(reply["choices"][0], new_tokens)

    async def batch(self, prompts: list[list[int]], new_tokens: int) -> tuple[int, float]:
        start = time.perf_counter()
        counts = await asyncio.gather(*[self.generate(p, new_tokens) for p in prompts])
        return sum(counts), time.perf_counter() - start

    async def close(self) -> None:
        if self.http is not None:
            await self.http.close()
        self.server.stop(30)


def check_vllm_choice(choice: dict, new_tokens: int) -> int:
    """The number of tokens of one /v1/completions choice, after checking it holds exactly `new_tokens`
    token ids with a finite log-prob each."""
    ids = choice.get("token_ids")
    logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
    if ids is None or len(ids) != new_tokens:
        raise SystemExit(f"vLLM returned {None if ids is None else len(ids)} token ids, asked {new_tokens}")
    if (
        logprobs is None
        or len(logprobs) != new_tokens
        or not all(isinstance(x, (int, float)) and math.isfinite(x) for x in logprobs)
    ):
        raise SystemExit(f"vLLM returned log-probs that are not {new_tokens} finite numbers: {logprobs}")
    return len(ids)


def check_ours(gen, new_tokens: int) -> int:
    """The number of tokens of one of our generations, after checking it holds exactly `new_tokens` with a
    finite log-prob each."""
    import numpy as np

    if len(gen.output_ids) != new_tokens:
        raise SystemExit(f"our engine returned {len(gen.output_ids)} tokens, asked {new_tokens}")
    if len(gen.output_logprobs) != new_tokens or not np.isfinite(gen.output_logprobs).all():
        raise SystemExit(f"our engine returned log-probs that are not {new_tokens} finite numbers")
    return new_tokens


# ----------------------------------------------------------------------------------------------------
# the workloads


class Loads:
    """Around every round: the 1-minute load average, and the CPU other processes took (tools/hostload.py)."""

    def __init__(self) -> None:
        import hostload

        self.meter = hostload.ForeignCPU()
        self.readings: list[float] = []
        self.foreign: list[float] = []

    async def timed(self, work):
        self.readings.append(load())
        self.meter.lap()
        result = await work
        self.foreign.append(self.meter.lap())
        self.readings.append(load())
        return result


async def at_least(run, seconds: float) -> tuple[int, float]:
    """Runs `run(k)` -> (tokens, seconds) for k = 0, 1, ... until `seconds` have been measured: a round of
    one batch lasts a fraction of a second, too short for a ratio that holds."""
    tokens = elapsed = 0
    k = 0
    while elapsed < seconds:
        n, e = await run(k)
        tokens, elapsed, k = tokens + n, elapsed + e, k + 1
    return tokens, elapsed


async def concurrency(
    args, client, hf: HFWorker, vocab: int, loads: Loads, vllm: list[VLLMPeer] | None = None
) -> dict:
    from legorl_jax.engine import SamplingParams

    sampling = SamplingParams(max_new_tokens=args.new_tokens, ignore_eos=True, temperature=1.0)
    vllm = vllm or []

    async def ours(prompts: list[list[int]]) -> tuple[int, float]:
        start = time.perf_counter()
        gens = await asyncio.gather(*[client.generate(p, sampling) for p in prompts])
        return sum(check_ours(g, args.new_tokens) for g in gens), time.perf_counter() - start

    results = {}
    for c in args.concurrency:
        await warm(client.base_url, lambda c=c: ours(prompts_for(c, args.prompt_len, vocab, seed=c)))
        for peer in vllm:  # its first requests at a new batch size are slower (graph capture, allocations)
            await peer.batch(prompts_for(c, args.prompt_len, vocab, seed=c), args.new_tokens)
        best, rates = await asyncio.to_thread(hf.best_threads, c, args.hf_threads, min(8, args.new_tokens))
        rounds = []
        while True:
            seed = 1000 * c + 100 * len(rounds)

            async def ours_round(k: int, seed=seed, c=c) -> tuple[int, float]:
                return await ours(prompts_for(c, args.prompt_len, vocab, seed + k))

            async def hf_round(k: int, seed=seed, c=c) -> tuple[int, float]:
                return await asyncio.to_thread(hf.batch, c, seed + k, args.new_tokens)

            o_tokens, o_time = await loads.timed(at_least(ours_round, args.round_s))
            h_tokens, h_time = await loads.timed(at_least(hf_round, args.round_s))
            if h_tokens % (c * args.new_tokens):
                raise SystemExit(f"HF generated {h_tokens} tokens, not a multiple of {c} x {args.new_tokens}")
            peer_rates = []
            for peer in vllm:

                async def vllm_round(k: int, seed=seed, c=c, peer=peer) -> tuple[int, float]:
                    return await peer.batch(prompts_for(c, args.prompt_len, vocab, seed + k), args.new_tokens)

                v_tokens, v_time = await loads.timed(at_least(vllm_round, args.round_s))
                peer_rates.append(v_tokens / v_time)
            rounds.append((o_tokens / o_time, h_tokens / h_time, *peer_rates))
            ratios = [r[0] / r[1] for r in rounds]
            # The spread that stops the rounds is the widest of the ratios reported (to HF and each vLLM).
            spread_now = max(spread([r[0] / r[i] for r in rounds]) for i in range(1, len(rounds[0])))
            if len(rounds) >= args.max_rounds or (len(rounds) >= args.rounds and spread_now <= args.spread):
                break
        results[c] = {
            "ours": statistics.median(r[0] for r in rounds),
            "hf": statistics.median(r[1] for r in rounds),
            "vllm": {
                peer.cores: {
                    "rate": statistics.median(r[2 + i] for r in rounds),
                    "ratio": statistics.median(r[0] / r[2 + i] for r in rounds),
                    "spread": spread([r[0] / r[2 + i] for r in rounds]),
                }
                for i, peer in enumerate(vllm)
            },
            "ratio": statistics.median(ratios),
            "spread": spread_now,
            "rounds": len(rounds),
            "hf_threads": best,
            "hf_thread_rates": rates,
        }
    return results


async def context_scaling(args, model_dir: pathlib.Path, loads: Loads) -> dict:
    """Decode tokens/s at 8 concurrent requests with 64-token contexts (prompt 32, 32 new) on one model made
    with a `--long-context` window, served at its default (the whole window) and with `--max-len 4096`, both
    servers up at once and the rounds alternating, repeated as the concurrency rounds are (until the spread
    is at most `--spread`, 3 to `--max-rounds` rounds); the target is a ratio within 1.3x."""
    from legorl_jax.engine import SamplingParams
    from legorl_jax.engine.sglang_client import SGLangEngine

    vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    sampling = SamplingParams(max_new_tokens=32, ignore_eos=True, temperature=1.0)
    servers = {"long": server(model_dir, args), "4096": server(model_dir, args, "--max-len", "4096")}
    rates: dict[str, list[float]] = {name: [] for name in servers}
    try:
        for s in servers.values():
            s.start()
        for s in servers.values():
            await s.wait_healthy(900)
        async with (
            SGLangEngine(servers["long"].base_url, timeout_s=3600) as long_client,
            SGLangEngine(servers["4096"].base_url, timeout_s=3600) as short_client,
        ):
            clients = {"long": long_client, "4096": short_client}

            async def run(name: str, seed: int) -> tuple[int, float]:
                prompts = prompts_for(8, 32, vocab, seed)
                start = time.perf_counter()
                gens = await asyncio.gather(*[clients[name].generate(p, sampling) for p in prompts])
                return sum(len(g.output_ids) for g in gens), time.perf_counter() - start

            for name in clients:
                await warm(servers[name].base_url, lambda name=name: run(name, 7))
            before = {name: await compile_figures(s.base_url, settle=True) for name, s in servers.items()}
            for r in range(max(args.max_rounds, 3)):
                for name in ("long", "4096") if r % 2 == 0 else ("4096", "long"):
                    tokens, elapsed = await loads.timed(
                        at_least(lambda k, name=name, r=r: run(name, 1000 * r + k), args.round_s)
                    )
                    rates[name].append(tokens / elapsed)
                ratios = [s / long for s, long in zip(rates["4096"], rates["long"], strict=True)]
                spread_now = spread(ratios)
                if len(ratios) >= max(args.rounds, 3) and spread_now <= args.spread:
                    break
            programs = {
                name: compile_delta(before[name], await compile_figures(s.base_url))
                for name, s in servers.items()
            }
    finally:
        for s in servers.values():
            s.stop(30)
    ratios = [s / long for s, long in zip(rates["4096"], rates["long"], strict=True)]
    return {
        "long": statistics.median(rates["long"]),
        "short": statistics.median(rates["4096"]),
        "ratio": statistics.median(ratios),
        "spread": spread(ratios),
        "rounds": len(ratios),
        "ratios": ratios,
        "programs": programs,
        "window": args.long_context,
    }


def tool_result(session: int, turn: int, vocab: int) -> list[int]:
    """The tool output of one turn: 100-300 ids, fixed by (session, turn)."""
    (draw,), state = lcg_ids(1, vocab, 104729 * (session + 1) + 31 * turn)
    return lcg_ids(100 + draw % 201, vocab, state)[0]


async def agentic_live(args, client, vocab: int) -> dict:
    """G sessions × T turns on the cached server; returns the prompts sent and the cache figures."""
    from legorl_jax.engine import SamplingParams

    async def session(g: int) -> list[tuple[list[int], int, int, int]]:
        prompt, turns = prompts_for(1, args.prompt_len, vocab, seed=500 + g)[0], []
        for t in range(args.turns):
            sampling = SamplingParams(max_new_tokens=args.new_tokens, ignore_eos=True, seed=1000 * g + t)
            gen = await client.generate(prompt, sampling)
            turns.append((prompt, len(gen.output_ids), gen.cached_tokens, len(prompt)))
            prompt = prompt + gen.output_ids.tolist() + tool_result(g, t, vocab)
        return turns

    start = time.perf_counter()
    sessions = await asyncio.gather(*[session(g) for g in range(args.sessions)])
    elapsed = time.perf_counter() - start
    prompt_tokens = sum(p for s in sessions for _, _, _, p in s)
    cached = sum(c for s in sessions for _, _, c, _ in s)
    # New tokens of a turn: what its prompt adds to the previous turn's sequence (the first turn: all).
    new = 0
    for s in sessions:
        previous = 0
        for _, n_out, _, p in s:
            new += p - min(previous, p)
            previous = p + n_out
    return {
        "prompts": [[prompt for prompt, *_ in s] for s in sessions],
        "tokens": sum(n for s in sessions for _, n, _, _ in s),
        "elapsed": elapsed,
        "prompt_tokens": prompt_tokens,
        "cached": cached,
        "computed": prompt_tokens - cached,
        "new": new,
    }


async def agentic_replay(args, client, prompts: list[list[list[int]]]) -> dict:
    """The same prompts, each session's turns in order, the sessions in flight together."""
    from legorl_jax.engine import SamplingParams

    async def session(g: int) -> int:
        tokens = 0
        for t, prompt in enumerate(prompts[g]):
            sampling = SamplingParams(max_new_tokens=args.new_tokens, ignore_eos=True, seed=1000 * g + t)
            tokens += len((await client.generate(prompt, sampling)).output_ids)
        return tokens

    start = time.perf_counter()
    tokens = sum(await asyncio.gather(*[session(g) for g in range(len(prompts))]))
    return {"tokens": tokens, "elapsed": time.perf_counter() - start}


async def compile_figures(base_url: str, settle: bool = False) -> dict:
    """The server's programs so far (`/get_server_info`): compiled, stalls (calls that waited for a compile),
    covered calls (run on a larger compiled bucket). With `settle`, first waits until no background
    compile is queued or under way."""
    import aiohttp

    async with aiohttp.ClientSession() as http:
        while True:
            async with http.get(base_url + "/get_server_info") as resp:
                info = await resp.json()
            if not (settle and info["compiling"]):
                return {
                    "compiled": len(info["compiled_programs"]),
                    "stalls": info["compile_stalls"],
                    "covered": info["covered_calls"],
                }
            await asyncio.sleep(0.2)


def compile_delta(before: dict, after: dict) -> dict:
    return {name: after[name] - before[name] for name in before}


async def warm(base_url: str, run, most: int = 8):
    """Runs `run()` untimed until a pass compiles no new program, at most `most` passes (returns the last
    pass's result) (programs compile on
    first use, or in the background once a key is met often enough: engine/programs.py; requests arriving
    in another order meet other batch buckets)."""
    before = await compile_figures(base_url, settle=True)
    for _ in range(most):
        result = await run()
        after = await compile_figures(base_url, settle=True)
        if after["compiled"] == before["compiled"]:
            break
        before = after
    return result


async def agentic(args, cached, uncached, hf: HFWorker, vocab: int, loads: Loads) -> dict:
    """The agentic workload: rounds alternating a timed pass on the cached server (from an empty cache) and
    the same prompts on the uncached one, both servers warm and up at once, repeated until the spread of the
    per-round ratio off / on is at most `--spread` (`--rounds` to `--max-rounds` rounds; one pass is a few
    seconds and one late compile moves it by a third); then HF `generate` once on the first round's
    prompts. Wall times are each side's median round; programs are summed over the timed rounds."""
    from legorl_jax.engine.sglang_client import SGLangEngine

    async with (
        SGLangEngine(cached.base_url, timeout_s=3600) as on_client,
        SGLangEngine(uncached.base_url, timeout_s=3600) as off_client,
    ):
        warm_prompts = (await warm(cached.base_url, lambda: agentic_live(args, on_client, vocab)))["prompts"]
        await warm(uncached.base_url, lambda: agentic_replay(args, off_client, warm_prompts))
        rounds = []
        while True:
            if not await on_client.flush_cache():  # each timed pass starts from an empty cache
                raise SystemExit("the server refused /flush_cache between agentic rounds")
            before = await compile_figures(cached.base_url)
            live = await loads.timed(agentic_live(args, on_client, vocab))
            live["programs"] = compile_delta(before, await compile_figures(cached.base_url))
            before = await compile_figures(uncached.base_url)
            off = await loads.timed(agentic_replay(args, off_client, live["prompts"]))
            off["programs"] = compile_delta(before, await compile_figures(uncached.base_url))
            rounds.append((live, off))
            ratios = [o["elapsed"] / on["elapsed"] for on, o in rounds]
            spread_now = spread(ratios)
            if len(rounds) >= args.max_rounds or (len(rounds) >= args.rounds and spread_now <= args.spread):
                break
    on, off = dict(rounds[0][0]), dict(rounds[0][1])
    for i, side in enumerate((on, off)):
        side["elapsed"] = statistics.median(r[i]["elapsed"] for r in rounds)
        side["programs"] = {k: sum(r[i]["programs"][k] for r in rounds) for k in side["programs"]}
    hf_run = await loads.timed(asyncio.to_thread(agentic_hf, args, hf, on["prompts"]))
    return {"on": on, "off": off, "hf": hf_run, "ratios": ratios, "ratio": statistics.median(ratios),
            "spread": spread_now}  # fmt: skip


def agentic_hf(args, hf: HFWorker, prompts: list[list[list[int]]]) -> dict:
    hf.best_threads(len(prompts), args.hf_threads, min(8, args.new_tokens))
    tokens = elapsed = 0
    for t in range(args.turns):
        n, e = hf.prompts([s[t] for s in prompts], args.new_tokens)
        tokens, elapsed = tokens + n, elapsed + e
    return {"tokens": tokens, "elapsed": elapsed}


# ----------------------------------------------------------------------------------------------------
# the run


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server(model_dir: pathlib.Path, args, *extra: str):
    from legorl_jax.engine.sglang_launcher import ServerProcess

    port = free_port()
    argv = [sys.executable, "-m", "legorl_jax.engine.serve", "--model", str(model_dir), "--port", str(port),
            "--max-running", str(args.max_running), *extra]  # fmt: skip
    return ServerProcess(argv, f"http://127.0.0.1:{port}", log_file=args.log)


async def measure(
    args: argparse.Namespace, model_dir: pathlib.Path, long_model: pathlib.Path | None = None
) -> dict:
    from legorl_jax.engine.sglang_client import SGLangEngine

    vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    cached, uncached = server(model_dir, args), server(model_dir, args, "--prefix-cache-slots", "0")
    loads, out = Loads(), {}
    hf = HFWorker(args, model_dir)
    peers = [VLLMPeer(args, model_dir, cores) for cores in args.vllm]
    try:
        for peer in peers:  # one at a time: two starting at once fight over the two cores for minutes
            await peer.start()
        cached.start()
        await cached.wait_healthy(900)
        async with SGLangEngine(cached.base_url, timeout_s=3600) as client:
            out["concurrency"] = await concurrency(args, client, hf, vocab, loads, peers)
        for peer in peers:  # the agentic workload and the context check run without them
            await peer.close()
        if args.sessions:
            uncached.start()
            await uncached.wait_healthy(900)
            out["agentic"] = await agentic(args, cached, uncached, hf, vocab, loads)
    finally:
        hf.close()
        for peer in peers:
            await peer.close()
        cached.stop(30)
        uncached.stop(30)
    if long_model is not None:
        out["context"] = await context_scaling(args, long_model, loads)
    out["hf_info"], out["loads"], out["foreign"] = hf.info, loads.readings, loads.foreign
    out["vllm_env"] = {peer.cores: peer.env for peer in peers}
    return out


def table(args: argparse.Namespace, result: dict) -> str:
    rows = [
        "| concurrent requests | ours (tokens/s) | HF generate (tokens/s) | ours / HF (median) | spread "
        "| rounds | HF threads |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c, r in result["concurrency"].items():
        rows.append(
            f"| {c} | {r['ours']:,.0f} | {r['hf']:,.0f} | {r['ratio']:.2f}x | {100 * r['spread']:.0f}% | "
            f"{r['rounds']} | {r['hf_threads']} |"
        )
    if result.get("vllm_env"):
        rows += [
            "",
            "| concurrent requests | vLLM CPU cores | vLLM (tokens/s) | ours / vLLM (median) | spread |",
            "|---:|---|---:|---:|---:|",
        ]
        for c, r in result["concurrency"].items():
            for cores, v in r["vllm"].items():
                rows.append(
                    f"| {c} | {cores} | {v['rate']:,.0f} | {v['ratio']:.2f}x | {100 * v['spread']:.0f}% |"
                )
        rows += [
            "",
            f"vLLM dtype: {args.vllm_dtype or 'its default (auto: bfloat16 for a float32 checkpoint)'}; "
            "its environments (besides its defaults): "
            + "; ".join(f"{cores}: {env or 'none'}" for cores, env in result["vllm_env"].items())
            + ". Every reply of ours and vLLM's was checked: exactly the asked tokens, finite log-probs.",
        ]
    ctx = result.get("context")
    if ctx:
        rows += [
            "",
            "| decode, 8 concurrent, 64-token contexts | tokens/s |",
            "|---|---:|",
            f"| served at the model's {ctx['window']:,}-token context (its default) | {ctx['long']:,.0f} |",
            f"| served with --max-len 4096 | {ctx['short']:,.0f} |",
            f"| 4096 / {ctx['window']:,} (median of {ctx['rounds']} alternating rounds, spread "
            f"{100 * ctx['spread']:.0f}%) | {ctx['ratio']:.2f}x |",
            "",
            "Per-round 4096 / long, in order: "
            + ", ".join(f"{r:.2f}" for r in ctx["ratios"])
            + ". During the rounds, "
            "programs compiled / calls that waited for a compile / calls run on a larger compiled bucket: "
            + ", ".join(
                f"{name} {p['compiled']} / {p['stalls']} / {p['covered']}"
                for name, p in ctx["programs"].items()
            )
            + ".",
        ]
    a = result.get("agentic")
    if a:
        on, off, hf = a["on"], a["off"], a["hf"]
        rows += [
            "",
            f"| agentic: {args.sessions} sessions × {args.turns} turns | wall (s) | generated tokens/s | "
            f"wall / ours cached |",
            "|---|---:|---:|---:|",
        ]
        for name, r in (("ours, prefix cache on", on), ("ours, cache off", off), ("HF generate", hf)):
            rate = r["tokens"] / r["elapsed"]
            rows.append(
                f"| {name} | {r['elapsed']:.1f} | {rate:,.0f} | {r['elapsed'] / on['elapsed']:.2f}x |"
            )
        rows += [
            "",
            f"Cache off / on, per round in order: {', '.join(f'{r:.2f}' for r in a['ratios'])}: median "
            f"**{a['ratio']:.2f}x**, spread {a['spread']:.0%} ({len(a['ratios'])} rounds; the walls above "
            "are each side's median round, HF one pass on the first round's prompts).",
        ]
        rows += [
            "",
            f"Prompt tokens {on['prompt_tokens']:,}: cached {on['cached']:,} "
            f"({100 * on['cached'] / on['prompt_tokens']:.0f}%), computed {on['computed']:,} = "
            f"{on['computed'] / on['new']:.2f}x the {on['new']:,} new tokens. During the timed passes (after "
            "the warm-up passes), programs compiled / calls that waited for a compile / calls run on a "
            "larger compiled bucket: "
            + ", ".join(
                f"{name} {r['programs']['compiled']} / {r['programs']['stalls']} / {r['programs']['covered']}"
                for name, r in (("cache on", on), ("cache off", off))
            )
            + ".",
        ]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", type=pathlib.Path, default=None, help="HF dir (default: a fresh default tiny MoE)"
    )
    parser.add_argument("--concurrency", type=ints, default=[1, 8, 32])
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3, help="fewest rounds per concurrency")
    parser.add_argument("--max-rounds", type=int, default=10, help="most rounds per concurrency")
    parser.add_argument(
        "--round-s", type=float, default=2.0, help="each side of a round repeats its batch this long at least"
    )
    parser.add_argument(
        "--spread", type=float, default=0.1, help="stop once (max - min) / median ratio <= this"
    )
    parser.add_argument("--hf-threads", type=ints, default=sorted({1, 2, 4, 8, os.cpu_count() or 1}))
    parser.add_argument("--sessions", type=int, default=8, help="agentic sessions (0: skip the workload)")
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--max-running", type=int, default=32)
    parser.add_argument(
        "--long-context",
        type=int,
        default=32768,
        help="context window of the model for the 4k-vs-long decode check (0: skip it)",
    )
    parser.add_argument(
        "--vllm",
        type=lambda v: [c for c in v.split(",") if c],
        default=[],
        help="vLLM CPU peers in .venv-vllm for the concurrency workload, by core binding: 'default' "
        "(its own: one core), 'all' (every core), or 'default,all' (both, alternating)",
    )
    parser.add_argument(
        "--vllm-kv-gib", type=float, default=None, help="VLLM_CPU_KVCACHE_SPACE (default: vLLM's own)"
    )
    parser.add_argument(
        "--vllm-dtype",
        default=None,
        help="vLLM's --dtype (default: its own 'auto', which serves a float32 checkpoint in bfloat16 on CPU)",
    )
    parser.add_argument("--log", default=None, help="server log file")
    parser.add_argument(
        "--markdown", type=pathlib.Path, default=None, help="also write the table here (quiet only)"
    )
    parser.add_argument("--hf-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.hf_worker:
        hf_worker(args)
        return 0
    if max(args.concurrency) > args.max_running:
        raise SystemExit(
            f"--max-running {args.max_running} must cover the largest --concurrency {max(args.concurrency)}"
        )
    bad = [c for c in args.vllm if c not in VLLM_CORES]
    if bad:
        raise SystemExit(f"--vllm takes a comma list of {VLLM_CORES}, got {bad}")
    if not 1 <= args.rounds <= args.max_rounds:
        raise SystemExit(f"--rounds {args.rounds} must lie in [1, --max-rounds {args.max_rounds}]")
    args.hf_threads = [n for n in args.hf_threads if 1 <= n <= (os.cpu_count() or 1)] or [1]

    import hostload
    import make_tiny_model

    start_load = load()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model
        if model_dir is None:
            model_dir = make_tiny_model.make_tiny_model(pathlib.Path(tmp) / "tiny-moe", seed=0)
        long_model = None
        if args.long_context:
            spec = make_tiny_model.TinyModelSpec(max_positions=args.long_context)
            long_model = make_tiny_model.make_tiny_model(pathlib.Path(tmp) / "tiny-moe-long", spec, seed=0)
        result = asyncio.run(measure(args, model_dir, long_model))
    quiet, why = hostload.verdict(start_load, result["foreign"])
    header = (
        f"{f'model {model_dir}' if args.model else 'tiny MoE (make_tiny_model default)'}, server defaults "
        f"(model's context, {args.max_running} slots, prefix cache on), prompt {args.prompt_len} tokens, "
        f"{args.new_tokens} new tokens per request; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs; torch {result['hf_info']['torch']}; {why}; the 1-minute load average "
        f"before/after every round (the benchmark's own processes included): "
        f"{', '.join(f'{x:.2f}' for x in result['loads'])}"
    )
    text = header + "\n\n" + table(args, result)
    print(text)
    if not quiet:
        print(f"\nNOT PUBLISHABLE: the host was not quiet ({why}); rerun on a quiet host.")
        if args.markdown:
            print(f"refusing to write {args.markdown}", file=sys.stderr)
            return 3
    elif args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
