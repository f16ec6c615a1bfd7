"""Jitted full (packed) forwards of a policy: the oracle the engine's results are held to."""

import functools

import jax
import numpy as np
from flax import nnx

MAX_LEN = 64  # the shared engine's context (conftest.py)
SLOTS = 4  # its decode slots


@functools.partial(jax.jit, static_argnames="graphdef")
def _forward(graphdef, state, ids, segments, forced):
    out = nnx.merge(graphdef, state)(ids, segment_ids=segments, forced_experts=forced)
    return out.logits, out.routed_experts


@functools.partial(jax.jit, static_argnames=("graphdef", "temperature"))
def _logprobs(graphdef, state, ids, targets, segments, forced, temperature):
    model = nnx.merge(graphdef, state)
    return model.token_logprobs(
        ids, targets, segment_ids=segments, forced_experts=forced, temperature=temperature
    )


class Reference:
    """Jitted full (packed) forwards of one policy at a fixed width (MAX_LEN unless given): the oracle of
    the engine tests."""

    def __init__(self, policy, width=MAX_LEN):
        self.graphdef, self.state = nnx.split(policy)
        self.config = policy.config
        self.width = width  # every forward is padded to it (one compile)

    def _pad(self, tokens):
        ids = np.zeros((1, self.width), np.int32)
        ids[0, : len(tokens)] = tokens
        seg = np.zeros((1, self.width), np.int32)
        seg[0, : len(tokens)] = 1
        return ids, seg

    def _forced(self, routed):
        c = self.config
        forced = np.full((c.num_moe_layers, 1, self.width, c.num_experts_per_tok), -1, np.int32)
        if routed is not None:
            forced[:, 0, : len(routed)] = np.asarray(routed, np.int32).transpose(1, 0, 2)
        return forced

    def logits_and_routing(self, tokens):
        """(float32[T, V] logits, int32[T, L, K] native routing) of the sequence `tokens`."""
        ids, seg = self._pad(tokens)
        logits, routed = _forward(self.graphdef, self.state, ids, seg, self._forced(None))
        n = len(tokens)
        return np.asarray(logits)[0, :n], np.asarray(routed)[:, 0, :n].transpose(1, 0, 2)

    def token_logprobs(self, tokens, routed=None, temperature=1.0):
        """float32[T - 1]: log_softmax(logits_t / T)[tokens[t + 1]], with the rows of `routed` forced."""
        ids, seg = self._pad(tokens)
        targets = np.zeros_like(ids)
        targets[0, : len(tokens) - 1] = tokens[1:]
        lp = _logprobs(self.graphdef, self.state, ids, targets, seg, self._forced(routed), temperature)
        return np.asarray(lp)[0, : len(tokens) - 1]
