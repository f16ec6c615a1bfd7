"""The package imports without side effects and the config schemas validate their input."""

import subprocess
import sys

import pytest

from legorl_jax.config import MeshConfig, ModelConfig


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


def test_root_config_composes_every_mesh_preset():
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from legorl_jax.config import Config, register_configs

    import pathlib

    register_configs()
    conf = pathlib.Path(__file__).parents[1] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        for preset in sorted(p.stem for p in (conf / "mesh").glob("*.yaml")):
            cfg = OmegaConf.to_object(compose("config", overrides=[f"mesh={preset}"]))
            assert isinstance(cfg, Config)
