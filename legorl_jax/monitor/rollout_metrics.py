"""What one step's trials say about the policy: reward, outcomes, behaviour, throughput; and the loop's
alerts.

    metrics = rollout_metrics(batch)  # {"rollout/reward_mean": ..., "behaviour/no_tool_rate": ..., ...}
    text = trial_text(trajectory)     # a trial's conversation, for Aim's Text view
    for line in alerts(metrics): log.warning(line)

Names:
- `rollout/trials`, `rollout/scored` (policy outcomes), `rollout/coverage` (scored / trials),
  `rollout/reward_mean` and `rollout/solve_rate` (reward 1) over scored trials, `rollout/outcome/<name>`
  per outcome, `rollout/dropped/<reason>` per infrastructure reason of the trials dropped (after their
  retries); `rollout/infra_failures/<reason>` per infrastructure reason of every failed attempt, whether or
  not a retry made the trial good, and `rollout/retried` (attempts beyond each trial's first; both always
  present, 0 on a clean step);
- `behaviour/turns_per_trial`, `behaviour/tool_calls_per_turn`, `behaviour/no_tool_rate` (replies without a
  tool call / replies), `behaviour/reread_rate` (re-reads of an edited file / edits),
  `behaviour/test_run_rate` (trials that ran tests), `behaviour/response_tokens_per_trial` and `_per_turn`,
  `behaviour/tokens_per_trial` and `_max` (every token of a trial's sequences, prompts included: what the
  trainer's rows must hold);
- `throughput/trials_per_minute`, `throughput/rollout_s`, `throughput/response_tokens_per_s` (sampled tokens
  of every trial over the collection's wall time).
Behaviour figures average over scored trials: a dropped trial says nothing about the policy.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Mapping
from typing import Any

from legorl_jax.types import Outcome

INFRA_REASONS = tuple(o.value for o in Outcome if o.is_infra_failure)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def rollout_metrics(batch: Any) -> dict[str, float]:
    """The step's rollout figures (module docstring) from a `rollout.Batch`."""
    trials = list(batch.trajectories)
    scored = [t for t in trials if t.valid]
    m: dict[str, float] = {
        "rollout/trials": float(len(trials)),
        "rollout/scored": float(len(scored)),
        "rollout/coverage": len(scored) / len(trials) if trials else 0.0,
        "rollout/reward_mean": _mean([t.reward for t in scored]),
        "rollout/solve_rate": _mean([float(t.reward == 1.0) for t in scored]),
        "throughput/trials_per_minute": float(batch.trials_per_minute),
        "throughput/rollout_s": float(batch.seconds),
        "throughput/response_tokens_per_s": (
            sum(t.features.get("response_tokens", 0.0) for t in trials) / batch.seconds
            if batch.seconds > 0
            else 0.0
        ),
    }
    for name, count in collections.Counter(t.outcome.value for t in trials).items():
        m[f"rollout/outcome/{name}"] = float(count)
    for name, count in collections.Counter(t.outcome.value for t in trials if not t.valid).items():
        m[f"rollout/dropped/{name}"] = float(count)
    failures: collections.Counter[str] = collections.Counter()
    retried = 0
    for t in trials:
        attempts = t.attempts or (t.outcome.value,)
        retried += len(attempts) - 1
        failures.update(a for a in attempts if Outcome(a).is_infra_failure)
    m["rollout/retried"] = float(retried)
    for reason in INFRA_REASONS:
        m[f"rollout/infra_failures/{reason}"] = float(failures[reason])
    f = [t.features for t in scored]
    lengths = [float(sum(len(s.token_ids) for s in t.sequences)) for t in scored]
    turns = sum(x.get("turns", 0.0) for x in f)
    edits = sum(x.get("edits", 0.0) for x in f)
    m.update(
        {
            "behaviour/turns_per_trial": _mean([x.get("turns", 0.0) for x in f]),
            "behaviour/tool_calls_per_turn": sum(x.get("tool_calls", 0.0) for x in f) / turns
            if turns
            else 0.0,
            "behaviour/no_tool_rate": sum(x.get("no_tool_replies", 0.0) for x in f) / turns if turns else 0.0,
            "behaviour/reread_rate": sum(x.get("rereads_after_edit", 0.0) for x in f) / edits
            if edits
            else 0.0,
            "behaviour/test_run_rate": _mean([float(x.get("test_runs", 0.0) > 0) for x in f]),
            "behaviour/response_tokens_per_trial": _mean([x.get("response_tokens", 0.0) for x in f]),
            "behaviour/response_tokens_per_turn": sum(x.get("response_tokens", 0.0) for x in f) / turns
            if turns
            else 0.0,
            "behaviour/tokens_per_trial": _mean(lengths),
            "behaviour/tokens_per_trial_max": max(lengths, default=0.0),
        }
    )
    return m


def trial_text(trajectory: Any, limit: int = 20000) -> str:
    """A trial's conversation as text: one block per message, tool calls written out, long texts cut."""
    lines = [
        f"# {trajectory.trial_id}  task {trajectory.task_id}  outcome {trajectory.outcome.value}  "
        f"reward {trajectory.reward:.2f}"
    ]
    for msg in trajectory.messages:
        content = msg.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
        lines.append(f"\n## {msg.get('role', '?')}")
        if msg.get("reasoning_content"):
            lines.append(f"<think>{msg['reasoning_content']}</think>")
        if content:
            lines.append(str(content))
        for call in msg.get("tool_calls") or []:
            fn = call.get("function", {})
            lines.append(f"-> {fn.get('name')}({fn.get('arguments')})")
    text = "\n".join(lines)
    return text if len(text) <= limit else text[: limit // 2] + "\n...[cut]...\n" + text[-limit // 2 :]


def alerts(metrics: Mapping[str, float], *, moe: bool = False) -> list[str]:
    """Warnings a person should see in the log for this step's metrics (empty when healthy)."""
    out = []
    pearson = metrics.get("align/prob_pearson")
    if pearson is not None and (math.isnan(pearson) or pearson < 0.99):
        out.append(
            f"alignment: trainer/engine probability Pearson {pearson:.4f} < 0.99 (replay or numerics broken?)"
        )
    if metrics.get("rollout/scored", 0) and metrics.get("behaviour/tool_calls_per_turn", 0.0) == 0.0:
        out.append(
            "behaviour: no tool call was parsed in this step (tool parser and chat template disagree, "
            "or the policy stopped calling tools)"
        )
    coverage = metrics.get("align/routing_coverage")
    if moe and coverage is not None and coverage < 1.0:
        out.append(
            f"alignment: routing coverage {coverage:.4f} < 1 for an MoE policy (some tokens route natively)"
        )
    if metrics.get("train/lr") == 0.0:  # the trainer's learning rate of the update
        out.append("train: the learning rate is 0 (the update changes nothing)")
    return out
