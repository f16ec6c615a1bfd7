"""An engine fleet: two real servers of ours (tiny dense model) behind the real sglang-router on
127.0.0.1: session affinity, an engine killed mid-request, weights published to both, and bad config;
and two of ours on a tiny MoE with `--return-routed-experts always`: routed experts through the router
equal to one engine's, and recorded by the capture proxy over the fleet."""

import asyncio
import base64
import dataclasses
import json
import signal
import sys

import numpy as np
import pytest
from processes import free_port, start_engine_servers

from legorl_jax.config import EngineConfig, RouterConfig, SGLangConfig
from legorl_jax.engine import EngineError, EngineUnavailableError, SamplingParams, open_engine
from legorl_jax.engine.fleet import EngineFleet, launched_sglang, router_argv
from legorl_jax.engine.jax_engine import JaxEngine
from legorl_jax.engine.resume import generate_resuming
from legorl_jax.engine.sglang_client import SGLangEngine
from legorl_jax.engine.sglang_launcher import SGLangNotInstalledError
from legorl_jax.engine.weight_update import update_weights
from legorl_jax.engine.wire import TRACESTATE_HEADER, generate_request_json, routed_start_tracestate

pytest.importorskip("sglang_router", reason="needs sglang-router (pip install 'legorl_jax[test]')")

PROMPT = [5, 17, 230, 901, 44, 12, 9, 300]


@pytest.fixture(scope="module")
def servers(tiny_dense_dir, tmp_path_factory):
    procs = asyncio.run(
        start_engine_servers(tiny_dense_dir, 2, tmp_path_factory.mktemp("fleet"), max_len=HELD_WINDOW)
    )
    yield procs
    for proc in procs:
        proc.stop(5)


def fleet_config(urls, **router):
    router = dict(port=free_port(), prometheus_port=free_port(), health_check_interval_s=1, **router)
    return EngineConfig(
        backend="sglang", servers=list(urls), router=RouterConfig(python=sys.executable, **router)
    )


async def conversation(fleet, session, turns, *, tokens=6):
    """`turns` turns of one session, each prompt the previous prompt plus its reply plus a user token."""
    prompt, gens = [1000 + sum(map(ord, session))] + PROMPT, []  # no two sessions share a prefix
    for turn in range(turns):
        gen = await fleet.generate(
            prompt, SamplingParams(max_new_tokens=tokens, seed=turn, ignore_eos=True), session_id=session
        )
        gens.append(gen)
        prompt = prompt + gen.output_ids.tolist() + [40 + turn]
    return prompt, gens


async def until(condition, timeout_s: float = 30.0):
    """Returns once `condition()` holds; fails naming it after `timeout_s` (a state, not a sleep, orders
    the test)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"never true: {condition}"
        await asyncio.sleep(0.005)


HELD_WINDOW = 1024
HELD_TOKENS = 1000
"""New tokens of a request `hold` must catch running (and pause before it ends), within the `servers`
fixture's window (HELD_WINDOW) less the prompt. On a host at load 15-57 the tiny model decoded 120, and once
240, before the fleet's server_info answered or the pause landed."""


async def hold(fleet, task):
    """Once `task`'s request runs, pauses its engine in place: held in flight (no race with a fast decode);
    fails, rather than waiting forever, if the request ended first."""
    while True:
        assert not task.done(), "the request ended before it could be held: give it more tokens"
        info = await fleet.server_info()
        # An engine that did not answer in time (a busy host) reports {"error": ...}: ask again.
        busy = [url for url, body in info.items() if body.get("running")]
        if busy:
            await fleet.engines[busy[0]].pause("in_place")
            return busy[0]
        await asyncio.sleep(0.005)


