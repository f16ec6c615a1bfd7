"""Proxy tests: the tiny MoE's tokenizer and template, one real embedded engine, and a scripted engine.

The scripted engine stands at the engine boundary only (docs/style.md rule 21: fakes at outside systems): it
returns the token ids of texts a test chooses (to force exact tool-call texts through real SDKs), with
deterministic behaviour log-probs and routing rows shaped as the real engine's, and records every request.
The proxy in front of it is always the real one.
"""

from __future__ import annotations

import pathlib

import pytest
from scripted_engine import MAX_LEN, ScriptedEngine

HERE = pathlib.Path(__file__).parent
CODER_TEMPLATE = HERE / "qwen3_coder_style.jinja"


@pytest.fixture(scope="session")
def proxy_model_dir(tmp_path_factory, tiny_model_tool):
    spec = tiny_model_tool.TinyModelSpec(max_positions=MAX_LEN, initializer_range=0.1)
    return tiny_model_tool.make_tiny_model(tmp_path_factory.mktemp("proxy-moe"), spec, seed=0)


@pytest.fixture(scope="session")
def tokenizer(proxy_model_dir):
    from legorl_jax.model.tokenizer import load_tokenizer

    return load_tokenizer(proxy_model_dir)


@pytest.fixture(scope="session")
def coder_tokenizer(proxy_model_dir):
    """The same tokenizer with the Qwen3-Coder-style (XML tool calls) template."""
    from legorl_jax.model.tokenizer import load_tokenizer

    tok = load_tokenizer(proxy_model_dir)
    tok.chat_template = CODER_TEMPLATE.read_text()
    return tok


@pytest.fixture(scope="session")
def jax_engine(proxy_model_dir):
    from legorl_jax.engine.jax_engine import JaxEngine

    engine = JaxEngine.from_dir(proxy_model_dir, max_running=8, max_len=MAX_LEN, min_bucket=64)
    yield engine
    engine.close()


@pytest.fixture
def scripted(tokenizer):
    """scripted(script, delay_s=0) -> a ScriptedEngine on the tiny tokenizer."""
    return lambda script, **kw: ScriptedEngine(tokenizer, script, **kw)


@pytest.fixture
async def serve(tokenizer, tmp_path):
    """serve(engine, config=None, tokenizer=None) -> a started CaptureProxy (stopped after the test); sessions
    closed without a trial folder are archived under the test's tmp_path, never in the repository."""
    import dataclasses

    from legorl_jax.config import ProxyConfig
    from legorl_jax.proxy import CaptureProxy

    started = []

    async def start(engine, config=None, tok=None, **kw):
        config = dataclasses.replace(config or ProxyConfig(), archive_dir=str(tmp_path / "proxy-archive"))
        proxy = CaptureProxy(engine, tok or tokenizer, config, admin_token="test-admin-token", **kw)
        await proxy.start("127.0.0.1", 0)
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        await proxy.stop()
