"""`python -m legorl_jax.rollout`: run trials of a harness without training, print a per-task table, keep
the archive.

    python -m legorl_jax.rollout --harness builtin --tasks builtin --split validation \
        --model runs/tiny-moe --group-size 2
    python -m legorl_jax.rollout --harness mini_swe_agent --tasks data/swebench.jsonl \
        --engine-url http://127.0.0.1:30000 --model /models/Qwen3-8B --group-size 4 --concurrency 8
    python -m legorl_jax.rollout ... --executor ray --ray-address 10.0.0.1:6379 --proxy-host 10.0.0.1 \
        --trials-per-node 4 --concurrency 8           # the trials on the nodes of a Ray cluster

`--model` is the policy's HF directory (its tokenizer and chat template render every request); without
`--engine-url` the embedded JAX engine serves it in this process, with it an SGLang-API server does. The proxy
runs in eval mode unless `--mode train` (then the rollout temperature is enforced, as in training). Trials are
archived under `<runs-dir>/<experiment>/trials/step_0/<task>-<g>/`; the table gives per task the solve rate
(reward 1), mean reward, outcomes, turns and response tokens, and the dropped trials per reason.
`--executor ray` runs each trial on a Ray node as `train.py rollout=ray` does (README "Scaling out"): the
engine and the capture proxy stay here, listening on `--proxy-host`; without `--ray-address` a one-node Ray
starts on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import logging
import pathlib
import sys
from typing import Any

from legorl_jax.config import ROLLOUT_EXECUTORS, EngineConfig, ProxyConfig, RayConfig, RolloutConfig
from legorl_jax.engine import open_engine
from legorl_jax.harness import HARNESSES
from legorl_jax.harness.base import HarnessNotInstalled
from legorl_jax.rollout.executors import open_executor, proxy_host


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m legorl_jax.rollout", description=__doc__.split("\n\n")[0])
    p.add_argument("--harness", default="builtin", choices=list(HARNESSES))
    p.add_argument(
        "--tasks",
        default="builtin",
        help="'builtin', a SWE-bench JSONL/JSON file, or a Harbor task directory",
    )
    p.add_argument("--split", default=None, help="only tasks of this split")
    p.add_argument("--task-ids", default=None, help="comma-separated instance ids (default: every task)")
    p.add_argument(
        "--model", required=True, help="the policy's HF directory (tokenizer, chat template, weights)"
    )
    p.add_argument(
        "--engine-url", default=None, help="an SGLang-API server; default: the embedded engine in process"
    )
    p.add_argument("--group-size", type=int, default=1)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--step-limit", type=int, default=30)
    p.add_argument("--trial-timeout", type=float, default=900.0, help="seconds per trial attempt")
    p.add_argument("--retries", type=int, default=1, help="further attempts after an infrastructure failure")
    p.add_argument("--mode", default="eval", choices=("eval", "train"))
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-response-tokens", type=int, default=4096)
    p.add_argument(
        "--max-len", type=int, default=None, help="embedded engine: context length (default: the model's)"
    )
    p.add_argument("--tool-parser", default="qwen3")
    p.add_argument("--executor", default="local", choices=ROLLOUT_EXECUTORS, help="where trials run")
    p.add_argument("--ray-address", default="", help="--executor ray: the cluster (empty: a local one)")
    p.add_argument(
        "--proxy-host",
        default=RayConfig.proxy_host,
        help="--executor ray: the address the capture proxy listens on, one every node reaches",
    )
    p.add_argument("--trials-per-node", type=int, default=RolloutConfig.trials_per_node)
    p.add_argument("--runs-dir", default="runs")
    p.add_argument("--experiment", default="eval")
    return p


def table(trajectories: list[Any]) -> str:
    """The per-task summary (module docstring) as a Markdown table."""
    by_task: dict[str, list[Any]] = collections.defaultdict(list)
    for t in trajectories:
        by_task[t.task_id].append(t)
    lines = [
        "| task | trials | solved | mean reward | outcomes | turns | response tokens |",
        "|---|---|---|---|---|---|---|",
    ]
    for task_id in sorted(by_task):
        ts = by_task[task_id]
        kept = [t for t in ts if t.valid]
        solved = sum(t.reward == 1.0 for t in kept)
        outcomes = ", ".join(
            f"{k} {v}" for k, v in sorted(collections.Counter(t.outcome.value for t in ts).items())
        )
        mean = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
        lines.append(
            f"| {task_id} | {len(ts)} | {solved}/{len(kept)} | {mean([t.reward for t in kept]):.2f} | "
            f"{outcomes} | "
            f"{mean([t.features.get('turns', 0) for t in kept]):.1f} | "
            f"{mean([t.features.get('response_tokens', 0) for t in kept]):.0f} |"
        )
    kept = [t for t in trajectories if t.valid]
    dropped = collections.Counter(t.outcome.value for t in trajectories if not t.valid)
    lines.append("")
    lines.append(
        f"solve rate {sum(t.reward == 1.0 for t in kept)}/{len(kept)} scored trials "
        f"(coverage {len(kept)}/{len(trajectories)}); dropped: {dict(dropped) or 'none'}"
    )
    return "\n".join(lines)


def engine_config(args: argparse.Namespace) -> EngineConfig:
    """The engine the flags name: an SGLang-API server at `--engine-url`, else the embedded engine with
    `--concurrency` requests at once and `--max-len` tokens (default: the model's context)."""
    if args.engine_url:
        return EngineConfig(backend="sglang", url=args.engine_url, request_timeout_s=600.0)
    config = json.loads((pathlib.Path(args.model) / "config.json").read_text())
    return EngineConfig(
        backend="jax",
        max_running=max(args.concurrency, 1),
        max_len=args.max_len or int(config["max_position_embeddings"]),
        min_prefill_bucket=16,
        chunked_prefill_size=None,
    )


def rollout_config(args: argparse.Namespace) -> RolloutConfig:
    """The flags' rollout settings (a bad value raises ValueError naming it)."""
    return RolloutConfig(
        group_size=args.group_size,
        concurrency=args.concurrency,
        trial_timeout_s=args.trial_timeout,
        retries=args.retries,
        runs_dir=args.runs_dir,
        experiment=args.experiment,
        executor=args.executor,
        trials_per_node=args.trials_per_node,
        ray=RayConfig(address=args.ray_address, proxy_host=args.proxy_host),
    )


async def evaluate(args: argparse.Namespace) -> list[Any]:
    from legorl_jax.harness import get_harness
    from legorl_jax.proxy import CaptureProxy
    from legorl_jax.rollout.collect import collect
    from legorl_jax.rollout.settings import TrialSettings
    from legorl_jax.tasks.registry import find_task, load_suite

    rollout = rollout_config(args)
    tasks = load_suite(args.tasks, args.split)
    if args.task_ids:
        tasks = [find_task(tasks, i.strip()) for i in args.task_ids.split(",") if i.strip()]
    harness = get_harness(args.harness)
    proxy_config = ProxyConfig(
        mode=args.mode,
        temperature=args.temperature,
        max_response_tokens=args.max_response_tokens,
        tool_parser=args.tool_parser,
        archive_dir=str(pathlib.Path(args.runs_dir) / args.experiment / "sessions"),
    )
    async with (
        open_executor(rollout) as executor,
        open_engine(engine_config(args), args.model) as engine,
        CaptureProxy.serving(engine, args.model, proxy_config, proxy_host(rollout)) as proxy,
    ):
        batch = await collect(
            tasks,
            group_size=args.group_size,
            harness=harness,
            proxy=proxy,
            trials=TrialSettings(rollout=rollout, step_limit=args.step_limit),
            step=0,
            executor=executor,
        )
    return list(batch.trajectories)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        trajectories = asyncio.run(evaluate(args))
    except (ValueError, FileNotFoundError, HarnessNotInstalled) as exc:
        print(f"legorl_jax.rollout: {exc}", file=sys.stderr)
        return 2
    print(table(trajectories))
    print(f"\narchive: {pathlib.Path(args.runs_dir) / args.experiment / 'trials' / 'step_0'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
