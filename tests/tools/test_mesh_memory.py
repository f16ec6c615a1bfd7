"""tools/mesh_memory.py: bytes per device of the multi-host presets (abstract state), and the command."""

import importlib.util
import pathlib
import subprocess
import sys

import pytest

TOOL = pathlib.Path(__file__).parents[2] / "tools" / "mesh_memory.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("mesh_memory", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_two_hosts_halve_the_bytes_per_device_of_one_and_adamw_holds_two_moments_per_weight(tool):
    one = tool.table_row("h200x8", "qwen3-30b-a3b", 139.0, 0.1, 4)
    two = tool.table_row("h200x8x2", "qwen3-30b-a3b", 139.0, 0.1, 4)
    assert (one["devices"], two["devices"]) == (8, 16)
    assert 30.0 < two["params_b"] < 31.0  # Qwen3-30B-A3B: 30.5 B parameters
    # fp32 weights split 16 ways, up to the few replicated ones (the q/k norms over head_dim).
    ideal = two["params_b"] * 1e9 * 4 / 16 / tool.GIB
    assert ideal <= two["params"] < ideal * 1.001
    assert two["params"] == pytest.approx(one["params"] / 2, rel=1e-3)
    assert two["optimiser"] == pytest.approx(2 * two["params"])
    assert one["fits"] < two["fits"] and two["fits"] % 1024 == 0


def test_the_235b_preset_fits_on_8_hosts_not_on_2(tool):
    assert tool.table_row("h200x8x2", "qwen3-235b-a22b", 139.0, 0.1, 4)["fits"] == 0
    row = tool.table_row("h200x8x8", "qwen3-235b-a22b", 139.0, 0.1, 4)
    assert row["devices"] == 64 and row["fits"] > 0


def test_the_command_prints_the_table_row_of_a_preset():
    proc = subprocess.run(
        [sys.executable, str(TOOL), "--preset", "h200x8x2", "--model", "qwen3-30b-a3b"],
        capture_output=True,
        text=True,
        timeout=300,
        env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = [line for line in proc.stdout.splitlines() if line.startswith("| h200x8x2")]
    assert len(row) == 1 and "qwen3-30b-a3b (30.5 B) | 16 | 7.11 | 14.22 | 14.22 |" in row[0], proc.stdout
    assert row[0].endswith("tokens |")