async def test_one_sessions_turns_all_land_on_one_engine(servers):
    # A health check that times out on a busy host would take an engine out of the router's rotation and
    # send every new session to the other: this test is about affinity, so one miss must not do that.
    config = fleet_config([s.base_url for s in servers], health_failure_threshold=5)
    async with open_engine(config, "unused") as fleet:
        assert isinstance(fleet, EngineFleet)
        for session in ("sess-a", "sess-b", "sess-c"):
            prompt, gens = await conversation(fleet, session, 5)
            # Every later turn finds the previous turn's whole prompt and reply in the prefix cache: it ran
            # on the engine that served the turn before.
            for before, gen in zip(gens, gens[1:], strict=False):
                assert gen.cached_tokens >= before.prompt_tokens + len(before.output_ids) - 1
            holders = []
            for url, engine in fleet.engines.items():
                probe = await engine.generate(prompt, SamplingParams(max_new_tokens=1))
                holders += [url] if probe.cached_tokens > len(PROMPT) + 1 else []
            assert len(holders) == 1, holders
        info = await fleet.server_info()
        assert set(info) == {s.base_url for s in servers}
        assert all(body["healthy"] and "prefix_cache" in body for body in info.values())
        metrics = await fleet.metrics()
        assert metrics["engine/0/healthy"] == 1.0 and "engine/1/cache_tokens" in metrics


async def test_a_new_session_goes_to_the_engine_without_a_session_in_flight(servers):
    # min_group counts, per engine, the routing keys with a request in flight (between two turns a session
    # counts nowhere, and a tie is broken at random): with one session held in flight, its engine has one
    # and the other none. With assignment_mode random this fails about half the time.
    config = fleet_config([s.base_url for s in servers], health_failure_threshold=5)
    async with open_engine(config, "unused") as fleet:
        long = SamplingParams(max_new_tokens=HELD_TOKENS, ignore_eos=True)
        first = asyncio.ensure_future(fleet.generate([7, *PROMPT], long, session_id="in-flight"))
        busy = await hold(fleet, first)
        try:
            other = await asyncio.wait_for(
                fleet.generate([8, *PROMPT], SamplingParams(max_new_tokens=4), session_id="new"), 120
            )
            assert not first.done()
            info = await fleet.server_info()
            (idle,) = set(fleet.engines) - {busy}
            assert info[busy]["running"] == 1 and info[idle]["running"] == 0
            probe = await fleet.engines[idle].generate([8, *PROMPT], SamplingParams(max_new_tokens=1))
            assert probe.cached_tokens >= len(PROMPT)  # the new session ran on the idle engine
        finally:
            await fleet.engines[busy].resume()
        assert len((await first).output_ids) == HELD_TOKENS and len(other.output_ids) == 4


async def test_an_engine_that_dies_fails_its_trial_as_an_engine_failure_and_the_retry_runs_on_the_other(
    tiny_dense_dir, tmp_path
):
    import openai

    from legorl_jax.config import ProxyConfig
    from legorl_jax.model.tokenizer import load_tokenizer
    from legorl_jax.proxy import CaptureProxy

    procs = await start_engine_servers(tiny_dense_dir, 2, tmp_path)
    config = ProxyConfig(
        max_response_tokens=8, max_consecutive_no_tool=0, archive_dir=str(tmp_path / "archive")
    )
    messages = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix calc.py."}]
    try:
        async with open_engine(fleet_config([p.base_url for p in procs]), "unused") as fleet:
            proxy = CaptureProxy(
                fleet, load_tokenizer(tiny_dense_dir), config, admin_token="test-admin", context_length=256
            )
            await proxy.start("127.0.0.1", 0)
            try:
                info = proxy.open_session()
                async with openai.AsyncOpenAI(
                    base_url=info.openai_base_url, api_key="x", max_retries=0
                ) as client:
                    first = await client.chat.completions.create(model="p", messages=messages)
                    turn = proxy.sessions[info.session_id].turns[0]
                    held = []
                    for proc in procs:  # the engine that served the turn has its tokens cached
                        probe = await fleet.engines[proc.base_url].generate(
                            turn.prompt_ids.tolist() + turn.output_ids.tolist(),
                            SamplingParams(max_new_tokens=1),
                        )
                        held += [proc] if probe.cached_tokens > 1 else []
                    (victim,) = held
                    survivor = next(p for p in procs if p is not victim)
                    # Paused, the engine holds the session's next turn in flight until it dies (no race with a
                    # fast decode).
                    await fleet.engines[victim.base_url].pause("in_place")
                    more = [*messages, {"role": "assistant", "content": first.choices[0].message.content},
                            {"role": "user", "content": "go on"}]  # fmt: skip
                    second = asyncio.ensure_future(client.chat.completions.create(model="p", messages=more))
                    for _ in range(100):
                        server = await fleet.engines[victim.base_url].server_info()
                        if server["running"] + server["waiting"] == 1:
                            break
                        await asyncio.sleep(0.05)
                    assert not second.done()
                    victim._signal(signal.SIGKILL)
                    with pytest.raises(openai.APIStatusError) as failed:
                        await second
                    assert failed.value.status_code == 502
                    # What the orchestrator reads to drop the attempt as engine_failed and retry the trial
                    # (tests/rollout/test_builtin_rollout.py: injected infrastructure failures).
                    assert proxy.session_flags(info.session_id).engine_failed
                for _ in range(50):  # the router's health check (every second) takes the engine out
                    if await fleet.healthy_engines() == [survivor.base_url]:
                        break
                    await asyncio.sleep(0.2)
                assert await fleet.healthy_engines() == [survivor.base_url]
                retry = proxy.open_session()
                async with openai.AsyncOpenAI(
                    base_url=retry.openai_base_url, api_key="x", max_retries=0
                ) as client:
                    reply = await client.chat.completions.create(model="p", messages=messages)
                    answer = {"role": "assistant", "content": reply.choices[0].message.content}
                    await client.chat.completions.create(
                        model="p", messages=[*messages, answer, {"role": "user", "content": "go on"}]
                    )
                assert not proxy.session_flags(retry.session_id).engine_failed
                record = await proxy.close_session(retry.session_id)
                assert len(record.turns) == 2
            finally:
                await proxy.stop()
    finally:
        for proc in procs:
            proc.stop(5)


