"""The trainer on the embedded engine's rollouts: (a) with the engine's routing replayed, the train
step's log-prob path recomputes the engine's behaviour log-probs; (b) a single-turn task learns, with
weights published to the engine in process after every step; (c) weights published to disk as an HF
directory are what the engine serves next; (d) tokens an `in_place` update left sampled over old K/V
leave the alignment gate for offpolicy/*_stale_kv.

The policy is the trainers' tiny MoE drawn with init_std 0.3 (HF's 0.02 gives a near-uniform
next-token distribution, under which neither a correlation nor a reward signal means anything). Both
tests share one trainer and one engine shape (16 slots) and pack into the same 4-row batch shape, so
the train step and the engine programs compile once for the module.
"""

import asyncio

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tiny_run
from tiny_run import MAX_TOKENS, TINY_MOE

from legorl_jax.config import AlgoConfig, TrainConfig
from legorl_jax.engine import SamplingParams
from legorl_jax.engine.jax_engine import JaxEngine
from legorl_jax.model import init_policy, load_hf, save_hf
from legorl_jax.train.advantages import trajectory_advantages
from legorl_jax.train.batch import pack_trajectories, trajectories_from_generations
from legorl_jax.train.publish import Publisher, version_of
from legorl_jax.train.step import Trainer

PROMPTS = [[1, 2, 3, 4], [10, 20, 30, 40], [5, 6, 7], [100, 50, 25, 12, 6]]


@pytest.fixture(scope="module")
def policy():
    return init_policy(TINY_MOE, seed=0, init_std=0.3)


@pytest.fixture(scope="module")
def trainer(policy):
    train = TrainConfig(
        learning_rate=1e-2, max_tokens=MAX_TOKENS, micro_batch_rows=2, routing_agreement_every=0
    )
    return Trainer(policy, AlgoConfig(), train)


def make_engine(policy):
    return JaxEngine(policy, max_running=16, max_len=MAX_TOKENS)


def pack(trainer, prompts, gens, rewards, groups):
    trajs = trajectories_from_generations(prompts, gens, rewards, groups)
    return pack_trajectories(
        trajs,
        trajectory_advantages(trajs),
        max_tokens=MAX_TOKENS,
        row_multiple=trainer.row_multiple,
        routing=trainer.routing,
    )


async def test_engine_routing_replay_alignment(policy, trainer):
    state = trainer.init_state()
    engine = make_engine(policy)
    try:
        prompts = [p for p in PROMPTS for _ in range(2)]
        sampling = [
            SamplingParams(max_new_tokens=10, seed=i, temperature=trainer.algo.temperature)
            for i in range(len(prompts))
        ]
        gens = await asyncio.gather(
            *[
                engine.generate(p, s, return_routed_experts=True)
                for p, s in zip(prompts, sampling, strict=True)
            ]
        )
    finally:
        engine.close()
    batch, _ = pack(
        trainer,
        prompts,
        gens,
        [float(i % 2) for i in range(len(gens))],
        [f"g{i // 2}" for i in range(len(gens))],
    )
    assert batch.tokens.shape == (4, MAX_TOKENS)
    device = trainer.device_batch(batch)
    recomputed = np.asarray(trainer.old_logprobs(state.params, device))
    mask = np.asarray(batch.loss_mask) > 0
    assert mask.sum() == sum(len(g.output_ids) for g in gens)
    engine_lp, trainer_lp = np.asarray(batch.behaviour_logprobs)[mask], recomputed[mask]
    assert np.corrcoef(engine_lp, trainer_lp)[0, 1] >= 0.9999
    assert np.corrcoef(np.exp(engine_lp), np.exp(trainer_lp))[0, 1] >= 0.9999
    assert np.max(np.abs(engine_lp - trainer_lp)) <= 1e-4

    _, metrics = tiny_run.update(trainer, state, batch)  # the same figures through the train step itself
    assert metrics["align/prob_pearson"] >= 0.9999 and metrics["align/max_abs_logprob_diff"] <= 1e-4
    assert metrics["align/routing_coverage"] == 1.0


