"""The SGLang-compatible HTTP server on the shared engine: fields, formats, control routes, and a JSON
400 naming the field and value for every malformed request."""

import asyncio
import base64

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer
from engine_reference import MAX_LEN

from legorl_jax.engine import SamplingParams
from legorl_jax.engine.serve import make_app, start_site
from legorl_jax.engine.wire import TRACESTATE_HEADER, routed_start_tracestate

PROMPT = [5, 17, 230, 901, 44, 12, 9]


@pytest.fixture
async def client(engine):
    async with TestClient(TestServer(make_app(engine))) as c:
        yield c


async def post(client, path, body=None, *, raw=None):
    resp = await client.post(path, json=body) if raw is None else await client.post(path, data=raw)
    return resp.status, await resp.json()


async def test_generate_answers_in_sglangs_format_with_what_the_engine_computes(client, engine):
    sampling = {"max_new_tokens": 10, "sampling_seed": 3, "temperature": 1.0, "ignore_eos": True}
    status, body = await post(client, "/generate", {
        "input_ids": PROMPT, "sampling_params": sampling, "return_logprob": True,
        "return_routed_experts": True, "rid": "http-1",
    })  # fmt: skip
    assert status == 200
    direct = await engine.generate(
        PROMPT, SamplingParams(max_new_tokens=10, seed=3, ignore_eos=True), return_routed_experts=True
    )
    meta = body["meta_info"]
    assert body["output_ids"] == direct.output_ids.tolist()
    assert body["text"] == engine.tokenizer.decode(direct.output_ids, skip_special_tokens=True)
    assert meta["id"] == "http-1" and meta["finish_reason"] == {"type": "length", "length": 10}
    assert meta["prompt_tokens"] == len(PROMPT) and meta["completion_tokens"] == 10
    assert meta["weight_version"] == engine.weight_version
    assert [e[1] for e in meta["output_token_logprobs"]] == body["output_ids"]
    assert all(e[2] is None for e in meta["output_token_logprobs"])
    np.testing.assert_allclose(
        [e[0] for e in meta["output_token_logprobs"]], direct.output_logprobs, atol=1e-6
    )
    routed = np.frombuffer(base64.b64decode(meta["routed_experts"]), dtype="<i4").reshape(-1, 2, 2)
    assert routed.shape[0] == len(PROMPT) + 10 - 1
    np.testing.assert_array_equal(routed, direct.routed_experts)
    assert "input_token_logprobs" in meta and meta["input_token_logprobs"] is None


