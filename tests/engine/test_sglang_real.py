"""The SGLang-facing code against real SGLang 0.5.23 on this machine's CPU (marker `sglang`; README "Real
SGLang on a CPU machine"): the client, the launcher, weight publishing, the update policies over SGLang's own
pause / abort / continue, routing replay and the capture proxy.

The environment is tools/make_sglang_venv.sh's (`.venv-sglang`, or LEGORL_SGLANG_PYTHON naming another
interpreter); without it every test here skips, saying so. One server per module (starting one takes a
minute on a loaded 2-core box) on a tiny Qwen3-MoE; a test that changes its weights puts them back. The oracle
is our trainer's own forward (`Reference`, the policy loaded from the same directory), with the routing
SGLang recorded replayed: SGLang's log-probs must be what the trainer recomputes.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import socket

import anthropic
import numpy as np
import openai
import pytest
from engine_reference import Reference

from legorl_jax.config import ProxyConfig, SGLangConfig
from legorl_jax.engine import EngineError, SamplingParams
from legorl_jax.engine.resume import generate_resuming
from legorl_jax.engine.sglang_client import SGLangEngine
from legorl_jax.engine.sglang_launcher import SGLangLauncher
from legorl_jax.engine.weight_update import update_weights
from legorl_jax.model import load_hf
from legorl_jax.model.tokenizer import load_tokenizer
from legorl_jax.proxy import CaptureProxy

pytestmark = pytest.mark.sglang

ROOT = pathlib.Path(__file__).resolve().parents[2]
PYTHON = os.environ.get("LEGORL_SGLANG_PYTHON") or str(ROOT / ".venv-sglang" / "bin" / "python")
CPU_ARGS = [
    "--device", "cpu", "--attention-backend", "torch_native", "--disable-cuda-graph",
    "--mem-fraction-static", "0.1", "--max-total-tokens", "16384", "--grammar-backend", "none",
    "--skip-server-warmup", "--dtype", "float32", "--kv-cache-dtype", "auto",
]  # fmt: skip
CPU_ENV = {"SGLANG_USE_CPU_ENGINE": "1"}
PROMPT = [5, 17, 230, 901, 44, 12, 9]
WIDTH = 256  # the model's context: the longest sequence here is the prompt and 200 tokens
LOGPROB_TOL = 1e-4  # float32 weights and K/V on both sides; torch vs XLA reduction order only


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(**kw) -> SGLangConfig:
    return SGLangConfig(
        python=PYTHON, port=_free_port(), extra_args=list(CPU_ARGS), startup_timeout_s=900, **kw
    )


@pytest.fixture(scope="module")
def sglang_python():
    if not os.access(PYTHON, os.X_OK):
        pytest.skip(f"real SGLang environment missing ({PYTHON}): run tools/make_sglang_venv.sh")
    return PYTHON


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory, tiny_model_tool):
    """(weights 0, weights 1) of one tiny Qwen3-MoE: 2 MoE layers, 8 experts, top 2."""
    spec = tiny_model_tool.TinyModelSpec(initializer_range=0.1, max_positions=256)
    return tuple(
        tiny_model_tool.make_tiny_model(tmp_path_factory.mktemp(f"sglang-moe-{seed}"), spec, seed=seed)
        for seed in (0, 1)
    )


@pytest.fixture(scope="module")
def references(model_dirs):
    return tuple(Reference(load_hf(d), width=WIDTH) for d in model_dirs)


@pytest.fixture(scope="module")
def server(sglang_python, model_dirs, tmp_path_factory):
    """A real SGLang server on weights 0, started by our launcher as engine=sglang starts it."""
    log = tmp_path_factory.mktemp("sglang-log") / "server.log"
    launcher = SGLangLauncher(_config(log_file=str(log)), model_dirs[0], env=CPU_ENV)
    base_url = asyncio.run(launcher.start())
    yield launcher, base_url
    launcher.server.stop(launcher.config.stop_grace_s)


@pytest.fixture
async def client(server):
    async with SGLangEngine(server[1], retries=0, timeout_s=300) as engine:
        yield engine


def _check_against(reference, prompt, gen, *, start=0, temperature=1.0, tol=LOGPROB_TOL):
    """The generation's log-probs are the trainer's recompute with its routing replayed, and its routing is
    the trainer's own (native) routing of the same tokens."""
    tokens = np.concatenate([prompt, gen.output_ids]).astype(np.int32)
    _, native = reference.logits_and_routing(tokens)
    rows = gen.routed_experts.astype(np.int32)
    assert rows.shape == (len(tokens) - 1 - start, 2, 2)
    np.testing.assert_array_equal(np.sort(rows, -1), np.sort(native[start : len(tokens) - 1], -1))
    forced = np.concatenate([native[:start], rows])
    replayed = reference.token_logprobs(tokens, forced, temperature)[len(prompt) - 1 :]
    np.testing.assert_allclose(gen.output_logprobs, replayed, atol=tol, rtol=0)


