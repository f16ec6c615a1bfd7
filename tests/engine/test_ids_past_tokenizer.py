"""A checkpoint whose embedding has more rows than its tokenizer has entries (every real Qwen3: 151,936 rows,
151,669 tokens): an id the policy samples past the tokenizer is served, as SGLang and vLLM serve it (the id
returned, the text without it), never refused, and the capture proxy records it like any other token."""

import asyncio
import json

import numpy as np
import openai
import pytest
import safetensors.numpy
from aiohttp.test_utils import TestClient, TestServer

from legorl_jax.config import ProxyConfig
from legorl_jax.engine import SamplingParams
from legorl_jax.engine.jax_engine import JaxEngine
from legorl_jax.engine.serve import make_app
from legorl_jax.model.tokenizer import load_tokenizer

EXTRA = 16  # embedding rows past the tokenizer
PROMPT = [5, 17, 230, 901, 44, 12, 9]
CHAT = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def padded_model(tmp_path_factory, tiny_model_tool):
    """The tiny MoE with EXTRA rows appended to its embedding and LM head. Half the LM head's extra rows are
    10x the row of the token greedy decoding picks first on PROMPT, half on CHAT rendered, so that greedy
    decoding's first token on either lies past the tokenizer."""
    spec = tiny_model_tool.TinyModelSpec(max_positions=128, initializer_range=0.1)
    out = tiny_model_tool.make_tiny_model(tmp_path_factory.mktemp("padded-moe"), spec, seed=0)
    tokenizer = load_tokenizer(out)
    chat = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True)
    plain = JaxEngine.from_dir(out, max_running=1, max_len=64, min_bucket=16)
    try:
        greedy = SamplingParams(max_new_tokens=1, temperature=0.0)
        tops = [int(asyncio.run(plain.generate(p, greedy)).output_ids[0]) for p in (PROMPT, chat)]
    finally:
        plain.close()
    weights = safetensors.numpy.load_file(str(out / "model.safetensors"))
    rows = tokenizer.vocab_size
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        w = weights[name][:rows]
        scale = 10.0 if name == "lm_head.weight" else 1.0
        extra = np.repeat(w[tops] * scale, EXTRA // 2, axis=0)
        weights[name] = np.concatenate([w, extra.astype(w.dtype)])
    safetensors.numpy.save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((out / "config.json").read_text())
    config["vocab_size"] = rows + EXTRA
    (out / "config.json").write_text(json.dumps(config))
    return out, rows


@pytest.fixture(scope="module")
def padded_engine(padded_model):
    out, _ = padded_model
    engine = JaxEngine.from_dir(out, max_running=2, max_len=64, min_bucket=16)
    yield engine
    engine.close()


def test_the_padded_checkpoint_has_more_embedding_rows_than_tokenizer_entries(padded_model, padded_engine):
    _, rows = padded_model
    assert padded_engine.tokenizer.vocab_size == rows
    assert padded_engine.config.vocab_size == rows + EXTRA


async def test_an_id_sampled_past_the_tokenizer_is_served_with_its_text_left_out(padded_model, padded_engine):
    _, rows = padded_model
    async with TestClient(TestServer(make_app(padded_engine))) as client:
        resp = await client.post(
            "/generate",
            json={
                "input_ids": PROMPT,
                "sampling_params": {"max_new_tokens": 4, "temperature": 0, "ignore_eos": True},
                "return_logprob": True,
            },
        )
        body = await resp.json()
    assert resp.status == 200, body
    ids = body["output_ids"]
    assert ids[0] >= rows  # the sampled id lies past the tokenizer
    assert all(np.isfinite(e[0]) for e in body["meta_info"]["output_token_logprobs"])
    known = [i for i in ids if i < rows]
    assert body["text"] == padded_engine.tokenizer.decode(known)  # HF's decode drops the unknown id


async def test_the_capture_proxy_records_an_id_past_the_tokenizer_like_any_other(
    padded_model, padded_engine, tmp_path
):
    from legorl_jax.proxy import CaptureProxy

    _, rows = padded_model
    config = ProxyConfig(max_response_tokens=4, max_consecutive_no_tool=0, archive_dir=str(tmp_path / "a"))
    proxy = CaptureProxy(padded_engine, padded_engine.tokenizer, config, admin_token="test-admin-token")
    await proxy.start("127.0.0.1", 0)
    try:
        info = proxy.open_session()
        async with openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="x") as client:
            r = await client.chat.completions.create(model="p", messages=CHAT, temperature=0.0)
        assert r.choices[0].finish_reason is not None
        closed = await proxy.close_session(info.session_id)
    finally:
        await proxy.stop()
    (seq,) = closed.sequences
    sampled = seq.token_ids[np.flatnonzero(seq.loss_mask)]
    assert (sampled >= rows).any()  # recorded verbatim, not dropped or remapped
    assert np.isfinite(seq.behaviour_logprobs[np.flatnonzero(seq.loss_mask)]).all()


def test_decode_drops_ids_past_the_tokenizer_and_refuses_negative_ids(padded_engine):
    tok = padded_engine.tokenizer
    n = tok.vocab_size
    assert tok.decode([5, n, 6, n + 3]) == tok.decode([5, 6])
    with pytest.raises(ValueError, match=r"ids must be >= 0, got \[-2\]"):
        tok.decode([5, -2])