async def test_text_prompts_are_tokenized_and_stop_strings_trimmed_unless_asked(client, engine):
    text = "def add(a, b):"
    ids = engine.tokenizer.encode(text)
    free = await engine.generate(ids, SamplingParams(temperature=0.0, max_new_tokens=12, ignore_eos=True))
    stop = engine.tokenizer.decode(free.output_ids[:6])[-2:]
    base = {
        "text": text,
        "sampling_params": {"temperature": 0, "max_new_tokens": 12, "ignore_eos": True, "stop": stop},
    }
    _, trimmed = await post(client, "/generate", base)
    assert trimmed["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert trimmed["output_ids"] == free.output_ids[: len(trimmed["output_ids"])].tolist()
    assert not trimmed["text"].endswith(stop)
    base["sampling_params"]["no_stop_trim"] = True
    _, kept = await post(client, "/generate", base)
    assert kept["text"].endswith(stop) and kept["text"].startswith(trimmed["text"])


@pytest.mark.parametrize("start", [0, 3])
async def test_input_token_logprobs_score_the_prompt_from_logprob_start_len(client, engine, start):
    _, body = await post(
        client,
        "/generate",
        {
            "input_ids": PROMPT,
            "sampling_params": {"max_new_tokens": 1},
            "return_logprob": True,
            "logprob_start_len": start,
        },
    )
    entries = body["meta_info"]["input_token_logprobs"]
    assert [e[1] for e in entries] == PROMPT[start:]
    expected = await engine.prompt_logprobs(PROMPT, start + 1)
    values = [e[0] for e in entries]
    assert values[0] is None  # as real SGLang 0.5.23: the first scored position is null whatever the start
    np.testing.assert_allclose(values[1:], expected, atol=1e-6)


async def test_status_routes_report_health_the_model_and_the_load(client, engine):
    assert (await client.get("/health")).status == 200
    info = await (await client.get("/get_model_info")).json()
    assert info["is_generation"] and info["context_length"] == MAX_LEN
    assert info["routing"] == {"num_layers": 2, "top_k": 2, "num_experts": 8}
    assert info["weight_version"] == engine.weight_version and info["model_path"] == engine.model_path
    load = await (await client.get("/get_server_info")).json()
    assert load["max_running"] == engine.max_running and load["prefill_buckets"] == [16, 32, 64]


async def test_update_weights_from_disk_swaps_the_weights_and_tags_results(
    client, engine, other_model_dir, engine_model_dir
):
    greedy = {
        "input_ids": PROMPT,
        "sampling_params": {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True},
    }
    _, before = await post(client, "/generate", greedy)
    status, reply = await post(
        client, "/update_weights_from_disk", {"model_path": str(other_model_dir), "weight_version": "srv-1"}
    )
    try:
        assert status == 200 and reply["success"] is True
        _, after = await post(client, "/generate", greedy)
        assert after["meta_info"]["weight_version"] == "srv-1" and after["output_ids"] != before["output_ids"]
    finally:
        status, reply = await post(client, "/update_weights_from_disk", {"model_path": str(engine_model_dir)})
    assert status == 200 and engine.weight_version == "srv-1"  # a null weight_version keeps the version
    _, again = await post(client, "/generate", greedy)
    assert again["output_ids"] == before["output_ids"]
    status, reply = await post(
        client, "/update_weights_from_disk", {"model_path": "/no/such/dir", "weight_version": "x"}
    )
    assert status == 400 and reply["success"] is False and "/no/such/dir" in reply["message"]


async def test_abort_pause_continue_and_flush_cache_control_requests_in_flight(client, engine):
    long = {
        "input_ids": PROMPT,
        "sampling_params": {"max_new_tokens": 50, "ignore_eos": True, "sampling_seed": 1},
    }
    assert (await client.post("/flush_cache")).status == 200
    task = asyncio.ensure_future(post(client, "/generate", {**long, "rid": "ctl-1"}))
    while "ctl-1" not in engine.scheduler.by_rid:
        await asyncio.sleep(0.002)
    status, paused = await post(client, "/pause_generation", {"mode": "in_place"})
    assert status == 200 and paused["status"] == "ok"
    busy = await client.post("/flush_cache")
    assert busy.status == 400 and "pending requests" in (await busy.json())["error"]["message"]
    assert (await post(client, "/continue_generation", {}))[0] == 200
    assert (await client.post("/abort_request", json={"rid": "ctl-1"})).status == 200
    _, body = await task
    assert body["meta_info"]["finish_reason"]["type"] == "abort" and len(body["output_ids"]) < 50

    task = asyncio.ensure_future(post(client, "/generate", {**long, "rid": "ctl-2"}))
    while "ctl-2" not in engine.scheduler.by_rid:
        await asyncio.sleep(0.002)
    assert (await client.post("/pause_generation")).status == 200  # SGLang's default mode: abort
    _, body = await task
    assert body["meta_info"]["finish_reason"]["type"] == "abort"
    await post(client, "/continue_generation", {})
    status, body = await post(
        client, "/generate", {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 2}}
    )
    assert status == 200 and len(body["output_ids"]) == 2


GOOD = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 2}}


def with_(**changes):
    body = {**GOOD, "sampling_params": dict(GOOD["sampling_params"])}
    for key, value in changes.items():
        if key.startswith("sp_"):
            body["sampling_params"][key[3:]] = value
        elif value is ...:
            body.pop(key)
        else:
            body[key] = value
    return body


@pytest.mark.parametrize(
    ("body", "field", "shows"),
    [
        ([1, 2], "body", "list"),
        (with_(input_ids=...), "input_ids", "exactly one"),
        (with_(text="hi"), "input_ids", "exactly one"),
        (with_(input_ids=[[1, 2], [3]]), "input_ids", "batched"),
        (with_(input_ids="abc"), "input_ids", "'abc'"),
        (with_(input_ids=[1, -3]), "input_ids", "-3"),
        (with_(input_ids=[1, 99999]), "input_ids", "99999"),
        (with_(input_ids=[1.5]), "input_ids", "1.5"),
        (with_(sampling_params=[1]), "sampling_params", "[1]"),
        (with_(sp_temperature=-1), "sampling_params.temperature", "-1"),
        (with_(sp_top_p=0), "sampling_params.top_p", "0"),
        (with_(sp_top_k=0), "sampling_params.top_k", "0"),
        (with_(sp_max_new_tokens="5"), "sampling_params.max_new_tokens", "'5'"),
        (with_(sp_sampling_seed=-1), "sampling_params.sampling_seed", "-1"),
        (with_(sp_stop=5), "sampling_params.stop", "5"),
        (with_(sp_temprature=0.5), "sampling_params.temprature", "0.5"),
        (with_(sp_n=2), "sampling_params.n", "2"),
        (with_(stream=True), "stream", "True"),
        (with_(input_id=[1]), "input_id", "[1]"),
        (with_(return_logprob="yes"), "return_logprob", "'yes'"),
        (with_(logprob_start_len=-2), "logprob_start_len", "-2"),
        (with_(return_logprob=True, logprob_start_len=7), "logprob_start_len", "7"),
        (with_(routed_experts_start_len=-1), "routed_experts_start_len", "-1"),
        (with_(routed_experts_start_len=8), "routed_experts_start_len", "8"),
        (with_(rid=5), "rid", "5"),
        (with_(input_ids=..., text=5), "text", "5"),
        (with_(return_routed_experts="yes"), "return_routed_experts", "'yes'"),
        (with_(sp_top_p=1.5), "sampling_params.top_p", "1.5"),
        (with_(sp_min_p=2), "sampling_params.min_p", "2"),
        (with_(sp_stop_token_ids=[3, -1]), "sampling_params.stop_token_ids", "-1"),
        (with_(sp_ignore_eos="no"), "sampling_params.ignore_eos", "'no'"),
        (with_(sp_temperature="hot"), "sampling_params.temperature", "'hot'"),
    ],
)
async def test_a_malformed_generate_is_a_400_naming_the_field_and_value(client, body, field, shows):
    resp = await client.post("/generate", json=body)
    text = await resp.text()
    assert resp.status == 400 and "Traceback" not in text
    error = (await resp.json())["error"]
    assert error["field"] == field and shows in error["message"]