async def test_after_an_engine_dies_a_retry_waits_until_the_router_took_it_out_and_every_session_then_lands(
    tiny_dense_dir, tmp_path
):
    import time

    from legorl_jax.config import RolloutConfig
    from legorl_jax.rollout.retry import wait_before_retry
    from legorl_jax.types import Outcome

    procs = await start_engine_servers(tiny_dense_dir, 2, tmp_path)
    # Health checks every 1 s, 3 failures to take an engine out: the dead engine stays routed to for ~3 s.
    config = fleet_config([p.base_url for p in procs], health_failure_threshold=3)
    try:
        async with open_engine(config, "unused") as fleet:
            assert await fleet.settled()
            victim, survivor = procs
            victim._signal(signal.SIGKILL)
            victim.process.wait()
            assert victim.base_url in await fleet.healthy_engines()  # the router has not noticed yet
            assert not await fleet.settled()  # so a retry sent now could land on the dead engine
            began = time.monotonic()
            waited = await wait_before_retry(
                Outcome.ENGINE_FAILED, engine=fleet, config=RolloutConfig(retry_wait_s=60, retry_delay_s=0)
            )
            assert "settle" in waited and "not settled" not in waited
            assert await fleet.healthy_engines() == [survivor.base_url]
            assert time.monotonic() - began < 30
            # Every new session now lands on the live engine: none fails for the dead one.
            for i in range(8):
                gen = await fleet.generate(
                    [i + 1, *PROMPT], SamplingParams(max_new_tokens=2), session_id=f"s{i}"
                )
                assert len(gen.output_ids) == 2
            # Monitoring skips the engine the router took out: no wait on a dead engine.
            t = time.monotonic()
            figures = await fleet.metrics()
            assert time.monotonic() - t < 3.0
            assert figures["engine/0/healthy"] == 0.0 and figures["engine/1/healthy"] == 1.0
    finally:
        for proc in procs:
            proc.stop(5)


async def test_a_retry_waits_at_most_retry_wait_s_when_the_engine_side_never_settles(
    tiny_dense_dir, tmp_path
):
    import time

    from legorl_jax.config import RolloutConfig
    from legorl_jax.rollout.retry import wait_before_retry
    from legorl_jax.types import Outcome

    (proc,) = await start_engine_servers(tiny_dense_dir, 1, tmp_path)
    try:
        async with open_engine(fleet_config([proc.base_url]), "unused") as fleet:
            proc._signal(signal.SIGKILL)
            proc.process.wait()
            began = time.monotonic()
            waited = await wait_before_retry(
                Outcome.ENGINE_FAILED, engine=fleet, config=RolloutConfig(retry_wait_s=2, retry_delay_s=0)
            )
            assert "not settled" in waited and 2 <= time.monotonic() - began < 10
    finally:
        proc.stop(5)


