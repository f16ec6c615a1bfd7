"""SamplingParams and the engine config validate with messages naming the field and value; the wire's
routed-experts encoding round-trips; the engine's Hydra presets compose."""

import base64

import numpy as np
import pytest

from legorl_jax.config import EngineConfig, SGLangConfig
from legorl_jax.engine.base import SamplingParams
from legorl_jax.engine.wire import WireError, decode_routed_experts, encode_routed_experts, parse_sampling


def test_sampling_defaults_are_sglangs_constant_ones():
    p = SamplingParams()
    assert (p.max_new_tokens, p.temperature, p.top_p, p.top_k, p.min_p) == (128, 1.0, 1.0, -1, 0.0)
    assert not p.filters and not p.greedy and p.seed is None
    assert SamplingParams(stop="\n").stop == ("\n",)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(max_new_tokens=-1), "max_new_tokens must be an int >= 0, got -1"),
        (dict(max_new_tokens=2.0), "max_new_tokens must be an int >= 0, got 2.0"),
        (dict(temperature=float("nan")), "temperature must be a finite number >= 0, got nan"),
        (dict(temperature=True), "temperature must be a finite number >= 0, got True"),
        (dict(top_p=1.5), r"top_p must lie in \(0, 1\], got 1.5"),
        (dict(top_k=0), "top_k must be -1 .* got 0"),
        (dict(min_p=-0.1), r"min_p must lie in \[0, 1\], got -0.1"),
        (dict(stop=[""]), "stop must be a non-empty string"),
        (dict(stop_token_ids=[1, -2]), r"stop_token_ids must be a list of ints >= 0, got \[1, -2\]"),
        (dict(seed=2**64), "seed must be an int in"),
        (dict(ignore_eos=1), "ignore_eos must be a bool, got 1"),
    ],
)
def test_bad_sampling_params_name_the_field_and_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


def test_wire_sampling_names_map_to_ours_and_errors_use_the_wire_name():
    p = parse_sampling({"sampling_seed": 5, "stop": ["a", "b"], "n": 1, "repetition_penalty": None})
    assert p.seed == 5 and p.stop == ("a", "b")
    with pytest.raises(WireError, match=r"sampling_params.sampling_seed must be .* got -1") as err:
        parse_sampling({"sampling_seed": -1})
    assert err.value.field == "sampling_params.sampling_seed"


def test_routed_experts_round_trip_through_sglangs_base64_int32():
    routed = np.random.default_rng(0).integers(0, 128, (7, 3, 4)).astype(np.uint8)
    text = encode_routed_experts(routed)
    assert len(base64.b64decode(text)) == 7 * 3 * 4 * 4  # int32 on the wire
    np.testing.assert_array_equal(decode_routed_experts(text, 3, 4), routed)
    with pytest.raises(WireError, match="not a multiple of 4 \\* L=3 \\* K=5"):
        decode_routed_experts(text, 3, 5)
    with pytest.raises(WireError, match="not valid base64"):
        decode_routed_experts("@@@", 3, 4)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: EngineConfig(backend="vllm"), "engine.backend must be one of .* got 'vllm'"),
        (lambda: EngineConfig(max_running=0), "engine.max_running must be a positive int, got 0"),
        (lambda: EngineConfig(dtype="int8"), "engine.dtype must be one of .* got 'int8'"),
        (lambda: EngineConfig(url="localhost:1"), "engine.url must be an http"),
        (
            lambda: EngineConfig(prefix_cache_slots=-1),
            "engine.prefix_cache_slots must be an int >= 0, got -1",
        ),
        (
            lambda: EngineConfig(prefix_cache_tokens=0),
            "engine.prefix_cache_tokens must be a positive int, got 0",
        ),
        (lambda: SGLangConfig(port=70000), "engine.sglang.port must be .* got 70000"),
        (
            lambda: SGLangConfig(extra_args=[1]),
            r"engine.sglang.extra_args must be a list of strings, got \[1\]",
        ),
    ],
)
def test_bad_engine_config_names_the_field_and_value(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_importing_the_engine_modules_starts_no_jax_backend():
    import subprocess
    import sys

    code = (
        "import legorl_jax.engine, sys; assert 'jax' not in sys.modules; "
        "import legorl_jax.engine.jax_engine, legorl_jax.engine.serve, legorl_jax.engine.sglang_client, "
        "legorl_jax.engine.sglang_launcher; from jax._src import xla_bridge; "
        "print(bool(xla_bridge._backends))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