async def test_a_prompt_longer_than_the_context_is_a_400_that_says_the_limit(client):
    status, body = await post(client, "/generate", with_(input_ids=list(range(MAX_LEN))))
    assert status == 400 and body["error"]["type"] == "context_overflow"
    assert f"max_len={MAX_LEN}" in body["error"]["message"] and str(MAX_LEN) in body["error"]["message"]


@pytest.mark.parametrize(
    ("path", "body", "status", "field"),
    [
        ("/generate", b"{not json", 400, "body"),
        ("/update_weights_from_disk", b"{}", 400, "model_path"),
        ("/abort_request", b"{}", 400, "rid"),
        ("/pause_generation", b'{"mode": "retract"}', 400, "mode"),
        ("/pause_generation", b"[1]", 400, "body"),
        ("/update_weights_from_disk", b'{"model_path": "/m", "weight_version": ""}', 400, "weight_version"),
        (
            "/update_weights_from_disk",
            b'{"model_path": "/m", "abort_all_requests": 1}',
            400,
            "abort_all_requests",
        ),  # fmt: skip
        ("/abort_request", b'{"abort_all": "yes"}', 400, "abort_all"),
        ("/abort_request", b'{"rid": 7}', 400, "rid"),
        ("/no_such_route", b"{}", 404, None),
    ],
)
async def test_control_routes_answer_json_errors(client, path, body, status, field):
    resp = await client.post(path, data=body)
    assert resp.status == status and "Traceback" not in await resp.text()
    assert (await resp.json())["error"]["field"] == field
    assert (await client.get("/generate")).status == 405


async def test_a_request_id_already_in_flight_is_a_400_naming_rid(client, engine):
    long = {"input_ids": PROMPT, "rid": "dup", "sampling_params": {"max_new_tokens": 50, "ignore_eos": True}}
    first = asyncio.ensure_future(post(client, "/generate", long))
    while "dup" not in engine.scheduler.by_rid:
        await asyncio.sleep(0.002)
    try:
        status, body = await post(client, "/generate", long)
        assert status == 400 and body["error"]["field"] == "rid"
        assert "'dup' is already in flight" in body["error"]["message"]
    finally:
        await engine.abort("dup")
    assert (await first)[0] == 200


async def test_a_client_that_hangs_up_aborts_its_request(engine):
    import socket

    import aiohttp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    runner = await start_site(engine, "127.0.0.1", port)  # as `python -m legorl_jax.engine.serve` serves
    try:
        body = {
            "input_ids": PROMPT,
            "rid": "hang-up",
            "sampling_params": {"max_new_tokens": 50, "ignore_eos": True},
        }
        async with aiohttp.ClientSession() as session:
            post = asyncio.ensure_future(
                session.post(
                    f"http://127.0.0.1:{port}/generate", json=body, timeout=aiohttp.ClientTimeout(total=1.0)
                )
            )
            while "hang-up" not in engine.scheduler.by_rid:
                await asyncio.sleep(0.002)
            await engine.pause("in_place")  # frozen in its slot until the client gives up
            try:
                with pytest.raises(TimeoutError):
                    await post
                for _ in range(1000):
                    if "hang-up" not in engine.scheduler.by_rid:
                        break
                    await asyncio.sleep(0.01)
                assert "hang-up" not in engine.scheduler.by_rid  # aborted while still paused
            finally:
                await engine.resume()
    finally:
        await runner.cleanup()


def test_the_command_line_refuses_tensor_parallelism(capsys):
    from legorl_jax.engine.serve import main

    assert main(["--model", "/unused", "--tp", "2"]) == 2
    assert "--tp must be 1" in capsys.readouterr().err


