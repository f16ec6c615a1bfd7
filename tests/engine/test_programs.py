"""Which compiled program runs an engine call (engine/programs.py): a larger compiled bucket covers a call
whose own program is missing, a key that has paid a compile's worth of rent compiles in the background,
decode compiles the next context bucket ahead, and stalls are counted.

The runner tests use runners of their own shape (6 slots, max_len 128, context buckets 32/64/128), so the
shared engine's programs never answer for them, and each starts from an empty registry."""

import logging
import time

import numpy as np
import pytest

from legorl_jax.engine import SamplingParams
from legorl_jax.engine import programs as programs_module
from legorl_jax.engine.programs import Programs
from legorl_jax.engine.runner import ModelRunner
from legorl_jax.engine.sampler import SamplingRows

PROMPTS = [[5, 17, 230, 901, 44], [1000, 2, 3, 4, 5, 6, 7], [77, 78, 79], [3000, 12, 1, 4001, 9, 9]]


@pytest.fixture(autouse=True)
def empty_registry():
    programs_module.clear()
    yield
    programs_module.clear()


def make_runner(policy, background: bool) -> ModelRunner:
    return ModelRunner(policy, 6, 128, min_bucket=16, min_context=32, compile_in_background=background)


def rows(n: int) -> SamplingRows:
    return SamplingRows.host([SamplingParams(seed=10 + i) for i in range(n)], [10 + i for i in range(n)])


def prefill_four(runner: ModelRunner) -> np.ndarray:
    """Prefills PROMPTS into slots 0..3 (one call, key (4, 16, 32)); returns their first tokens."""
    prompts = [np.asarray(p, np.int32) for p in PROMPTS]
    tokens, _, _, _ = runner.prefill(prompts, [0, 1, 2, 3], [0, 0, 0, 0], rows(4))
    return tokens


def decode_first(runner: ModelRunner, first: np.ndarray, n: int):
    """One decode step of the first n prompts (their first sampled token at position len(prompt))."""
    positions = np.array([len(p) for p in PROMPTS[:n]], np.int32)
    return runner.decode(first[:n], positions, np.arange(n, dtype=np.int32), rows(n), want_routing=True)


def test_a_call_without_its_program_runs_on_a_compiled_larger_bucket_with_the_same_result(policy):
    runner = make_runner(policy, background=True)
    first = prefill_four(runner)
    decode_first(runner, first, 4)  # compiles ("decode", 4, 32, 0) in the caller: nothing covers it
    assert runner.programs.stalls == 2 and runner.programs.covered == 0
    token, logprob, routed, _ = decode_first(runner, first, 1)
    assert runner.programs.covered == 1 and runner.programs.stalls == 2
    assert ("decode", 1, 32, 0) not in runner.compiled  # one covered call pays less than a compile
    # The same step on its own one-row program (it rewrites the same K/V at the same position).
    runner.programs.background = False
    own_token, own_logprob, own_routed, _ = decode_first(runner, first, 1)
    assert ("decode", 1, 32, 0) in runner.compiled and runner.programs.stalls == 3
    np.testing.assert_array_equal(token, own_token)
    # A covering program of more rows vs the one-row program: re-ordered sums (fp32 simple-op 1e-5).
    np.testing.assert_allclose(logprob, own_logprob, atol=1e-5)
    np.testing.assert_array_equal(routed, own_routed)


def test_a_key_compiles_in_the_background_once_its_covered_calls_have_paid_a_compile(policy):
    runner = make_runner(policy, background=True)
    first = prefill_four(runner)
    decode_first(runner, first, 4)
    key, cover = ("decode", 1, 32, 0), ("decode", 4, 32, 0)
    estimate = runner.programs.compile_estimate
    assert estimate > 0  # measured from the two compiles above
    runner.programs.ran(key, cover, 0.5 * estimate)  # rent: 0.5 * estimate * (1 - 1/4) < estimate
    assert runner.programs.compiling == 0 and key not in runner.compiled
    runner.programs.ran(key, cover, 2.0 * estimate)  # now past a compile's worth
    runner.programs.wait()
    assert key in runner.compiled
    covered, stalls = runner.programs.covered, runner.programs.stalls
    decode_first(runner, first, 1)
    assert (runner.programs.covered, runner.programs.stalls) == (covered, stalls)  # its own program ran


def test_a_decode_that_runs_compiles_its_next_context_bucket_ahead(policy):
    runner = make_runner(policy, background=True)
    assert runner.context_buckets == (32, 64, 128)
    first = prefill_four(runner)
    decode_first(runner, first, 4)  # ("decode", 4, 32, 0): queues ("decode", 4, 64, 0)
    runner.programs.wait()
    assert ("decode", 4, 64, 0) in runner.compiled and ("decode", 4, 128, 0) not in runner.compiled
    stalls = runner.programs.stalls
    positions = np.full(4, 40, np.int32)  # past the 32 bucket: the program compiled ahead serves it
    runner.decode(first, positions, np.arange(4, dtype=np.int32), rows(4), want_routing=False)
    assert runner.programs.stalls == stalls and runner.programs.covered == 0