# ------------------------------------------------------------------------------------------------------
# generate, routing, log-probs


async def test_generate_returns_the_trainers_logprobs_and_routing_from_every_routing_start(
    client, references
):
    assert await client.health()
    sampling = SamplingParams(max_new_tokens=12, temperature=0.8, seed=5, ignore_eos=True)
    for start in (0, 3, len(PROMPT)):  # the client's tracestate member rides along; SGLang ignores it
        gen = await client.generate(
            PROMPT, sampling, return_routed_experts=True, routed_experts_start_len=start
        )
        assert gen.finish_reason == "length" and len(gen.output_ids) == 12
        assert gen.weight_version == "default" and gen.token_weight_versions is None
        assert gen.routed_experts_start == start and gen.routed_experts.dtype == np.uint8
        _check_against(references[0], PROMPT, gen, start=start, temperature=0.8)
    lp = await client.prompt_logprobs(PROMPT, 1)
    np.testing.assert_allclose(lp, references[0].token_logprobs(np.asarray(PROMPT)), atol=LOGPROB_TOL)


async def test_real_sglang_serves_a_qwen3_moe_with_a_dense_layer_as_another_model(
    sglang_python, tmp_path, tiny_model_tool
):
    """Why the client refuses such a model: SGLang 0.5.23 builds layer 1 sparse too, so the routing of the
    MoE layer after it (decoder layer 2, which SGLang returns as row entry 2 of 3) is not the checkpoint's
    model's (HF's and ours agree on it)."""
    spec = tiny_model_tool.TinyModelSpec(
        num_layers=3, mlp_only_layers=(1,), initializer_range=0.1, max_positions=256
    )
    mixed = tiny_model_tool.make_tiny_model(tmp_path / "mixed", spec, seed=2)
    native = Reference(load_hf(mixed), width=WIDTH)
    launcher = SGLangLauncher(_config(), mixed, env=CPU_ENV)
    url = await launcher.start()
    try:
        async with SGLangEngine(url, retries=0, timeout_s=300) as engine:
            with pytest.raises(EngineError, match="mixes dense and MoE layers"):
                await engine.routing_shape()
        greedy = SamplingParams(max_new_tokens=12, temperature=0.0, ignore_eos=True)
        async with SGLangEngine(url, routing=(3, 2, 8), retries=0, timeout_s=300) as as_if_all_moe:
            gen = await as_if_all_moe.generate(PROMPT, greedy, return_routed_experts=True)
    finally:
        await launcher.stop()
    rows = gen.routed_experts.astype(np.int32)  # every decoder layer, as if all were MoE
    tokens = np.concatenate([PROMPT, gen.output_ids]).astype(np.int32)
    ours = native.logits_and_routing(tokens)[1][: len(tokens) - 1]
    np.testing.assert_array_equal(np.sort(rows[:, 0], -1), np.sort(ours[:, 0], -1))  # before the dense layer
    assert not np.array_equal(np.sort(rows[:, 2], -1), np.sort(ours[:, 1], -1))  # after it: another model


