"""Monitoring: the Tracker protocol and its Aim backend, alignment / behaviour / throughput metrics.

Submodules are imported by name (`legorl_jax.monitor.alignment`); importing this package does nothing.
"""
