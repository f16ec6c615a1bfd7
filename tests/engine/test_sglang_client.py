"""`SGLangEngine` against our server (same results as the engine in process) and against small fake
servers standing in for real SGLang's replies and for broken networks (the outside boundary)."""

import asyncio
import base64
import json

import aiohttp
import numpy as np
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from legorl_jax.config import EngineConfig
from legorl_jax.engine import (
    BadRequestError,
    ContextOverflowError,
    Engine,
    EngineError,
    EngineTimeoutError,
    EngineUnavailableError,
    SamplingParams,
    open_engine,
)
from legorl_jax.engine.serve import make_app
from legorl_jax.engine.sglang_client import SGLangEngine
from legorl_jax.engine.wire import generation_from_json, generation_json
from legorl_jax.types import Generation

PROMPT = [5, 17, 230, 901, 44, 12, 9]


@pytest.fixture
async def ours(engine):
    async with TestServer(make_app(engine)) as server:
        async with SGLangEngine(str(server.make_url("")), retries=0) as client:
            yield client


async def test_the_client_returns_what_the_engine_returns_in_process(ours, engine):
    assert isinstance(ours, Engine)
    sampling = SamplingParams(max_new_tokens=12, seed=21, temperature=0.8, top_p=0.95, ignore_eos=True)
    remote = await ours.generate(
        PROMPT, sampling, return_routed_experts=True, routed_experts_start_len=2, rid="c-1"
    )
    local = await engine.generate(PROMPT, sampling, return_routed_experts=True, routed_experts_start_len=2)
    np.testing.assert_array_equal(remote.output_ids, local.output_ids)
    np.testing.assert_allclose(remote.output_logprobs, local.output_logprobs, atol=1e-6)
    assert remote.routed_experts.dtype == np.uint8 and remote.routed_experts_start == 2
    np.testing.assert_array_equal(remote.routed_experts, local.routed_experts)
    assert (remote.finish_reason, remote.weight_version, remote.prompt_tokens) == (
        "length",
        engine.weight_version,
        len(PROMPT),
    )
    lp = await ours.prompt_logprobs(PROMPT, 2)
    np.testing.assert_allclose(lp, await engine.prompt_logprobs(PROMPT, 2), atol=1e-6)
    assert await ours.health()


async def test_server_rejections_become_clear_exceptions(ours):
    with pytest.raises(ContextOverflowError, match="max_len=64"):
        await ours.generate(list(range(64)), SamplingParams())
    with pytest.raises(BadRequestError, match="99999") as err:
        await ours.generate([1, 99999], SamplingParams())
    assert err.value.field == "input_ids"
    with pytest.raises(TypeError, match="save_hf"):
        await ours.update_weights({"params": 1}, "v")
    with pytest.raises(BadRequestError, match="/no/such/dir"):
        await ours.update_weights("/no/such/dir", "v")


async def test_weight_updates_and_aborts_go_through_the_server(
    ours, engine, other_model_dir, engine_model_dir
):
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6, ignore_eos=True)
    before = await ours.generate(PROMPT, greedy)
    await ours.update_weights(str(other_model_dir), "cli-1")
    try:
        after = await ours.generate(PROMPT, greedy)
        assert after.weight_version == "cli-1" and not np.array_equal(after.output_ids, before.output_ids)
    finally:
        await ours.update_weights(str(engine_model_dir), "cli-2")
    task = asyncio.ensure_future(
        ours.generate(PROMPT, SamplingParams(max_new_tokens=50, ignore_eos=True, seed=1), rid="c-abort")
    )
    while "c-abort" not in engine.scheduler.by_rid:
        await asyncio.sleep(0.002)
    await ours.abort("c-abort")
    gen = await task
    assert gen.finish_reason == "abort" and len(gen.output_ids) < 50