# ------------------------------------------------------------------------------------------------------
# the launcher


async def test_the_launcher_starts_a_healthy_server_and_stops_its_process_group(sglang_python, model_dirs):
    launcher = SGLangLauncher(_config(), model_dirs[0], env=CPU_ENV)
    url = await launcher.start()
    try:
        assert launcher.server.running
        async with SGLangEngine(url, retries=0) as engine:
            assert await engine.health()
            assert (await engine.model_info())["model_path"] == str(model_dirs[0])
    finally:
        await launcher.stop()
    assert not launcher.server.running and launcher.server.process.returncode is not None
    async with SGLangEngine(url, retries=0, connect_timeout_s=2) as engine:
        assert not await engine.health()  # nothing of it answers any more


async def test_a_server_that_fails_to_start_is_reported_with_its_log(sglang_python, tmp_path):
    offline = {**CPU_ENV, "HF_HUB_OFFLINE": "1"}  # no Hub lookup of the missing directory's name
    launcher = SGLangLauncher(_config(), tmp_path / "no-model-here", env=offline)
    with pytest.raises(EngineError, match="exited with code") as err:
        await launcher.start()
    assert "no-model-here" in str(err.value) and str(launcher.server.log_path) in str(err.value)
    assert not launcher.server.running


# ------------------------------------------------------------------------------------------------------
# weight publishing and the update policies


@pytest.fixture
async def restoring(client, model_dirs):
    """The client; the server is put back on weights 0 (version "default") after the test."""
    yield client
    await client.resume()
    await client.update_weights(str(model_dirs[0]), "default")


async def test_a_published_version_is_reported_and_the_next_generation_runs_on_it(
    restoring, model_dirs, references
):
    client = restoring
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0, ignore_eos=True)
    before = await client.generate(PROMPT, greedy, return_routed_experts=True)
    await update_weights(client, str(model_dirs[1]), "step-000001", "abort_resume")
    assert (await client._json("GET", "/get_model_info", idempotent=True))["weight_version"] == "step-000001"
    after = await client.generate(PROMPT, greedy, return_routed_experts=True)
    assert after.weight_version == "step-000001" and after.token_weight_versions is None
    assert not np.array_equal(after.output_ids, before.output_ids)
    _check_against(references[1], PROMPT, after)
    with pytest.raises(Exception, match="no-such-dir"):
        await client.update_weights(str(model_dirs[0].parent / "no-such-dir"), "step-000002")


async def test_an_in_place_update_with_nothing_in_flight_leaves_no_old_prefix_in_the_cache(
    restoring, model_dirs, references
):
    """A sync loop's update (policy in_place, nothing running): the next request reuses no K/V of the old
    weights, though its prompt was cached just before the update."""
    client = restoring
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0, ignore_eos=True)
    await client.generate(PROMPT, greedy, return_routed_experts=True)
    again = await client.generate(PROMPT, greedy, return_routed_experts=True)
    assert again.cached_tokens > 0  # the prompt is in SGLang's radix cache
    await update_weights(client, str(model_dirs[1]), "v-idle", "in_place")
    assert not client.old_prefixes
    after = await client.generate(PROMPT, greedy, return_routed_experts=True)
    assert after.weight_version == "v-idle" and after.cached_tokens == 0 and after.stale_kv_tokens == 0
    _check_against(references[1], PROMPT, after)


async def _mid_flight(client, policy, model_dirs, n=200):
    """A long request, a weight update under `policy` once it has sampled some tokens, and one request sent
    while the update runs: (the long one's result, the late one's)."""
    sampling = SamplingParams(max_new_tokens=n, temperature=1.0, seed=11, ignore_eos=True)
    long = asyncio.ensure_future(
        client.generate(PROMPT, sampling, return_routed_experts=True, rid=f"long-{policy}")
    )
    await asyncio.sleep(2.0)  # some tokens on a loaded CPU, far from its end
    assert not long.done(), "the long request ended before the update: raise n"
    update = asyncio.ensure_future(update_weights(client, str(model_dirs[1]), f"v-{policy}", policy))
    await asyncio.sleep(0.05)
    late = await client.generate(
        PROMPT, SamplingParams(max_new_tokens=6, temperature=0.0, ignore_eos=True), return_routed_experts=True
    )
    await update
    return await long, late


