"""The host-side scheduler fed token streams directly: slots, stop rules, routing rows, versions, aborts."""

import numpy as np
import pytest

from legorl_jax.engine.base import BadRequestError, SamplingParams
from legorl_jax.engine.scheduler import Request, Scheduler

L, K, E = 2, 2, 8


def make(num_slots=2, max_len=32, **kw):
    return Scheduler(num_slots, max_len, routing=(L, K, E), **kw)


def request(rid, prompt_len=4, results=None, routed_start=0, **sampling):
    sampling.setdefault("max_new_tokens", 8)
    return Request(
        rid=rid,
        prompt=np.arange(prompt_len, dtype=np.int32),
        sampling=SamplingParams(**sampling),
        seed=0,
        return_routed_experts=True,
        routed_start=routed_start,
        on_done=(results.append if results is not None else (lambda g: None)),
    )


def routing_rows(n, first):
    """Distinct rows: row i holds (first + i) % E, so a misplaced row shows."""
    return np.stack([np.full((L, K), (first + i) % E, np.int32) for i in range(n)])


def prefill(s, req, token, logprob=-1.0):
    # Rows of the positions the prefill ran: from the cached prefix's end on.
    s.on_prefill(req, token, logprob, routing_rows(req.prompt_len - req.cached_len, req.cached_len))


def step(s, tokens):
    """One decode step in which slot i samples tokens[i] (None: idle)."""
    _, positions, slots, _ = s.decode_inputs()
    routed = np.stack([routing_rows(1, int(p))[0] for p in positions]) if len(positions) else None
    sampled = np.array([tokens[slot] for slot in slots], np.int32)
    s.on_decode(sampled, np.full(len(sampled), -0.5, np.float32), routed)


def test_requests_enter_free_slots_in_order_and_a_finished_slot_is_reused():
    s, out = make(num_slots=2), []
    reqs = [request(f"r{i}", results=out, max_new_tokens=2) for i in range(3)]
    for r in reqs:
        s.submit(r)
    assert [r.rid for r in s.admit()[0]] == ["r0", "r1"] and reqs[2].slot is None
    prefill(s, reqs[0], 10)
    prefill(s, reqs[1], 11)
    step(s, [12, 13])  # both reach max_new_tokens=2
    assert [g.output_ids.tolist() for g in out] == [[10, 12], [11, 13]]
    assert [r.rid for r in s.admit()[0]] == ["r2"] and reqs[2].slot == 0


def test_routing_rows_cover_prompt_and_forwarded_outputs_from_the_start_row():
    s, out = make(), []
    req = request("a", prompt_len=5, results=out, max_new_tokens=3, routed_start=2)
    s.submit(req)
    s.admit()
    prefill(s, req, 7)
    step(s, [8, None])
    step(s, [9, None])
    gen = out[0]
    assert gen.routed_experts.dtype == np.uint8 and gen.routed_experts_start == 2
    # rows 2..6 of P + N - 1 = 7: prompt rows 2..4, then the rows of positions 5 and 6
    assert gen.routed_experts.shape == (5, L, K)
    np.testing.assert_array_equal(gen.routed_experts[:, 0, 0], [2, 3, 4, 5, 6])


def test_routing_is_stored_as_int16_beyond_256_experts():
    s = Scheduler(1, 16, routing=(L, K, 300))
    out = []
    req = request("a", results=out, max_new_tokens=1)
    s.submit(req)
    s.admit()
    prefill(s, req, 3)
    assert out[0].routed_experts.dtype == np.int16


def test_zero_new_tokens_returns_the_prompt_rows_but_the_last():
    s, out = make(), []
    req = request("a", prompt_len=5, results=out, max_new_tokens=0)
    s.submit(req)
    s.admit()
    prefill(s, req, 7)
    assert out[0].finish_reason == "length" and len(out[0].output_ids) == 0
    assert out[0].routed_experts.shape == (4, L, K)


def test_eos_stops_unless_ignore_eos_while_stop_token_ids_always_stop():
    s, out = make(eos_ids=(99,)), []
    plain = request("plain", results=out)
    ignoring = request("ignoring", results=out, ignore_eos=True, stop_token_ids=[42])
    for r in (plain, ignoring):
        s.submit(r)
    s.admit()
    prefill(s, plain, 5)
    prefill(s, ignoring, 5)
    step(s, [99, 99])
    assert (
        out[0].finish_reason == "stop" and out[0].matched_stop == 99 and out[0].output_ids.tolist() == [5, 99]
    )
    step(s, [None, 42])
    assert out[1].output_ids.tolist() == [5, 99, 42] and out[1].matched_stop == 42


def test_a_stop_string_finishes_on_the_token_completing_it():
    s, out = make(detokenize=lambda ids: "".join("abcdefghij"[i % 10] for i in ids)), []
    req = request("a", results=out, stop=["cde"], max_new_tokens=20)
    s.submit(req)
    s.admit()
    prefill(s, req, 0)  # "a"
    for t in (1, 2, 3):  # b c d
        step(s, [t, None])
    assert not out
    step(s, [4, None])  # e completes "cde"
    assert out[0].finish_reason == "stop" and out[0].matched_stop == "cde"
    assert out[0].output_ids.tolist() == [0, 1, 2, 3, 4]


