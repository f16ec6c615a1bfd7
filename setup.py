"""Package layout: `kernels/` is installed as `legorl_jax.kernels`.

A top-level package named `kernels` would clash with the PyPI package of that name, so the
directory is mapped under our namespace. Subpackages are discovered, so a new kernel needs no edit here.
"""

from setuptools import find_packages, setup

packages = ["legorl_jax"] + [f"legorl_jax.{p}" for p in find_packages("legorl_jax")]
packages += ["legorl_jax.kernels"] + [f"legorl_jax.kernels.{p}" for p in find_packages("kernels")]

setup(
    packages=packages,
    package_dir={"legorl_jax": "legorl_jax", "legorl_jax.kernels": "kernels"},
)