async def test_publishing_reaches_every_engine_of_a_launched_fleet_with_one_version(
    tiny_dense_dir, tiny_model_tool, tmp_path
):
    new_dir = tiny_model_tool.make_tiny_model(
        tmp_path / "v1", tiny_model_tool.TinyModelSpec(dense=True), seed=1
    )
    reference = JaxEngine.from_dir(new_dir, max_running=1, max_len=64, min_bucket=16)
    try:
        expected = await reference.prompt_logprobs(PROMPT, 1)
    finally:
        reference.close()
    # engine.launch: 2 starts two of our servers (engine.sglang with our module) and the router itself.
    sglang = SGLangConfig(python=sys.executable, module="legorl_jax.engine.serve", port=free_port(),
                          extra_args=["--max-running", "4", "--max-len", "256", "--min-bucket", "16"],
                          log_file=str(tmp_path / "engine.log"), startup_timeout_s=300)  # fmt: skip
    config = fleet_config([])
    config = EngineConfig(backend="sglang", launch=2, sglang=sglang, router=config.router)
    async with open_engine(config, tiny_dense_dir) as fleet:
        assert len(fleet.engines) == 2 and (tmp_path / "engine-1.log").is_file()
        # Launched with --return-routed-experts always (a no-op on this dense model; a MoE one needs it).
        info = await fleet.server_info()
        assert all(body["return_routed_experts"] == "always" for body in info.values())
        old = {u: await e.prompt_logprobs(PROMPT, 1) for u, e in fleet.engines.items()}
        await fleet.update_weights(str(new_dir), "v1")
        assert set(fleet.serving["v1"]) == set(fleet.engines)
        metrics = await fleet.metrics()
        assert all(0 <= metrics[f"engine/{i}/publish_s"] < 60 for i in range(2))
        for url, engine in fleet.engines.items():
            got = await engine.prompt_logprobs(PROMPT, 1)
            np.testing.assert_allclose(got, expected, atol=1e-5)
            assert not np.allclose(got, old[url], atol=1e-3)
            gen = await engine.generate(PROMPT, SamplingParams(max_new_tokens=2))
            assert gen.weight_version == "v1"
        # A directory no engine can load fails the publish naming it, and leaves every engine serving.
        with pytest.raises(EngineError, match="no-such-dir"):
            await fleet.update_weights(str(tmp_path / "no-such-dir"), "v2")
        for engine in fleet.engines.values():
            assert (await engine.generate(PROMPT, SamplingParams(max_new_tokens=2))).weight_version == "v1"
    # The launched servers and the router are gone with the fleet.
    for url in fleet.engines:
        async with SGLangEngine(url, retries=0) as gone:
            assert not await gone.health()