async def test_a_single_turn_task_learns_on_the_engine_with_weights_published_each_step(policy, trainer):
    """Reward 1 when the completion begins with `target`, a token the initial policy rarely starts with."""
    prompts = PROMPTS[:2]
    first = np.stack(
        [np.asarray(jax.nn.softmax(policy(jnp.asarray([p])).logits[0, -1])) for p in prompts]
    ).mean(0)
    target = int(np.argmin(np.abs(first - 0.06)))  # about 6% of first tokens at the start
    state = trainer.init_state()
    engine = make_engine(policy)
    publisher = Publisher(engine, mode="in_process")
    group, steps, rewards = 8, 12, []
    try:
        for step in range(steps):
            reqs = [p for p in prompts for _ in range(group)]
            gens = await asyncio.gather(
                *[
                    engine.generate(
                        p, SamplingParams(max_new_tokens=2, seed=1000 * step + i), return_routed_experts=True
                    )
                    for i, p in enumerate(reqs)
                ]
            )
            assert {g.weight_version for g in gens} == {"default" if step == 0 else str(step)}
            reward = [float(g.output_ids[0] == target) for g in gens]
            rewards.append(float(np.mean(reward)))
            batch, stats = pack(
                trainer, reqs, gens, reward, [f"{step}/{i // group}" for i in range(len(reqs))]
            )
            assert batch.tokens.shape == (4, MAX_TOKENS)
            state, _ = trainer.update(state, batch, stats)
            await publisher.publish(state.params, str(step + 1))
    finally:
        engine.close()
    assert rewards[0] < 0.2, rewards
    assert np.mean(rewards[-3:]) > 0.8, rewards


async def test_weights_published_to_disk_are_what_the_engine_serves_next(policy, trainer, tmp_path):
    # The engine starts from an HF directory, as in a run (the same weights as `policy`, saved in fp32:
    # the engine refuses a checkpoint whose config.json differs from its own, torch_dtype included).
    save_hf(policy, tmp_path / "initial", "float32")
    prompts = [p for p in PROMPTS for _ in range(2)]
    engine = make_engine(load_hf(tmp_path / "initial", dtype="float32"))
    try:
        gens = await asyncio.gather(
            *[
                engine.generate(p, SamplingParams(max_new_tokens=10, seed=i), return_routed_experts=True)
                for i, p in enumerate(prompts)
            ]
        )
        rewards, groups = [float(i % 2) for i in range(8)], [f"g{i // 2}" for i in range(8)]
        batch, _ = pack(trainer, prompts, gens, rewards, groups)
        state, _ = trainer.update(trainer.init_state(), batch)
        ids = np.concatenate([prompts[0], gens[0].output_ids]).astype(np.int32)
        start = len(prompts[0])
        before = await engine.prompt_logprobs(ids, start)
        publisher = Publisher(
            engine,
            mode="disk",
            to_policy=trainer.policy_of,
            directory=tmp_path / "published",
            dtype="float32",
        )
        path = await publisher.publish(state.params, version_of(1))
        served = await engine.prompt_logprobs(ids, start)
        after = await engine.generate(prompts[0], SamplingParams(max_new_tokens=1, seed=0))
    finally:
        engine.close()
    trained = trainer.policy_of(state.params)
    expected = trained.token_logprobs(jnp.asarray(ids[None, :-1]), jnp.asarray(ids[None, 1:]))
    expected = np.asarray(expected)[0, start - 1 :]
    assert path == tmp_path / "published" / "step-000001" and after.weight_version == "step-000001"
    # The engine now computes the trained policy (fp32 on disk: exact up to float rounding), not the one
    # it started with: a publish that wrote, or loaded, the old weights would leave `served` == `before`.
    # The engine vs the trainer's forward of the same fp32 weights: re-ordered sums, fp32 simple-op 1e-5.
    np.testing.assert_allclose(served, expected, atol=1e-5)
    assert np.abs(served - before).max() > 1e-3