async def test_a_weight_update_mid_flight_reports_each_tokens_version_through_the_server(
    ours, engine, other_model_dir, engine_model_dir
):
    old = engine.weight_version
    sampling = SamplingParams(max_new_tokens=50, ignore_eos=True, seed=3)
    task = asyncio.ensure_future(ours.generate(PROMPT, sampling, rid="c-mid"))
    while len(getattr(engine.scheduler.by_rid.get("c-mid"), "output_ids", ())) < 1:
        await asyncio.sleep(0.002)
    await ours.pause("in_place")  # frozen in its slot, KV kept, while the new weights load
    try:
        switch = len(engine.scheduler.by_rid["c-mid"].output_ids)
        await ours.update_weights(str(other_model_dir), "cli-mid")
        assert ours.old_prefixes  # SGLang keeps its cache when requests hold in place
        await ours.resume()
        gen = await task
        async with asyncio.timeout(30):  # the client's flush once the server is idle clears it
            while ours.old_prefixes:
                await asyncio.sleep(0.05)
    finally:
        await ours.resume()
        await ours.update_weights(str(engine_model_dir), "cli-mid-restored")
    assert gen.finish_reason == "length" and gen.weight_version == "cli-mid"
    assert gen.token_weight_versions == (old,) * switch + ("cli-mid",) * (50 - switch)


async def test_connection_refused_is_retried_with_backoff_then_unavailable():
    client = SGLangEngine("http://127.0.0.1:9", retries=2, backoff_s=0.05)
    started = asyncio.get_running_loop().time()
    with pytest.raises(EngineUnavailableError, match="after 3 attempts"):
        await client.generate(PROMPT, SamplingParams())
    assert asyncio.get_running_loop().time() - started >= 0.05 + 0.1
    assert not await client.health()
    await client.close()


# ----------------------------------------------------------------------------------------------------
# fake servers: what real SGLang sends, and networks that fail


class Fake:
    """A tiny HTTP server whose /generate behaviour the test chooses; records every request."""

    def __init__(self, generate):
        self.seen: list[tuple[str, dict]] = []
        self.app = web.Application()
        self.app.router.add_post("/generate", self._record(generate))
        self.app.router.add_post("/abort_request", self._record(lambda req, body: web.Response()))
        self.app.router.add_get(
            "/get_model_info", self._record(lambda req, body: web.json_response(self.info))
        )
        self.info = {}

    def _record(self, handler):
        async def wrapped(request):
            body = await request.json() if request.can_read_body else {}
            self.seen.append((request.path, body))
            result = handler(request, body)
            return await result if asyncio.iscoroutine(result) else result

        return wrapped

    def paths(self):
        return [p for p, _ in self.seen]


async def test_a_real_sglang_reply_decodes_with_the_layout_from_the_models_config(tiny_moe_dir):
    routed = np.arange(4 * 2 * 2, dtype="<i4").reshape(4, 2, 2) % 8
    reply = {
        "text": "hi",
        "output_ids": [11, 2],
        "meta_info": {
            "id": "r",
            "finish_reason": {"type": "stop", "matched": 2},
            "prompt_tokens": 3,
            "completion_tokens": 2,
            "cached_tokens": 0,
            "weight_version": "7",
            "e2e_latency": 0.1,
            "output_token_logprobs": [[-0.5, 11, None], [-1.25, 2, None]],
            "routed_experts": base64.b64encode(routed.tobytes()).decode(),
        },
    }
    fake = Fake(lambda req, body: web.json_response(reply))
    fake.info = {"model_path": str(tiny_moe_dir), "is_generation": True}  # SGLang reports no routing
    async with TestServer(fake.app) as server, SGLangEngine(str(server.make_url(""))) as client:
        gen = await client.generate(
            [1, 2, 3], SamplingParams(max_new_tokens=4), return_routed_experts=True, rid="r"
        )
    sent = fake.seen[-1][1]
    assert sent["input_ids"] == [1, 2, 3] and sent["return_logprob"] and sent["return_routed_experts"]
    assert sent["sampling_params"]["max_new_tokens"] == 4 and sent["rid"] == "r"
    assert gen.output_ids.tolist() == [11, 2] and gen.output_logprobs.tolist() == [-0.5, -1.25]
    assert (gen.finish_reason, gen.matched_stop, gen.weight_version) == ("stop", 2, "7")
    assert gen.routed_experts.dtype == np.uint8
    np.testing.assert_array_equal(gen.routed_experts, routed)


async def test_a_model_mixing_dense_and_moe_layers_is_refused_on_real_sglang(engine_model_dir):
    """SGLang 0.5.23 builds every Qwen3-MoE layer sparse: the engine tests' model (layer 1 dense) would be
    served as another model, so the client refuses to read its routing, naming the dense layer."""
    fake = Fake(lambda req, body: web.json_response({}))
    fake.info = {"model_path": str(engine_model_dir), "is_generation": True}  # SGLang reports no routing
    async with TestServer(fake.app) as server, SGLangEngine(str(server.make_url(""))) as client:
        with pytest.raises(EngineError, match=r"mixes dense and MoE layers \(dense: \[1\]"):
            await client.generate([1, 2, 3], SamplingParams(max_new_tokens=2), return_routed_experts=True)
    assert "/generate" not in fake.paths()


