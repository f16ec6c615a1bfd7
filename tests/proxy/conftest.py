"""Proxy tests: the tiny MoE's tokenizer and template, one real embedded engine, and a scripted engine.

The scripted engine stands at the engine boundary only (ARCHITECTURE §4: fakes at outside systems): it
returns the token ids of texts a test chooses (to force exact tool-call texts through real SDKs), with
deterministic behaviour log-probs and routing rows shaped as the real engine's, and records every request.
The proxy in front of it is always the real one.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
from collections.abc import Callable

import numpy as np
import pytest

from legorl_jax.engine.base import EngineError, SamplingParams, check_generate_args, check_input_ids
from legorl_jax.types import Generation

# litellm fetches a model price list from the internet on import unless told to use its packaged copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

HERE = pathlib.Path(__file__).parent
CODER_TEMPLATE = HERE / "qwen3_coder_style.jinja"
MAX_LEN = 512
LAYERS, TOP_K, EXPERTS = 2, 2, 8


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


def routing_rows(ids: list[int], start: int) -> np.ndarray:
    """Deterministic expert ids per input position: what the scripted engine reports."""
    rows = np.zeros((max(len(ids) - 1 - start, 0), LAYERS, TOP_K), np.uint8)
    for r, pos in enumerate(range(start, len(ids) - 1)):
        for layer in range(LAYERS):
            first = (ids[pos] + pos + layer) % EXPERTS
            rows[r, layer] = (first, (first + 1) % EXPERTS)
    return rows


class ScriptedEngine:
    """An `Engine` whose replies are chosen texts (module docstring)."""

    max_len = MAX_LEN

    def __init__(self, tokenizer, script: Callable[[list[int], str], str] | list[str], *, delay_s: float = 0.0):
        self.tokenizer = tokenizer
        self.script = script
        self.delay_s = delay_s
        self.calls: list[dict] = []
        self.fail_with: Exception | None = None
        self.eos = tokenizer.token_to_id("<|im_end|>")
        self._turn = 0

    def text_for(self, prompt: list[int], rid: str) -> str:
        if callable(self.script):
            return self.script(prompt, rid)
        text = self.script[min(self._turn, len(self.script) - 1)]
        self._turn += 1
        return text

    async def generate(self, input_ids, sampling: SamplingParams, *, return_routed_experts=False,
                       routed_experts_start_len=0, rid=None) -> Generation:  # fmt: skip
        prompt = check_input_ids(input_ids)
        rid = check_generate_args(prompt, sampling, return_routed_experts, routed_experts_start_len, rid)
        prompt = prompt.tolist()
        self.calls.append({"prompt": prompt, "sampling": sampling, "start": routed_experts_start_len, "rid": rid})
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fail_with is not None:
            raise self.fail_with
        out = self.tokenizer.encode(self.text_for(prompt, rid))
        finish = "stop"
        if len(out) >= sampling.max_new_tokens:
            out, finish = out[: sampling.max_new_tokens], "length"
        else:
            out = [*out, self.eos]
        logprobs = np.asarray([-0.01 * (1 + (t % 97)) for t in out], np.float32)
        routed = routing_rows(prompt + out, routed_experts_start_len) if return_routed_experts else None
        return Generation(np.asarray(out, np.int32), logprobs, routed, finish, "scripted", len(prompt),
                          routed_experts_start=routed_experts_start_len)  # fmt: skip

    async def prompt_logprobs(self, input_ids, start, *, temperature=1.0):
        ids = list(input_ids)
        return np.asarray([-0.01 * (1 + (t % 97)) for t in ids[start:]], np.float32)

    async def update_weights(self, source, version):  # pragma: no cover - not used by the proxy
        raise EngineError("scripted engine has no weights")

    async def health(self):
        return True

    async def abort(self, rid):
        return None


@pytest.fixture
def scripted(tokenizer):
    """scripted(script, delay_s=0) -> a ScriptedEngine on the tiny tokenizer."""
    return lambda script, **kw: ScriptedEngine(tokenizer, script, **kw)


@pytest.fixture
async def serve(tokenizer):
    """serve(engine, config=None, tokenizer=None) -> a started CaptureProxy (stopped after the test)."""
    from legorl_jax.proxy import CaptureProxy

    started = []

    async def start(engine, config=None, tok=None, **kw):
        proxy = CaptureProxy(engine, tok or tokenizer, config, admin_token="test-admin-token", **kw)
        await proxy.start("127.0.0.1", 0)
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        await proxy.stop()


BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a bash command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
}


def tool_call_text(name: str, arguments: str, content: str = "") -> str:
    """The tiny template's (Qwen3 JSON) tool-call text, as a policy would sample it."""
    return (content + "\n" if content else "") + f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'