def _check_resumed(references, gen, switch):
    """A request resumed after an update: each token's log-prob is that of the weights its recorded version
    names (the cut piece's: the old weights' own forward), and every recorded routing row is the re-issue's
    re-prefill on the new weights, so replaying the rows in the new weights' recompute reproduces the new
    tokens' log-probs exactly (resume.py: the rows the newest tokens were sampled over)."""
    tokens = np.concatenate([PROMPT, gen.output_ids]).astype(np.int32)
    old_native = references[0].logits_and_routing(tokens)[1]
    new_native = references[1].logits_and_routing(tokens)[1]
    old = references[0].token_logprobs(tokens, old_native)[len(PROMPT) - 1 :]
    np.testing.assert_allclose(gen.output_logprobs[:switch], old[:switch], atol=LOGPROB_TOL, rtol=0)
    rows = gen.routed_experts.astype(np.int32)
    assert rows.shape == (len(tokens) - 1, 2, 2)
    cut = len(PROMPT) + switch - 1  # rows before it: the cut piece had forwarded them on the old weights
    assert not np.array_equal(np.sort(old_native[:cut], -1), np.sort(new_native[:cut], -1))
    np.testing.assert_array_equal(np.sort(rows, -1), np.sort(new_native[: len(tokens) - 1], -1))
    new = references[1].token_logprobs(tokens, rows)[len(PROMPT) - 1 :]
    np.testing.assert_allclose(gen.output_logprobs[switch:], new[switch:], atol=LOGPROB_TOL, rtol=0)


async def test_drain_lets_the_request_in_flight_end_on_the_old_weights(restoring, model_dirs, references):
    gen, late = await _mid_flight(restoring, "drain", model_dirs, n=120)
    assert gen.finish_reason == "length" and gen.weight_version == "default"
    assert gen.token_weight_versions is None and gen.stale_kv_tokens == 0
    _check_against(references[0], PROMPT, gen)
    assert late.weight_version == "v-drain"
    _check_against(references[1], PROMPT, late)


async def test_abort_resume_cuts_the_request_and_the_resumed_rest_runs_on_the_new_weights(
    restoring, model_dirs, references
):
    client = restoring
    sampling = SamplingParams(max_new_tokens=200, temperature=1.0, seed=11, ignore_eos=True)
    task = asyncio.ensure_future(
        generate_resuming(client, PROMPT, sampling, max_resumes=4, return_routed_experts=True, rid="ar")
    )
    await asyncio.sleep(1.5)
    assert not task.done()
    await update_weights(client, str(model_dirs[1]), "v-ar", "abort_resume")
    resumed = await task
    gen = resumed.generation
    assert resumed.resumes == 1 and gen.finish_reason == "length" and len(gen.output_ids) == 200
    versions = gen.token_weight_versions
    switch = versions.index("v-ar")
    assert switch >= 1 and versions == ("default",) * switch + ("v-ar",) * (200 - switch)
    assert gen.stale_kv_tokens == 0  # the rest was re-prefilled on the new weights
    _check_resumed(references, gen, switch)