def test_without_background_compiles_every_missing_key_compiles_in_the_caller(policy):
    runner = make_runner(policy, background=False)
    first = prefill_four(runner)
    decode_first(runner, first, 4)
    decode_first(runner, first, 1)
    runner.programs.wait()
    assert runner.programs.covered == 0 and runner.programs.stalls == 3
    assert {k for k in runner.compiled if k[0] == "decode"} == {("decode", 4, 32, 0), ("decode", 1, 32, 0)}


# ----------------------------------------------------------------------------------------------------
# the rules, on programs that are plain values (no XLA)


def built(key):
    return ("executable", key)


def test_a_cover_is_the_cheapest_larger_program_of_the_same_kind_within_the_cost_limit():
    programs = Programs("rules", built, lambda key: None, max_cover_cost=4)
    small, large, top5 = ("decode", 4, 128, 0), ("decode", 2, 512, 0), ("decode", 2, 128, 5)
    for key in (small, large, top5):
        assert programs.lookup(key) == (key, built(key))  # nothing covers them: compiled in the caller
    assert programs.stalls == 3 and programs.covered == 0
    assert programs.lookup(("decode", 2, 128, 0)) == (small, built(small))  # 2x its cost; `large` is 4x
    assert programs.lookup(("decode", 1, 256, 0)) == (large, built(large))  # only `large` holds 256
    assert programs.lookup(("decode", 1, 128, 0))[0] == small  # `top5` is cheaper but another program
    assert programs.covered == 3 and programs.stalls == 3
    # 1 x 64: `small` would cost 8x, past the limit of 4: compiled in the caller.
    assert programs.lookup(("decode", 1, 64, 0)) == (("decode", 1, 64, 0), built(("decode", 1, 64, 0)))
    assert programs.stalls == 4 and programs.ready == {small, large, top5, ("decode", 1, 64, 0)}


def test_a_cover_past_the_cost_limit_runs_when_its_last_call_took_less_than_a_compile(caplog):
    def slow_build(key):
        time.sleep(0.05)  # every compile measures ~50 ms: the compile estimate
        return built(key)

    programs = Programs("timed", slow_build, lambda key: None, max_cover_cost=4)
    batch8 = ("prefill", 8, 32, 128, 0)
    programs.lookup(batch8)
    lone = ("prefill", 1, 32, 128, 0)  # batch8 costs 8x: past the limit
    programs.ran(batch8, batch8, 0.001)  # ...but one call of it takes 1 ms against a 50 ms compile
    assert programs.lookup(lone) == (batch8, built(batch8))
    assert programs.stalls == 1 and programs.covered == 1
    programs.ran(batch8, batch8, 0.2)  # now a call of it takes longer than a compile: the lone batch stalls
    with caplog.at_level(logging.INFO, logger="legorl_jax.engine.programs"):
        assert programs.lookup(lone) == (lone, built(lone))
    assert programs.stalls == 2 and programs.covered == 1
    assert f"compiling in the caller {lone}: no compiled program covers it" in caplog.text
    # A larger program never measured falls back to the cost limit.
    unmeasured = ("prefill", 8, 64, 128, 0)
    programs.lookup(unmeasured)
    assert programs.lookup(("prefill", 1, 64, 128, 0))[0] == ("prefill", 1, 64, 128, 0)
    assert programs.stalls == 4


def test_a_failed_background_compile_surfaces_in_the_call_that_needs_the_key(caplog):
    def build(key):
        raise ValueError(f"cannot compile {key}")

    programs = Programs("failing", build, lambda key: None)
    key = ("prefill", 2, 16, 128, 0)
    with caplog.at_level(logging.ERROR, logger="legorl_jax.engine.programs"):
        programs.ran(key, ("prefill", 4, 16, 128, 0), 100.0)  # past the 1 s estimate: queued
        programs.wait()
    assert "background compile of ('prefill', 2, 16, 128, 0) failed" in caplog.text
    with pytest.raises(ValueError, match=r"cannot compile \('prefill', 2, 16, 128, 0\)"):
        programs.lookup(key)
    assert programs.stalls == 1


def test_programs_reject_a_cover_cost_limit_below_one():
    with pytest.raises(ValueError, match="max_cover_cost must be a number >= 1, got 0.5"):
        Programs("bad", built, lambda key: None, max_cover_cost=0.5)
