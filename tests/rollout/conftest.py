"""Rollout tests: two easy built-in tasks, the tiny model's tokenizer, one embedded engine on it, and real
capture proxies in front of a test's engine (`proxy_on`)."""

from __future__ import annotations

import pytest
from rollout_fixtures import MAX_LEN, TASK_IDS

from legorl_jax.config import ProxyConfig
from legorl_jax.proxy import CaptureProxy
from legorl_jax.tasks.builtin import SUITE_DIR, load_builtin_task


@pytest.fixture(scope="session")
def rollout_model_dir(tmp_path_factory, tiny_model_tool):
    spec = tiny_model_tool.TinyModelSpec(max_positions=MAX_LEN)
    return tiny_model_tool.make_tiny_model(tmp_path_factory.mktemp("rollout-moe"), spec, seed=0)


@pytest.fixture(scope="session")
def tokenizer(rollout_model_dir):
    from legorl_jax.model.tokenizer import load_tokenizer

    return load_tokenizer(rollout_model_dir)


@pytest.fixture(scope="session")
def jax_engine(rollout_model_dir):
    from legorl_jax.engine.jax_engine import JaxEngine

    engine = JaxEngine.from_dir(rollout_model_dir, max_running=4, max_len=MAX_LEN, min_bucket=64)
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def two_tasks():
    return [load_builtin_task(SUITE_DIR / name) for name in TASK_IDS]


@pytest.fixture(scope="session")
def task(two_tasks):
    return two_tasks[0]


@pytest.fixture
async def proxy_on(tokenizer, tmp_path):
    started = []

    async def start(engine, **config):
        config = {"archive_dir": str(tmp_path / "proxy-archive"), **config}
        proxy = CaptureProxy(
            engine,
            tokenizer,
            ProxyConfig(**config),
            admin_token="rollout-admin-token",
            context_length=engine.max_len,
        )
        await proxy.start()
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        await proxy.stop()
