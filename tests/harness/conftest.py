"""Harness tests: a real capture proxy over the scripted engine, on the tiny model's tokenizer, for any
harness.

    proxy = await proxy_on(
        ScriptedEngine(tokenizer, texts), max_consecutive_no_tool=3  # any ProxyConfig field
    )
    llm = LLMEndpoint(session.openai_base_url, session.anthropic_base_url, step_limit=8)

Scripted replies are the tiny template's Qwen3 JSON tool-call texts, what a policy samples. The engine's
context is set wide (`CONTEXT`) because real harnesses send long prompts; the tokens are
never run through a model.
"""

from __future__ import annotations

import pytest

from legorl_jax.tasks.registry import load_suite

CONTEXT = 16384


@pytest.fixture(scope="session")
def harness_model_dir(tmp_path_factory, tiny_model_tool):
    spec = tiny_model_tool.TinyModelSpec(max_positions=CONTEXT)
    return tiny_model_tool.make_tiny_model(tmp_path_factory.mktemp("harness-moe"), spec, seed=0)


@pytest.fixture(scope="session")
def tokenizer(harness_model_dir):
    from legorl_jax.model.tokenizer import load_tokenizer

    return load_tokenizer(harness_model_dir)


@pytest.fixture(scope="session")
def builtin_tasks():
    """The built-in suite, by instance id."""
    return {task.instance_id: task for task in load_suite("builtin")}


@pytest.fixture
async def proxy_on(tokenizer, tmp_path):
    """proxy_on(engine, **proxy_config) -> a started CaptureProxy with a CONTEXT-token window (stopped after);
    sessions closed without a trial folder are archived under the test's tmp_path."""
    from legorl_jax.config import ProxyConfig
    from legorl_jax.proxy import CaptureProxy

    started = []

    async def start(engine, **config):
        proxy = CaptureProxy(
            engine,
            tokenizer,
            ProxyConfig(
                **{"context_length": CONTEXT, "archive_dir": str(tmp_path / "proxy-archive"), **config}
            ),
            admin_token="harness-admin-token",
        )
        await proxy.start("127.0.0.1", 0)
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        await proxy.stop()


def pytest_collection_modifyitems(config, items):
    """A `harness` test whose module names `REQUIRED_PACKAGE` skips, with the install command, where that
    harness is not installed (make test installs it first; a failed install must not fail the suite)."""
    import importlib.util

    for item in items:
        required = getattr(item.module, "REQUIRED_PACKAGE", None)
        if required and item.get_closest_marker("harness") and importlib.util.find_spec(required[0]) is None:
            item.add_marker(pytest.mark.skip(reason=f"{required[0]} is not installed: {required[1]}"))


@pytest.fixture(scope="session")
def jax_engine(harness_model_dir):
    """The tiny model's own engine over the whole CONTEXT (the harnesses' prompts are long)."""
    from legorl_jax.engine.jax_engine import JaxEngine

    engine = JaxEngine.from_dir(harness_model_dir, max_running=2, max_len=CONTEXT, min_bucket=256)
    yield engine
    engine.close()