async def test_the_fleet_publishes_with_each_update_policy_through_the_router(
    servers, tiny_dense_dir, tiny_model_tool, tmp_path
):
    new_dir = tiny_model_tool.make_tiny_model(
        tmp_path / "v1", tiny_model_tool.TinyModelSpec(dense=True), seed=1
    )
    long = SamplingParams(max_new_tokens=HELD_TOKENS, seed=3, ignore_eos=True)

    async with open_engine(fleet_config([s.base_url for s in servers]), "unused") as fleet:
        old = (await fleet.generate(PROMPT, SamplingParams(max_new_tokens=1))).weight_version
        try:
            # drain: the request in flight ends on the old weights; one sent meanwhile waits for the new.
            task = asyncio.ensure_future(fleet.generate(PROMPT, long, rid="fl-dr"))
            busy = await hold(fleet, task)
            publish = asyncio.ensure_future(update_weights(fleet, str(new_dir), "fl-v1", "drain"))
            await until(lambda: fleet.router.draining)  # new requests of the fleet are held from here on
            late = asyncio.ensure_future(fleet.generate(PROMPT, SamplingParams(max_new_tokens=2)))
            await until(lambda: fleet.router.held == 1)  # `late` waits for the drain, not sent
            assert fleet.router.in_flight == 1  # only the held-in-place request is out
            assert not task.done() and not publish.done() and not late.done()
            await fleet.engines[busy].resume()
            gen, _, late_gen = await asyncio.gather(task, publish, late)
            assert gen.token_weight_versions is None and gen.weight_version == old
            assert len(gen.output_ids) == HELD_TOKENS and late_gen.weight_version == "fl-v1"
            assert set(fleet.serving["fl-v1"]) == set(fleet.engines)
            # abort_resume: cut, re-issued through the router, ended on the new (here: the first) weights.
            task = asyncio.ensure_future(generate_resuming(fleet, PROMPT, long, max_resumes=2, rid="fl-ar"))
            await hold(fleet, task)
            await update_weights(fleet, str(tiny_dense_dir), "fl-v0", "abort_resume")
            resumed = await task
            gen = resumed.generation
            assert gen.finish_reason == "length" and len(gen.output_ids) == HELD_TOKENS
            assert resumed.resumes == 1
            cut = gen.token_weight_versions.index("fl-v0")
            assert cut >= 1 and gen.token_weight_versions == ("fl-v1",) * cut + ("fl-v0",) * (
                HELD_TOKENS - cut
            )
        finally:
            await fleet.resume()
            await fleet.update_weights(str(tiny_dense_dir), old)


async def test_bad_fleet_config_is_a_clear_error_naming_the_value(tmp_path):
    with pytest.raises(EngineUnavailableError, match="127.0.0.1:9"):
        async with open_engine(fleet_config(["http://127.0.0.1:9"]), "unused"):
            pass
    config = EngineConfig(backend="sglang", servers=["http://127.0.0.1:9"],
                          router=RouterConfig(python=str(tmp_path / "no-python")))  # fmt: skip
    from legorl_jax.engine.fleet import RouterLauncher

    with pytest.raises(SGLangNotInstalledError, match="no-python"):
        await RouterLauncher(config.router, config.servers).start()
    with pytest.raises(ValueError, match=r"worker_urls=\[\]"):
        router_argv(RouterConfig(), [])
    with pytest.raises(ValueError, match="-1"):
        EngineConfig(backend="sglang", launch=-1)
    with pytest.raises(ValueError, match="ftp://x"):
        EngineConfig(backend="sglang", servers=["ftp://x"])
    with pytest.raises(ValueError, match="'jax'"):
        EngineConfig(backend="jax", launch=2)
    with pytest.raises(ValueError, match=r"\['servers', 'launch'\]"):
        EngineConfig(backend="sglang", servers=["http://a:1"], launch=2)
    with pytest.raises(ValueError, match="prometheus_port"):
        RouterConfig(prometheus_port=0)


@pytest.fixture(scope="module")
def moe_servers(engine_model_dir, tmp_path_factory):
    """Two of ours on the engine tests' tiny MoE (clear top-k margins), returning routing unasked."""
    folder = tmp_path_factory.mktemp("moe-fleet")
    procs = asyncio.run(
        start_engine_servers(engine_model_dir, 2, folder, "--return-routed-experts", "always", name="moe")
    )
    yield procs
    for proc in procs:
        proc.stop(5)


async def test_routed_experts_through_the_fleet_equal_one_engines_for_every_start(
    moe_servers, engine_model_dir
):
    async with open_engine(fleet_config([s.base_url for s in moe_servers]), engine_model_dir) as fleet:
        for start in (0, 5):
            sampling = SamplingParams(max_new_tokens=8, seed=start + 1, temperature=1.0, ignore_eos=True)
            gen = await fleet.generate(
                PROMPT, sampling, return_routed_experts=True, routed_experts_start_len=start,
                session_id=f"moe-{start}",
            )  # fmt: skip
            assert gen.routed_experts_start == start
            assert gen.routed_experts.shape == (len(PROMPT) + 8 - 1 - start, 2, 2)
            for url, engine in fleet.engines.items():  # asked directly, with the request-level fields
                alone = await engine.generate(
                    PROMPT, sampling, return_routed_experts=True, routed_experts_start_len=start
                )
                assert np.array_equal(alone.output_ids, gen.output_ids), url
                assert np.array_equal(alone.routed_experts, gen.routed_experts), url
            # Not asked: nothing, as from one engine (the rows the response carries anyway are ignored).
            plain = await fleet.generate(PROMPT, sampling, session_id=f"moe-{start}")
            assert plain.routed_experts is None and np.array_equal(plain.output_ids, gen.output_ids)