def test_a_full_context_finishes_with_length():
    s, out = make(max_len=6), []
    req = request("a", prompt_len=4, results=out, max_new_tokens=100)
    s.submit(req)
    s.admit()
    prefill(s, req, 1)
    step(s, [2, None])
    assert out[0].finish_reason == "length" and len(out[0].output_ids) == 2  # P + N = max_len


def test_tokens_record_the_weight_version_they_were_sampled_under():
    s, out = make(), []
    req = request("a", results=out, max_new_tokens=3)
    s.submit(req)
    s.admit()
    prefill(s, req, 1)
    s.weight_version = "v2"
    step(s, [2, None])
    step(s, [3, None])
    assert out[0].token_weight_versions == ("default", "v2", "v2") and out[0].weight_version == "v2"


def test_aborts_finish_waiting_and_running_requests_and_ignore_unknown_ids():
    s, out = make(num_slots=1), []
    running, waiting = request("run", results=out), request("wait", results=out)
    s.submit(running)
    s.submit(waiting)
    s.admit()
    prefill(s, running, 3)
    assert s.abort("wait") and s.abort("run") and not s.abort("nobody")
    assert [(g.finish_reason, len(g.output_ids)) for g in out] == [("abort", 0), ("abort", 1)]
    assert out[0].routed_experts is None and out[1].routed_experts.shape == (4, L, K)
    assert s.idle


def test_a_duplicate_rid_and_stop_strings_without_a_tokenizer_are_rejected():
    s = make()
    s.submit(request("x"))
    with pytest.raises(BadRequestError, match="'x' is already in flight") as err:
        s.submit(request("x"))
    assert err.value.field == "rid"
    with pytest.raises(BadRequestError, match="needs a tokenizer") as err:
        s.submit(request("y", stop=["\n"]))
    assert err.value.field == "sampling_params.stop"


def test_fail_all_hands_every_request_in_flight_the_error_and_frees_the_slots():
    s, errors = make(num_slots=1), []
    reqs = [request("run"), request("wait")]
    for r in reqs:
        r.on_error = lambda exc, rid=r.rid: errors.append((rid, str(exc)))
        s.submit(r)
    s.admit()
    prefill(s, reqs[0], 3)
    s.fail_all(RuntimeError("device lost"))
    assert sorted(errors) == [("run", "device lost"), ("wait", "device lost")]
    assert s.idle and s.slots == [None]


# ----------------------------------------------------------------------------------------------------
# the prefix cache's slot decisions


def cached_scheduler():
    from legorl_jax.engine.prefix_cache import PrefixCache

    return Scheduler(2, 64, routing=(L, K, E), cache=PrefixCache(2))


def finish_one(s, prompt, outputs):
    """Runs a request with `prompt` to completion with the given sampled tokens; returns its slot."""
    req = request("done", max_new_tokens=len(outputs))
    req.prompt = np.asarray(prompt, np.int32)
    s.submit(req)
    s.admit()
    slot = req.slot
    prefill(s, req, outputs[0])
    for token in outputs[1:]:
        step(s, {slot: token})
    return slot


def test_a_request_extending_a_whole_entry_takes_its_slot_and_one_sharing_part_of_it_gets_a_copy():
    s = cached_scheduler()
    slot = finish_one(s, [0, 1, 2, 3], [10, 11])  # resident: 0 1 2 3 10 (11 was never forwarded)
    sharer, extender = request("sharer"), request("extender")
    sharer.prompt = np.array([0, 1, 2, 99], np.int32)
    extender.prompt = np.array([0, 1, 2, 3, 10, 11, 20], np.int32)
    s.submit(sharer)
    s.submit(extender)
    admitted, copies = s.admit()
    assert admitted == [sharer, extender]
    assert extender.slot == slot and extender.cached_len == 5  # moved: no copy
    assert sharer.slot != slot and copies == [(slot, sharer.slot)] and sharer.cached_len == 3
    assert slot not in s.cache.by_slot  # the entry went with the extender
    # The cached rows' routing is the one recorded when they were computed (row i holds i % E).
    np.testing.assert_array_equal(extender.routing[0][:, 0, 0], [0, 1, 2, 3, 4])


def test_a_request_that_saw_a_weight_update_is_not_cached_and_the_update_empties_the_cache():
    s = cached_scheduler()
    finish_one(s, [0, 1, 2, 3], [10, 11])
    assert len(s.cache.by_slot) == 1
    req = request("midway", max_new_tokens=2)
    s.submit(req)
    s.admit()
    prefill(s, req, 5)
    s.on_weights("v2")
    assert not s.cache.by_slot
    step(s, {req.slot: 6})  # finishes under the new weights with K/V of both
    assert not s.cache.by_slot and s.idle
