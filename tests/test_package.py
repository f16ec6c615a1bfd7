"""The package imports without side effects and the config schemas validate their input."""

import pathlib
import subprocess
import sys

import pytest

from legorl_jax.config import MeshConfig, ModelConfig

CONF = pathlib.Path(__file__).parents[1] / "conf"


def test_importing_the_package_initialises_no_jax_backend():
    code = "import legorl_jax, legorl_jax.types, legorl_jax.config, sys; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_kernels_directory_is_importable_as_legorl_jax_kernels():
    import legorl_jax.kernels

    assert legorl_jax.kernels.__file__.replace("\\", "/").endswith("kernels/__init__.py")


def test_model_config_names_a_bad_dtype():
    with pytest.raises(ValueError, match="'int8'"):
        ModelConfig(dtype="int8")


def test_mesh_config_names_a_bad_axis_size():
    with pytest.raises(ValueError, match="mesh.tensor.*0"):
        MeshConfig(tensor=0)


def test_a_bad_model_dtype_override_names_the_value(compose_config):
    with pytest.raises(ValueError, match="model.dtype must be one of .* got 'int8'"):
        compose_config(["model.dtype=int8"])


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: MeshConfig(tensor=True), "mesh.tensor.*True"),
        (lambda: ModelConfig(scan_layers="yes"), "model.scan_layers must be true or false, got 'yes'"),
        (lambda: ModelConfig(path=""), "model.path must be an HF model directory, got ''"),
    ],
)
def test_model_and_mesh_configs_name_a_wrongly_typed_value(make, message):
    with pytest.raises(ValueError, match=message):
        make()