async def wait_for_tokens(engine, rids, n, timeout=60.0):
    """Until each request in `rids` has sampled at least n tokens (read from the scheduler, timing only)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while any(len(getattr(engine.scheduler.by_rid.get(r), "output_ids", ())) < n for r in rids):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"requests {rids} did not reach {n} tokens")
        await asyncio.sleep(0.002)


async def test_tokens_an_in_place_update_left_over_old_kv_are_judged_in_offpolicy_not_by_the_gate(trainer):
    """Two long requests span an `in_place` update from other weights to the trainer's (version 1): their
    tokens after it ran over the old weights' K/V. Four requests start after it. The trainer at version 1
    judges only the fresh ones' tokens in align/*: engine and trainer agree there to float rounding, while
    the stale tokens, whose log-probs no single set of weights reproduces, are in offpolicy/*_stale_kv."""
    state = trainer.init_state()
    engine = make_engine(init_policy(TINY_MOE, seed=1, init_std=0.3))  # version "default" = 0
    long = [PROMPTS[0], PROMPTS[1]]
    short = [p for p in PROMPTS[2:] for _ in range(2)]

    def sampling(i, n):
        return SamplingParams(max_new_tokens=n, seed=i, ignore_eos=True, temperature=trainer.algo.temperature)

    try:
        spanning = [
            asyncio.ensure_future(
                engine.generate(p, sampling(i, MAX_TOKENS - len(p)), return_routed_experts=True, rid=f"s{i}")
            )
            for i, p in enumerate(long)
        ]
        await wait_for_tokens(engine, ["s0", "s1"], 4)
        await Publisher(engine, mode="in_process", update_policy="in_place").publish(
            state.params, version_of(1)
        )
        fresh = await asyncio.gather(
            *[
                engine.generate(p, sampling(10 + i, 10), return_routed_experts=True)
                for i, p in enumerate(short)
            ]
        )
        gens = [*(await asyncio.gather(*spanning)), *fresh]
    finally:
        engine.close()
    stale = sum(g.stale_kv_tokens for g in gens[:2])
    assert all(g.stale_kv_tokens > 0 and g.token_weight_versions is not None for g in gens[:2])
    assert all(g.stale_kv_tokens == 0 and g.weight_version == version_of(1) for g in fresh)
    prompts = [*long, *short]
    batch, stats = pack(
        trainer, prompts, gens, [float(i % 2) for i in range(6)], [f"g{i // 2}" for i in range(6)]
    )
    assert batch.tokens.shape == (4, MAX_TOKENS) and batch.stale_kv.sum() == stale

    _, result = trainer.update(state, batch, stats, trainer_version=1)
    m = result.metrics
    fresh_tokens = sum(len(g.output_ids) for g in fresh)
    assert m["offpolicy/stale_kv_tokens"] == stale and m["align/same_version_tokens"] == fresh_tokens + stale
    assert m["offpolicy/cross_version_tokens"] == sum(len(g.output_ids) for g in gens[:2]) - stale
    # The gate: the fresh tokens of the trainer's version, recomputed with their routing replayed.
    assert m["align/prob_pearson"] >= 0.9999 and m["align/max_abs_logprob_diff"] <= 1e-4
    # The stale tokens are not the trainer's numbers (new weights over old K/V), and they are not in the gate.
    assert m["offpolicy/max_abs_logprob_diff_stale_kv"] > 1e-2
    diffs = result.logprob_diffs  # per sampled target, in batch order
    flags = batch.stale_kv[batch.loss_mask > 0] > 0
    assert np.abs(diffs[flags]).max() == pytest.approx(m["offpolicy/max_abs_logprob_diff_stale_kv"], rel=1e-5)