async def test_the_routing_start_crosses_the_router_in_tracestate_so_a_reply_carries_only_the_asked_rows(
    moe_servers, engine_model_dir
):
    import aiohttp

    async with open_engine(fleet_config([s.base_url for s in moe_servers]), engine_model_dir) as fleet:
        sampling = SamplingParams(max_new_tokens=8, seed=3, temperature=1.0, ignore_eos=True)
        asked = dict(return_routed_experts=True, routed_experts_start_len=len(PROMPT))
        size = {}
        async with aiohttp.ClientSession() as http:  # the router's own reply, before our client cuts anything
            for start in (0, len(PROMPT)):
                body = generate_request_json(PROMPT, sampling, rid=f"raw-{start}", **asked)
                headers = {TRACESTATE_HEADER: routed_start_tracestate(start)} if start else {}
                async with http.post(f"{fleet.router_url}/generate", json=body, headers=headers) as resp:
                    raw = await resp.read()
                meta = json.loads(raw)["meta_info"]
                assert resp.status == 200 and meta["routed_experts_start_len"] == start
                assert (
                    len(base64.b64decode(meta["routed_experts"])) == (len(PROMPT) + 8 - 1 - start) * 2 * 2 * 4
                )
                size[start] = len(raw)
        before = fleet.router.bytes_received
        gen = await fleet.generate(PROMPT, sampling, session_id="moe-header", **asked)
        assert gen.routed_experts.shape == (8 - 1, 2, 2)
        alone = await fleet.engines[moe_servers[0].base_url].generate(PROMPT, sampling, **asked)
        np.testing.assert_array_equal(gen.routed_experts, alone.routed_experts)
        # Our client sends the member: the fleet's reply has the asked rows' size, not the whole sequence's.
        assert fleet.router.bytes_received - before < (size[0] + size[len(PROMPT)]) / 2, size


async def test_abort_resume_through_a_moe_fleet_ends_with_every_routing_row(
    moe_servers, engine_model_dir, other_model_dir
):
    long, start = SamplingParams(max_new_tokens=200, seed=3, ignore_eos=True), 4
    async with open_engine(fleet_config([s.base_url for s in moe_servers]), engine_model_dir) as fleet:
        old = (await fleet.generate(PROMPT, SamplingParams(max_new_tokens=1))).weight_version
        try:
            task = asyncio.ensure_future(generate_resuming(
                fleet, PROMPT, long, max_resumes=2, rid="moe-ar", return_routed_experts=True,
                routed_experts_start_len=start,
            ))  # fmt: skip
            await hold(fleet, task)
            await update_weights(fleet, str(other_model_dir), "moe-v1", "abort_resume")
            resumed = await task
            # The whole sequence forwarded once on the new weights: the routing the re-issue computed.
            one = next(iter(fleet.engines.values()))
            sequence = [*PROMPT, *(int(t) for t in resumed.generation.output_ids)]
            on_new = await one.generate(
                sequence, SamplingParams(max_new_tokens=1), return_routed_experts=True,
                routed_experts_start_len=start,
            )  # fmt: skip
        finally:
            await fleet.resume()
            await fleet.update_weights(str(engine_model_dir), old)
        uncut = await one.generate(PROMPT, long, return_routed_experts=True, routed_experts_start_len=start)
    gen = resumed.generation
    assert resumed.resumes == 1 and len(gen.output_ids) == 200 and gen.routed_experts_start == start
    assert gen.routed_experts.shape == (len(PROMPT) + 200 - 1 - start, 2, 2)
    assert np.all((gen.routed_experts >= 0) & (gen.routed_experts < 8))
    # Up to the cut the request ran on the old weights: the tokens an uncut request samples there.
    cut = gen.token_weight_versions.index("moe-v1")
    assert cut >= 1 and np.array_equal(gen.output_ids[:cut], uncut.output_ids[:cut])
    # Every row is the re-issue's forward on the new weights (it re-prefilled the prefix; resume.py), not
    # the cut piece's rows on the old weights.
    rows = len(PROMPT) + cut - 1 - start
    assert not np.array_equal(gen.routed_experts[:rows], uncut.routed_experts[:rows])
    np.testing.assert_array_equal(gen.routed_experts, on_new.routed_experts[: len(sequence) - 1 - start])


