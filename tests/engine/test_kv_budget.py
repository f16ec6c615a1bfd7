"""The embedded engine's KV cache sized to a memory budget: an unasked context capped, prefix-cache slots
given up before running ones, an asked context never shortened, and a refusal naming the numbers when not
one slot fits."""

import pytest

from legorl_jax.engine import kv_budget
from legorl_jax.engine.jax_engine import JaxEngine
from legorl_jax.engine.kv_budget import GIB, KVBudgetError, kv_bytes_per_token, size_kv_cache
from legorl_jax.engine.serve import main as serve_main

BPT = 512  # bytes a token: 2 (K, V) x 2 layers x 2 kv heads x 16 head dim x 4 B


def size(**kw):
    args = dict(bytes_per_token=BPT, running=32, cache_slots=32, max_len=None, model_max_len=32768)
    return size_kv_cache(**(args | kw), source="test")


def test_bytes_per_token_counts_k_and_v_of_every_layer():
    assert kv_bytes_per_token(2, 2, 16, 4) == BPT
    assert kv_bytes_per_token(48, 4, 128, 2) == 96 * 1024  # Qwen3-30B-A3B in bf16


def test_everything_as_asked_when_it_fits_or_without_a_budget():
    for budget in (None, 64 * 32768 * BPT):
        sizing = size(budget=budget)
        assert (sizing.running, sizing.cache_slots, sizing.max_len, sizing.changed) == (32, 32, 32768, ())


def test_an_unasked_context_is_capped_to_what_the_budget_gives_every_slot():
    sizing = size(budget=64 * 10_000 * BPT)
    assert sizing.max_len == 9984  # 10,000 rounded down to a multiple of 128
    assert (sizing.running, sizing.cache_slots) == (32, 32)
    assert sizing.total_bytes <= sizing.budget_bytes
    assert "max_len capped from the model's 32768 to 9984" in sizing.describe()


def test_below_the_floor_prefix_cache_slots_go_before_running_ones():
    sizing = size(budget=40 * 4096 * BPT)  # a 4096 floor leaves room for 40 slots
    assert (sizing.max_len, sizing.running, sizing.cache_slots) == (4096, 32, 8)
    assert "prefix-cache slots 32 -> 8" in sizing.describe()
    sizing = size(budget=5 * 4096 * BPT)
    assert (sizing.max_len, sizing.running, sizing.cache_slots) == (4096, 5, 0)
    assert "running slots 32 -> 5" in sizing.describe()


def test_an_asked_context_is_never_shortened_only_slots_are_given_up():
    sizing = size(max_len=32768, budget=3 * 32768 * BPT)
    assert (sizing.max_len, sizing.running, sizing.cache_slots) == (32768, 3, 0)


def test_not_even_one_slot_is_refused_naming_the_length_the_need_and_the_budget():
    need = r"one slot of 32768 tokens needs 0\.02 GiB .*budget is 0\.01 GiB"
    with pytest.raises(KVBudgetError, match=need):
        size(max_len=32768, budget=GIB // 100)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(kv_gib=0), "kv_gib must be a number > 0, got 0"),
        (dict(kv_gib="2"), "kv_gib must be a number > 0, got '2'"),
        (dict(kv_gib=None, mem_fraction=1.5), r"mem_fraction must lie in \(0, 1\], got 1.5"),
    ],
)
def test_a_bad_budget_is_refused_naming_the_value(kw, message):
    with pytest.raises(ValueError, match=message):
        kv_budget.budget_bytes(**({"mem_fraction": None} | kw))


def test_a_fraction_of_the_hosts_free_memory_is_the_budget_on_cpu():
    budget, source = kv_budget.budget_bytes(kv_gib=None, mem_fraction=0.25)
    free = kv_budget.host_available_bytes()
    assert 0 < budget <= free and abs(budget - free / 4) < free * 0.05  # free memory moves a little
    assert source.startswith("0.25 of ") and "GiB available" in source


def test_the_engine_allocates_what_the_budget_gives(tmp_path, tiny_model_tool):
    spec = tiny_model_tool.TinyModelSpec(max_positions=32768)
    model = tiny_model_tool.make_tiny_model(tmp_path / "long", spec, seed=0)
    bpt = kv_bytes_per_token(spec.num_layers, spec.num_kv_heads, spec.head_dim, 4)
    engine = JaxEngine.from_dir(model, max_running=4, cache_slots=4, kv_gib=6 * 4096 * bpt / GIB)
    try:
        assert (engine.max_len, engine.max_running, engine.kv_sizing.cache_slots) == (4096, 4, 2)
        assert engine.runner.num_slots == 6
        assert engine.stats()["max_len"] == 4096
    finally:
        engine.close()


def test_the_server_refuses_a_cache_that_cannot_hold_one_slot_and_says_why(tmp_path, tiny_model_tool, capsys):
    model = tiny_model_tool.make_tiny_model(tmp_path / "m", tiny_model_tool.TinyModelSpec(max_positions=4096))
    code = serve_main(["--model", str(model), "--max-len", "4096", "--kv-gib", "0.0001", "--no-warmup"])
    assert code == 2
    err = capsys.readouterr().err
    assert "one slot of 4096 tokens needs" in err and "budget is 0.00 GiB (kv_gib 0.0001)" in err