async def test_sglangs_weight_version_spans_become_each_tokens_version():
    """SGLang 0.5.23 reports an update that landed mid-request as `meta_info.weight_versions` spans (its
    `add_weight_versions_to_meta_info`), without our `stale_kv_tokens`: the tokens after the first span ran
    over the old version's K/V (only an in-place update leaves a request running across versions)."""
    meta = {
        "id": "r",
        "finish_reason": {"type": "length", "length": 5},
        "prompt_tokens": 2,
        "completion_tokens": 5,
        "weight_version": "v2",
        "output_token_logprobs": [[-0.5, t, None] for t in (11, 12, 13, 14, 15)],
        "weight_versions": [{"version": "v1", "start": 0, "end": 2}, {"version": "v2", "start": 2, "end": 5}],
    }
    fake = Fake(
        lambda req, body: web.json_response(
            {"text": "", "output_ids": [11, 12, 13, 14, 15], "meta_info": meta}
        )
    )
    sampling = SamplingParams(max_new_tokens=5)
    async with TestServer(fake.app) as server, SGLangEngine(str(server.make_url("")), retries=0) as client:
        gen = await client.generate([1, 2], sampling)
        assert gen.token_weight_versions == ("v1", "v1", "v2", "v2", "v2") and gen.weight_version == "v2"
        assert gen.token_stale_kv.tolist() == [False, False, True, True, True]  # those after the first span
        meta["weight_versions"] = [{"version": "v2", "start": 0, "end": 5}]  # one version: nothing to tag
        gen = await client.generate([1, 2], sampling)
        assert gen.token_weight_versions is None and gen.stale_kv_tokens == 0
        meta["weight_versions"] = [
            {"version": "v1", "start": 0, "end": 2},
            {"version": "v2", "start": 3, "end": 5},
        ]
        with pytest.raises(EngineError, match=r"weight_versions must be .* covering output tokens \[0, 5\)"):
            await client.generate([1, 2], sampling)
        del meta["weight_versions"]
        meta["stale_kv_tokens"] = 6  # our server's count, of more tokens than there are
        with pytest.raises(EngineError, match=r"stale_kv_tokens must be an int in \[0, 5\] .*, got 6"):
            await client.generate([1, 2], sampling)
        meta["stale_kv_tokens"] = 2  # of the last output tokens
        gen = await client.generate([1, 2], sampling)
        assert gen.token_stale_kv.tolist() == [False, False, False, True, True]


def test_our_servers_stale_kv_count_names_the_last_tokens_and_other_flags_are_refused_before_sending():
    def reply(stale):
        ids, lps = np.asarray([11, 12, 13, 14], np.int32), np.full(4, -0.5, np.float32)
        versions = ("v1", "v2", "v2", "v2")
        gen = Generation(
            ids, lps, None, "length", "v2", 2, token_weight_versions=versions, token_stale_kv=stale
        )
        body = generation_json(gen, rid="r", text="", return_logprob=True, input_logprobs=None,
                               return_routed_experts=False, e2e_latency=0.0)  # fmt: skip
        return body, gen

    body, sent = reply(np.asarray([False, True, True, True]))  # the scheduler's in_place: after the update
    assert body["meta_info"]["stale_kv_tokens"] == 3
    got = generation_from_json(
        body, prompt_tokens=2, routing=None, routed_experts_start_len=0, return_routed_experts=False
    )
    np.testing.assert_array_equal(got.token_stale_kv, sent.token_stale_kv)
    with pytest.raises(ValueError, match=r"token_stale_kv flags tokens \[1\] of 4: the wire carries a count"):
        reply(np.asarray([False, True, False, False]))


