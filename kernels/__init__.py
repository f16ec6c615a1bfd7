"""Pallas kernels, imported as `legorl_jax.kernels`.

Each op is a triple (docs/style.md rule 15): `kernel.py` (pallas_call and its block sizes), `ops.py` (the
public, differentiable entry point) and `reference.py` (a plain jnp oracle). Model and trainer import only
`ops`.
"""