async def test_top_logprobs_of_prompt_positions_are_refused_naming_the_field(client):
    status, body = await post(client, "/generate", {
        "input_ids": PROMPT, "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 2,
    })  # fmt: skip
    assert status == 400 and body["error"]["field"] == "top_logprobs_num"
    assert "logprob_start_len=0" in body["error"]["message"]


async def test_return_routed_experts_always_sends_the_whole_sequences_routing_unasked(client, engine):
    sampling = {"max_new_tokens": 6, "sampling_seed": 4, "ignore_eos": True}
    direct = await engine.generate(
        PROMPT, SamplingParams(max_new_tokens=6, seed=4, ignore_eos=True), return_routed_experts=True
    )

    def rows(meta):
        return np.frombuffer(base64.b64decode(meta["routed_experts"]), dtype="<i4").reshape(-1, 2, 2)

    # The default (SGLang's behaviour): routing only when asked.
    status, plain = await post(client, "/generate", {"input_ids": PROMPT, "sampling_params": sampling})
    assert status == 200 and "routed_experts" not in plain["meta_info"]
    assert (await (await client.get("/get_server_info")).json())["return_routed_experts"] == "request"
    async with TestClient(TestServer(make_app(engine, return_routed_experts="always"))) as always:
        info = await (await always.get("/get_server_info")).json()
        assert info["return_routed_experts"] == "always"
        # Unasked (as behind sglang-router, which drops the fields): every row of the sequence, from 0.
        status, body = await post(always, "/generate", {"input_ids": PROMPT, "sampling_params": sampling})
        assert status == 200 and body["meta_info"]["routed_experts_start_len"] == 0
        assert body["output_ids"] == direct.output_ids.tolist()
        np.testing.assert_array_equal(rows(body["meta_info"]), direct.routed_experts)
        # Asked, a request still gets what it asked for.
        status, body = await post(always, "/generate", {
            "input_ids": PROMPT, "sampling_params": sampling, "return_routed_experts": True,
            "routed_experts_start_len": 3,
        })  # fmt: skip
        assert status == 200 and body["meta_info"]["routed_experts_start_len"] == 3
        np.testing.assert_array_equal(rows(body["meta_info"]), direct.routed_experts[3:])
    with pytest.raises(ValueError, match="'sometimes'"):
        make_app(engine, return_routed_experts="sometimes")


async def test_unasked_routing_starts_where_our_tracestate_member_says_and_a_bad_one_is_refused_naming_it(
    engine,
):
    sampling = {"max_new_tokens": 6, "sampling_seed": 4, "ignore_eos": True}
    direct = await engine.generate(
        PROMPT, SamplingParams(max_new_tokens=6, seed=4, ignore_eos=True), return_routed_experts=True
    )
    unasked = {"input_ids": PROMPT, "sampling_params": sampling}  # as sglang-router forwards it: no fields

    async def send(server, body, tracestate):
        headers = {TRACESTATE_HEADER: tracestate} if tracestate is not None else {}
        resp = await server.post("/generate", json=body, headers=headers)
        return resp.status, await resp.json()

    async with TestClient(TestServer(make_app(engine, return_routed_experts="always"))) as always:
        ours = routed_start_tracestate(len(PROMPT))
        cases = [(None, 0), ("congo=t61rcWkgMzE", 0), (routed_start_tracestate(4), 4)]
        for tracestate, start in [*cases, (f"congo=t61rcWkgMzE, {ours}", len(PROMPT))]:
            status, body = await send(always, unasked, tracestate)
            meta = body["meta_info"]
            assert status == 200 and meta["routed_experts_start_len"] == start, tracestate
            rows = np.frombuffer(base64.b64decode(meta["routed_experts"]), dtype="<i4").reshape(-1, 2, 2)
            np.testing.assert_array_equal(rows, direct.routed_experts[start:])
        for bad in ("-1", "two", str(len(PROMPT) + 1), "1e3"):
            member = f"legorl=routed_experts_start:{bad}"
            status, body = await send(always, unasked, f"congo=t61rcWkgMzE,{member}")
            error = body["error"]
            assert status == 400 and error["field"] == TRACESTATE_HEADER, error
            assert repr(member) in error["message"] and f"prompt_tokens={len(PROMPT)}" in error["message"]
        status, body = await send(always, unasked, "legorl=start:3")
        assert status == 400 and "'legorl=start:3'" in body["error"]["message"]
        # A request that asks keeps its own fields: the member (our client sends both) changes nothing.
        asked = {**unasked, "return_routed_experts": True, "routed_experts_start_len": 2}
        status, body = await send(always, asked, routed_start_tracestate(5))
        assert status == 200 and body["meta_info"]["routed_experts_start_len"] == 2
