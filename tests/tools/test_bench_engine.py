"""tools/bench_engine.py's vLLM peer: its thread-binding environment and the checks every reply passes."""

import importlib.util
import math
import pathlib
import types

import numpy as np
import pytest


@pytest.fixture(scope="module")
def bench():
    path = pathlib.Path(__file__).parents[2] / "tools" / "bench_engine.py"
    spec = importlib.util.spec_from_file_location("bench_engine", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_vllm_env_binds_every_core_only_when_asked_and_sets_the_kv_space_given(bench, monkeypatch):
    monkeypatch.setattr(bench.os, "cpu_count", lambda: 4)
    assert bench.vllm_env("default", None) == {}
    assert bench.vllm_env("default", 1.5) == {"VLLM_CPU_KVCACHE_SPACE": "1.5"}
    assert bench.vllm_env("all", 2) == {
        "VLLM_CPU_KVCACHE_SPACE": "2",
        "VLLM_CPU_OMP_THREADS_BIND": "0-3",
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
    }
    with pytest.raises(ValueError, match="'half'"):
        bench.vllm_env("half", None)


def choice(ids, logprobs):
    return {"token_ids": ids, "logprobs": {"token_logprobs": logprobs}}


def test_a_vllm_reply_counts_only_with_exactly_the_asked_tokens_and_finite_logprobs(bench):
    assert bench.check_vllm_choice(choice([5, 6, 7], [-1.0, -2.5, -0.1]), 3) == 3
    with pytest.raises(SystemExit, match="returned 2 token ids, asked 3"):
        bench.check_vllm_choice(choice([5, 6], [-1.0, -2.5]), 3)
    with pytest.raises(SystemExit, match="returned None token ids"):
        bench.check_vllm_choice({"logprobs": {"token_logprobs": [-1.0]}}, 1)
    with pytest.raises(SystemExit, match="not 2 finite numbers"):
        bench.check_vllm_choice(choice([5, 6], [-1.0, -math.inf]), 2)
    with pytest.raises(SystemExit, match="not 2 finite numbers"):
        bench.check_vllm_choice(choice([5, 6], [-1.0, None]), 2)
    with pytest.raises(SystemExit, match="not 1 finite numbers"):
        bench.check_vllm_choice({"token_ids": [5], "logprobs": None}, 1)


def test_one_of_our_generations_counts_only_with_exactly_the_asked_tokens_and_finite_logprobs(bench):
    def gen(ids, logprobs):
        return types.SimpleNamespace(output_ids=np.array(ids), output_logprobs=np.array(logprobs, np.float32))

    assert bench.check_ours(gen([1, 2], [-0.5, -3.0]), 2) == 2
    with pytest.raises(SystemExit, match="returned 1 tokens, asked 2"):
        bench.check_ours(gen([1], [-0.5]), 2)
    with pytest.raises(SystemExit, match="not 2 finite numbers"):
        bench.check_ours(gen([1, 2], [-0.5, np.nan]), 2)