async def test_in_place_continues_the_request_on_the_new_weights_and_tags_each_token(
    restoring, model_dirs, references
):
    gen, late = await _mid_flight(restoring, "in_place", model_dirs)
    assert gen.finish_reason == "length" and gen.weight_version == "v-in_place"
    versions = gen.token_weight_versions
    assert versions is not None, "SGLang reported no weight_versions spans for an update mid-request"
    switch = versions.index("v-in_place")
    assert switch >= 1 and versions == ("default",) * switch + ("v-in_place",) * (len(versions) - switch)
    assert gen.stale_kv_tokens == len(versions) - switch
    # Before the update: the old weights' log-probs exactly. After it, the tokens attend to K/V the old
    # weights computed, which no one set of weights reproduces (the in-place trade-off): not checked.
    tokens = np.concatenate([PROMPT, gen.output_ids]).astype(np.int32)
    old = references[0].token_logprobs(tokens, gen.routed_experts.astype(np.int32))[len(PROMPT) - 1 :]
    np.testing.assert_allclose(gen.output_logprobs[:switch], old[:switch], atol=LOGPROB_TOL, rtol=0)
    # The late request reused the prompt's K/V from SGLang's radix cache, computed on the old weights: its
    # tokens are recorded as sampled over old K/V (sglang_client.py, "Old prefixes").
    assert late.weight_version == "v-in_place" and late.token_weight_versions is None
    assert late.cached_tokens > 0 and late.stale_kv_tokens == len(late.output_ids)
    async with asyncio.timeout(120):  # the client's deferred flush runs once the server is idle
        while restoring.old_prefixes:
            await asyncio.sleep(0.1)
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0, ignore_eos=True)
    fresh = await restoring.generate(PROMPT, greedy, return_routed_experts=True)
    assert fresh.cached_tokens == 0 and fresh.stale_kv_tokens == 0  # no old prefix left to reuse
    _check_against(references[1], PROMPT, fresh)


# ------------------------------------------------------------------------------------------------------
# the capture proxy over real SGLang


@pytest.fixture
async def proxy(client, model_dirs, tmp_path):
    config = ProxyConfig(
        max_response_tokens=10,
        max_consecutive_no_tool=0,
        archive_dir=str(tmp_path / "a"),
        context_length=WIDTH,
    )
    started = CaptureProxy(client, load_tokenizer(model_dirs[0]), config, admin_token="test-admin-token")
    await started.start("127.0.0.1", 0)
    yield started
    await started.stop()


async def _check_session(proxy, client, info):
    closed = await proxy.close_session(info.session_id)
    (seq,) = closed.sequences
    assert seq.num_sampled == sum(t["output_tokens"] for t in closed.turns) > 0
    scored = await client.prompt_logprobs(seq.token_ids, 1)
    sampled = np.flatnonzero(seq.loss_mask)
    np.testing.assert_allclose(seq.behaviour_logprobs[sampled], scored[sampled - 1], atol=LOGPROB_TOL, rtol=0)
    routed = seq.routed_experts  # every position but the last recorded: routing coverage 1
    assert routed.shape == (len(seq.token_ids), 2, 2)
    assert np.all((routed[:-1] >= 0) & (routed[:-1] < 8)) and np.all(routed[-1] == -1)


async def test_the_proxys_openai_surface_over_sglang_records_what_sglang_sampled(proxy, client):
    info = proxy.open_session("calc", "sg-openai")
    messages = [{"role": "user", "content": "Fix calc.py."}]
    async with openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="x") as oa:
        for turn in range(2):
            r = await oa.chat.completions.create(model="p", messages=messages)
            messages += [
                {"role": "assistant", "content": r.choices[0].message.content},
                {"role": "user", "content": f"continue {turn}"},
            ]
    await _check_session(proxy, client, info)


async def test_the_proxys_anthropic_surface_over_sglang_records_what_sglang_sampled(proxy, client):
    info = proxy.open_session("calc", "sg-anthropic")
    messages = [{"role": "user", "content": "Fix calc.py."}]
    async with anthropic.AsyncAnthropic(base_url=info.anthropic_base_url, api_key="x") as an:
        for turn in range(2):
            r = await an.messages.create(model="p", max_tokens=10, messages=messages)
            text = "".join(b.text for b in r.content if b.type == "text")
            messages += [
                {"role": "assistant", "content": text or "."},
                {"role": "user", "content": f"continue {turn}"},
            ]
    await _check_session(proxy, client, info)