async def test_routing_rows_from_before_the_asked_start_are_cut_to_it():
    """Our server under `--return-routed-experts always` behind a router: the request's fields were
    dropped, the reply carries every row from 0 and says so; the client keeps [start, P + N - 1)."""
    routed = np.arange(4 * 2 * 2, dtype="<i4").reshape(4, 2, 2) % 8
    meta = {
        "id": "r",
        "finish_reason": {"type": "length", "length": 2},
        "prompt_tokens": 3,
        "completion_tokens": 2,
        "weight_version": "7",
        "output_token_logprobs": [[-0.5, 11, None], [-1.25, 12, None]],
        "routed_experts": base64.b64encode(routed.tobytes()).decode(),
        "routed_experts_start_len": 0,
    }
    fake = Fake(lambda req, body: web.json_response({"text": "", "output_ids": [11, 12], "meta_info": meta}))
    fake.info = {"routing": {"num_layers": 2, "top_k": 2, "num_experts": 8}}  # ours: the MoE layers' rows
    sampling = SamplingParams(max_new_tokens=2)
    async with TestServer(fake.app) as server, SGLangEngine(str(server.make_url(""))) as client:
        for start in (0, 2, 3):
            gen = await client.generate(
                [1, 2, 3], sampling, return_routed_experts=True, routed_experts_start_len=start
            )
            assert gen.routed_experts_start == start
            np.testing.assert_array_equal(gen.routed_experts, routed[start:])
        meta["routed_experts_start_len"] = 3  # rows that start after the asked start cannot serve it
        with pytest.raises(EngineError, match=r"routed_experts_start_len=2\] \(the asked start\), got 3"):
            await client.generate([1, 2, 3], sampling, return_routed_experts=True, routed_experts_start_len=2)


async def test_the_client_counts_every_response_byte_it_reads_errors_included():
    sent: list[int] = []

    def reply(request, body):
        n = body["sampling_params"]["max_new_tokens"]
        meta = {"id": "r", "finish_reason": {"type": "length", "length": n}, "prompt_tokens": 3,
                "completion_tokens": n, "output_token_logprobs": [[-0.5, 11, None]] * n}  # fmt: skip
        if n == 3:
            raw = json.dumps({"object": "error", "message": "top_k must be -1 or >= 1"}).encode()
            status = 400
        else:
            raw, status = json.dumps({"text": "", "output_ids": [11] * n, "meta_info": meta}).encode(), 200
        sent.append(len(raw))
        return web.Response(body=raw, status=status, content_type="application/json")

    async with TestServer(Fake(reply).app) as server, SGLangEngine(str(server.make_url(""))) as client:
        assert client.bytes_received == 0
        await client.generate([1, 2, 3], SamplingParams(max_new_tokens=1))
        assert client.bytes_received == sent[0] > 0
        await client.generate([1, 2, 3], SamplingParams(max_new_tokens=40))
        with pytest.raises(BadRequestError):
            await client.generate([1, 2, 3], SamplingParams(max_new_tokens=3))
        assert len(sent) == 3 and sent[1] > sent[0] and client.bytes_received == sum(sent)


@pytest.mark.parametrize(
    ("status", "body", "error", "match"),
    [
        (
            400,
            {
                "error": {
                    "message": (
                        "The input (5000 tokens) is longer than the model's context length (4096 tokens)."
                    )
                }
            },
            ContextOverflowError,
            "5000 tokens",
        ),
        (
            400,
            {"object": "error", "message": "top_k must be -1 or >= 1", "type": "BadRequestError"},
            BadRequestError,
            "top_k",
        ),
        (500, {"error": {"message": "CUDA error: out of memory"}}, EngineError, "HTTP 500: CUDA error"),
    ],
    ids=["overflow", "bad_request", "server_error"],
)
async def test_sglang_error_replies_map_to_exceptions_and_are_not_retried(status, body, error, match):
    fake = Fake(
        lambda req, b: web.Response(status=status, text=json.dumps(body), content_type="application/json")
    )
    async with (
        TestServer(fake.app) as server,
        SGLangEngine(str(server.make_url("")), retries=3, backoff_s=0) as client,
    ):
        with pytest.raises(error, match=match):
            await client.generate([1, 2], SamplingParams())
    assert fake.paths() == ["/generate"]


async def test_a_connection_lost_after_sending_is_not_resent():
    async def drop(request, body):
        request.transport.close()
        await asyncio.sleep(1)

    fake = Fake(drop)
    async with (
        TestServer(fake.app) as server,
        SGLangEngine(str(server.make_url("")), retries=3, backoff_s=0) as client,
    ):
        with pytest.raises(EngineError, match="not re-sent"):
            await client.generate([1, 2], SamplingParams())
    assert fake.paths() == ["/generate"]


