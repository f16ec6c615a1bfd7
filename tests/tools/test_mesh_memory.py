"""tools/mesh_memory.py: presets' state per device, compiled activations, the context search, the table."""

import importlib.util
import math
import pathlib
import subprocess
import sys

import jax
import pytest

TOOL = pathlib.Path(__file__).parents[2] / "tools" / "mesh_memory.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("mesh_memory", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_one_h200_host_splits_the_fp32_weights_8_ways_and_adamw_holds_two_moments_per_weight(tool):
    preset = tool.load_preset("h200x8")
    mesh = tool.device_mesh(preset, jax.devices()[:8])
    fixed = tool.state_bytes(tool.MODELS["qwen3-30b-a3b"], preset, mesh)
    assert 30.0e9 < fixed["param_count"] < 31.0e9  # Qwen3-30B-A3B: 30.5 B parameters
    # fp32 weights split 8 ways, up to the few replicated ones (the q/k norms over head_dim).
    ideal = fixed["param_count"] * 4 / 8
    assert ideal <= fixed["params"] < ideal * 1.001
    assert fixed["optimiser"] == 2 * fixed["params"] and fixed["grads"] == 2 * fixed["params"]


def test_the_context_search_finds_the_largest_fitting_multiple_of_the_step(tool):
    for largest in (0, 64, 192, 448, 1024):
        calls = []

        def fits(context, largest=largest, calls=calls):
            calls.append(context)
            return context <= largest

        assert tool.largest_context(fits, 64, 1024) == largest, calls
        assert len(calls) <= 2 * 5 + 1  # doubling then bisecting: logarithmic in limit / step


def test_the_table_on_the_8_device_preset_is_measured_and_its_largest_context_is_the_last_that_fits(tool):
    arch, mesh_config = tool.MODELS["tiny-moe"], tool.load_preset("cpu8")
    mesh = tool.device_mesh(mesh_config, jax.devices())
    rules = tool.rules_from_config(mesh_config)
    small, large = (tool.activations(arch, mesh, rules, c, "full") for c in (256, 512))
    for context, measured in ((256, small), (512, large)):
        assert measured["temp_1"] > 0 and measured["head"] > 0
        assert 0 < measured["kept"] <= measured["temp_2"] - measured["temp_1"]
        assert measured["kept"] >= tool.layer_input_bytes(arch, mesh, rules, context)  # its input at least
    assert large["total"] > small["total"] and large["kept"] > small["kept"]  # twice the row, more kept
    # A device just big enough for 256 tokens (state, batch and activations) but not 512.
    fixed = tool.state_bytes(arch, mesh_config, mesh)
    static = fixed["params"] + fixed["optimiser"] + fixed["grads"]
    routing = arch.num_moe_layers * arch.num_experts_per_tok * 4
    need = {
        c: static + 4 * c * (tool._ROW_FIELDS_BYTES + routing) + m["total"]
        for c, m in ((256, small), (512, large))
    }
    gib = (need[256] + need[512]) / 2 / tool.GIB
    row = tool.table_row(
        "cpu8",
        "tiny-moe",
        device_gib=gib,
        headroom=0.0,
        step=256,
        limit=512,
        report_at=256,
        devices=jax.devices(),
    )
    assert row["fits"] == 256 and row["fits_total"] == pytest.approx(need[256] / tool.GIB)
    assert row["devices"] == 8 and row["activations"] == pytest.approx(small["total"] / tool.GIB)
    line = tool.render([row], 0.0, 4).splitlines()[-1]
    assert line.startswith("| cpu8 (8 x") and "| tiny-moe (" in line and line.endswith("| 256 tokens |")


@pytest.mark.slow  # a fresh process compiles the tiny layer at each context again
def test_the_command_prints_the_row_of_a_preset():
    proc = subprocess.run(
        [
            sys.executable,
            str(TOOL),
            "--preset",
            "cpu8",
            "--model",
            "tiny-moe",
            "--device-gib",
            "1",
            "--step",
            "256",
            "--limit",
            "512",
            "--report-at",
            "256",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=600,
        env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| cpu8")]
    assert len(rows) == 2 and rows[0] == rows[1], proc.stdout  # as measured, then in the table
    assert "| tiny-moe (" in rows[0] and "| full |" in rows[0] and rows[0].endswith("| 512 tokens |")


def test_the_tpu_presets_are_read_with_their_device_memory(tool):
    assert tool.device_gib_of("v5p-64") == pytest.approx(95e9 / tool.GIB)
    assert tool.device_gib_of("v6e-8") == pytest.approx(32e9 / tool.GIB)
    sizes = {p: tool.axis_sizes(tool.load_preset(p)) for p in ("v5p-8", "v5p-64", "v6e-8")}
    assert [math.prod(s.values()) for s in sizes.values()] == [4, 32, 8]
    with pytest.raises(ValueError, match="no device memory known for preset 'cpu8'"):
        tool.device_gib_of("cpu8")


def test_qwen3_235b_a22b_is_known_with_its_235_billion_parameters_split_over_the_preset(tool):
    preset = tool.load_preset("h200x8")
    fixed = tool.state_bytes(
        tool.MODELS["qwen3-235b-a22b"], preset, tool.device_mesh(preset, jax.devices()[:8])
    )
    assert 235.0e9 < fixed["param_count"] < 235.2e9  # Qwen3-235B-A22B: 235.1 B parameters
    ideal = fixed["param_count"] * 4 / 8
    assert ideal <= fixed["params"] < ideal * 1.001


def test_the_eight_host_long_preset_puts_one_row_on_each_host_split_over_its_eight_devices(tool):
    preset = tool.load_preset("h200x8x8_long")
    sizes = tool.axis_sizes(preset)
    assert math.prod(sizes.values()) == 64 and sizes["fsdp"] == sizes["expert"] == 8
    rules = dict(tool.rules_from_config(preset))
    assert rules["batch"] == ("data", "fsdp")  # 8 batch shards: a micro-batch of 8 rows is one per host
    assert rules["seq"] == ("context", "expert")  # a row's tokens over its host's 8 devices
    assert rules["experts"] == ("expert",) and rules["embed"] == ("fsdp", "expert")  # as h200x8x8
    assert preset.distributed.enabled and tool.device_gib_of("h200x8x8_long") == 139.0
    assert ("h200x8x8_long", "qwen3-235b-a22b") in tool.DEFAULT_ROWS