async def test_the_capture_proxy_over_a_moe_fleet_records_routing_for_every_sampled_token(
    moe_servers, engine_model_dir, tmp_path
):
    import openai

    from legorl_jax.config import ProxyConfig
    from legorl_jax.model.tokenizer import load_tokenizer
    from legorl_jax.proxy import CaptureProxy

    config = ProxyConfig(max_response_tokens=6, max_consecutive_no_tool=0, archive_dir=str(tmp_path / "a"))
    async with open_engine(fleet_config([s.base_url for s in moe_servers]), engine_model_dir) as fleet:
        proxy = CaptureProxy(
            fleet, load_tokenizer(engine_model_dir), config, admin_token="test-admin", context_length=256
        )
        await proxy.start("127.0.0.1", 0)
        try:
            info = proxy.open_session()
            messages = [
                {"role": "system", "content": "You fix bugs."},
                {"role": "user", "content": "Fix it."},
            ]
            async with openai.AsyncOpenAI(
                base_url=info.openai_base_url, api_key="x", max_retries=0
            ) as client:
                for turn in range(3):
                    reply = await client.chat.completions.create(model="p", messages=messages)
                    messages = [*messages, {"role": "assistant", "content": reply.choices[0].message.content},
                                {"role": "user", "content": f"go on {turn}"}]  # fmt: skip
            turns = proxy.sessions[info.session_id].turns
            record = await proxy.close_session(info.session_id)
        finally:
            await proxy.stop()
    assert len(record.turns) == 3 and sum(t.routed_experts_start > 0 for t in turns) == 2
    (seq,) = record.sequences
    assert seq.num_sampled == sum(t["output_tokens"] for t in record.turns) > 0
    # Every input position but the last has its experts recorded (so every sampled token's), in range.
    routed = seq.routed_experts
    assert routed.shape == (len(seq.token_ids), 2, 2)
    assert np.all((routed[:-1] >= 0) & (routed[:-1] < 8)) and np.all(routed[-1] == -1)


async def test_a_fleet_refuses_a_moe_model_naming_each_engine_that_lacks_routing_unasked(
    moe_servers, engine_model_dir, tmp_path
):
    (plain,) = await start_engine_servers(engine_model_dir, 1, tmp_path)  # default: routing only when asked
    try:
        with pytest.raises(ValueError, match="return_routed_experts") as refused:
            async with open_engine(fleet_config([moe_servers[0].base_url, plain.base_url]), engine_model_dir):
                pass
    finally:
        plain.stop(5)
    message = str(refused.value)
    assert f"{plain.base_url} does not (its /get_server_info says return_routed_experts='request')" in message
    assert f"{moe_servers[0].base_url} does not" not in message
    assert "--return-routed-experts always" in message and "SGLang" in message


def test_launched_servers_of_ours_return_routing_unasked_unless_configured_otherwise():
    ours = SGLangConfig(module="legorl_jax.engine.serve", port=31000, extra_args=["--max-len", "64"],
                        log_file="/tmp/e.log")  # fmt: skip
    second = launched_sglang(ours, 1)
    assert (second.port, second.log_file) == (31001, "/tmp/e-1.log")
    assert second.extra_args == ["--max-len", "64", "--return-routed-experts", "always"]
    assert ours.extra_args == ["--max-len", "64"]  # the configured one is not changed
    chosen = dataclasses.replace(ours, extra_args=["--return-routed-experts=request"])
    assert launched_sglang(chosen, 0).extra_args == ["--return-routed-experts=request"]
    sglang = SGLangConfig(module="sglang.launch_server")  # real SGLang has no such flag
    assert launched_sglang(sglang, 0).extra_args == []
    with pytest.raises(TypeError, match="dict"):
        launched_sglang({"port": 1}, 0)