async def test_a_timeout_or_a_cancel_aborts_the_request_on_the_server():
    async def hang(request, body):
        await asyncio.sleep(30)

    fake = Fake(hang)
    async with TestServer(fake.app) as server:
        async with SGLangEngine(str(server.make_url("")), timeout_s=0.3, retries=0) as client:
            with pytest.raises(EngineTimeoutError, match="longer than"):
                await client.generate([1, 2], SamplingParams(), rid="slow")
            task = asyncio.ensure_future(client.generate([1, 2], SamplingParams(), rid="cancelled"))
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        aborted = [body["rid"] for path, body in fake.seen if path == "/abort_request"]
    assert aborted == ["slow", "cancelled"]


async def test_a_malformed_reply_is_an_engine_error_naming_what_is_wrong():
    fake = Fake(
        lambda req, body: web.json_response({"output_ids": [1], "meta_info": {"output_token_logprobs": []}})
    )
    async with TestServer(fake.app) as server, SGLangEngine(str(server.make_url(""))) as client:
        with pytest.raises(EngineError, match="output_token_logprobs has 0 entries, output_ids 1"):
            await client.generate([1, 2], SamplingParams())


def test_client_arguments_are_validated():
    with pytest.raises(ValueError, match="base_url must be an http"):
        SGLangEngine("localhost:30000")
    with pytest.raises(ValueError, match="retries must be an int >= 0, got -1"):
        SGLangEngine("http://x", retries=-1)
    with pytest.raises(ValueError, match=r"routing must be .* got \(2, 0, 8\)"):
        SGLangEngine("http://x", routing=(2, 0, 8))


async def test_open_engine_with_a_url_connects_to_that_server(engine):
    async with TestServer(make_app(engine)) as server:
        config = EngineConfig(backend="sglang", url=str(server.make_url("")), connect_retries=0)
        async with open_engine(config, "/not/read/when/a/url/is/given") as client:
            assert isinstance(client, SGLangEngine) and client.retries == 0
            gen = await client.generate(PROMPT, SamplingParams(max_new_tokens=3, seed=0))
    assert len(gen.output_ids) == 3


async def test_top_logprobs_travel_in_sglangs_format_and_back(ours, engine):
    sampling = SamplingParams(max_new_tokens=6, seed=2, ignore_eos=True)
    remote = await ours.generate(PROMPT, sampling, top_logprobs=3)
    local = await engine.generate(PROMPT, sampling, top_logprobs=3)
    np.testing.assert_array_equal(remote.output_top_ids, local.output_top_ids)
    np.testing.assert_allclose(remote.output_top_logprobs, local.output_top_logprobs, atol=1e-6)
    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 2, "sampling_seed": 2},
            "return_logprob": True, "top_logprobs_num": 2}  # fmt: skip
    async with aiohttp.ClientSession() as http, http.post(ours.base_url + "/generate", json=body) as resp:
        meta = (await resp.json())["meta_info"]
    top = meta["output_top_logprobs"]
    assert len(top) == 2 and all(len(position) == 2 and position[0][2] is None for position in top)
    assert [position[0][1] for position in top] == local.output_top_ids[:2, 0].tolist()


@pytest.mark.parametrize("server_takes_hint", [True, False], ids=["ours", "real-sglang"])
async def test_the_session_hint_is_sent_only_to_a_server_that_declares_it(server_takes_hint):
    reply = {
        "text": "",
        "output_ids": [2],
        "meta_info": {
            "id": "r",
            "finish_reason": {"type": "stop", "matched": 2},
            "prompt_tokens": 3,
            "completion_tokens": 1,
            "weight_version": "0",
            "output_token_logprobs": [[-0.5, 2, None]],
        },
    }
    fake = Fake(lambda req, body: web.json_response(reply))
    fake.info = {"is_generation": True, **({"session_hint": True} if server_takes_hint else {})}
    async with TestServer(fake.app) as server, SGLangEngine(str(server.make_url(""))) as client:
        await client.generate([1, 2, 3], SamplingParams(max_new_tokens=4), session_id="trial-7")
        await client.generate([1, 2, 3], SamplingParams(max_new_tokens=4))
    hinted, plain = [body for path, body in fake.seen if path == "/generate"]
    assert hinted.get("session_id") == ("trial-7" if server_takes_hint else None)
    assert "session_id" not in plain
    with pytest.raises(ValueError, match="session_id must be a non-empty string or None, got ''"):
        await client.generate([1, 2, 3], SamplingParams(), session_id="")
