"""A scripted `Engine` for tests: replies are texts a test chooses, with deterministic log-probs and routing.

It stands at the engine boundary only (docs/style.md rule 21: fakes at outside systems): it returns the
token ids of the chosen texts (to force exact tool-call texts through real SDKs and real harnesses), behaviour
log-probs and routing rows shaped as the real engine's, and records every request. `script` is a list of
texts (one per call, the last repeated) or `script(prompt_ids, rid) -> text`. Its weights version is
`weight_version` ("scripted"); `update_mid_request(after_tokens, version)` makes the next request report an
update landing while it decodes, as the real engine reports one (`token_weight_versions`; with
`stale_kv=True` an `in_place` one, its tokens after the update flagged in `token_stale_kv`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import numpy as np

from legorl_jax.engine.base import SamplingParams, check_generate_args, check_input_ids
from legorl_jax.types import Generation

MAX_LEN = 512
LAYERS, TOP_K, EXPERTS = 2, 2, 8


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

    def __init__(
        self,
        tokenizer,
        script: Callable[[list[int], str], str] | list[str],
        *,
        delay_s: float | Callable[[str], float] = 0.0,  # per call, or a function of the request id
        weight_version: str = "scripted",
    ):
        self.tokenizer = tokenizer
        self.script = script
        self.delay_s = delay_s
        self.weight_version = weight_version
        self.updates: list[str] = []  # versions published to it, in order
        self.calls: list[dict] = []
        self.fail_with: Exception | None = None
        self.eos = tokenizer.token_to_id("<|im_end|>")
        self._turn = 0
        self._update: tuple[int, str, bool] | None = None

    def update_mid_request(self, after_tokens: int, version: str, *, stale_kv: bool = False) -> None:
        """The next request's output tokens from index `after_tokens` on are sampled under `version`, which
        then serves every later request (its `weight_version` is the last token's, as JaxEngine reports);
        with `stale_kv` they are flagged as sampled over the old weights' K/V, as JaxEngine's `in_place`."""
        self._update = (after_tokens, version, stale_kv)

    def text_for(self, prompt: list[int], rid: str) -> str:
        if callable(self.script):
            return self.script(prompt, rid)
        text = self.script[min(self._turn, len(self.script) - 1)]
        self._turn += 1
        return text

    async def generate(self, input_ids, sampling: SamplingParams, *, return_routed_experts=False,
                       routed_experts_start_len=0, rid=None, session_id=None) -> Generation:  # fmt: skip
        prompt = check_input_ids(input_ids)
        rid = check_generate_args(
            prompt, sampling, return_routed_experts, routed_experts_start_len, rid, session_id=session_id
        )
        prompt = prompt.tolist()
        self.calls.append(
            {
                "prompt": prompt,
                "sampling": sampling,
                "start": routed_experts_start_len,
                "rid": rid,
                "session_id": session_id,
                "at": time.time(),
            }
        )
        delay = self.delay_s(rid) if callable(self.delay_s) else self.delay_s
        if delay:
            await asyncio.sleep(delay)
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
        per_token = stale = None
        if self._update is not None:
            (after, version, in_place), self._update = self._update, None
            before = min(after, len(out))
            per_token = (self.weight_version,) * before + (version,) * (len(out) - before)
            self.weight_version = version
            per_token = per_token if len(set(per_token)) > 1 else None
            if in_place and per_token is not None:
                stale = np.arange(len(out)) >= before
        return Generation(
            np.asarray(out, np.int32),
            logprobs,
            routed,
            finish,
            self.weight_version,
            len(prompt),
            routed_experts_start=routed_experts_start_len,
            token_weight_versions=per_token,
            token_stale_kv=stale,
        )

    async def prompt_logprobs(self, input_ids, start, *, temperature=1.0):
        ids = list(input_ids)
        return np.asarray([-0.01 * (1 + (t % 97)) for t in ids[start:]], np.float32)

    async def update_weights(self, source, version):
        """Takes the version label only (the replies stay scripted): what the loop's publisher sees."""
        self.weight_version = version
        self.updates.append(version)

    async def health(self):
        return True

    async def abort(self, rid):
        return None


BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a bash command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}


def tool_call_text(name: str, arguments: str, content: str = "") -> str:
    """The tiny template's (Qwen3 JSON) tool-call text, as a policy would sample it."""
    return (
        content + "\n" if content else ""
    ) + f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'
