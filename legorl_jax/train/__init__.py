"""The trainer: advantages, batch packing, losses, the sharded train step, optimiser state, checkpoints and
weight publishing (docs/architecture.md §3, §7).

Modules are imported by name (`legorl_jax.train.loss`, `legorl_jax.train.step`, ...); importing this
package does nothing.
"""
