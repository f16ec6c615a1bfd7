"""Sandboxes: one isolated, disposable machine per trial (docs/security.md §2).

    async with make_sandbox(SandboxSpec(image=tag)) as sb:
        result = await sb.exec("python3 -m pytest -q", timeout=120)
        patch = await sb.diff()

`make_sandbox(spec, backend="auto")` returns an unstarted sandbox: Docker when a daemon answers, else
bubblewrap. `spec_from_config(cfg.sandbox, image=...)` builds a spec from the `sandbox` config group.
Importing this package starts nothing and reaches no daemon.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from legorl_jax.sandbox.base import NETWORK_MODES, ExecResult, Sandbox, SandboxError, SandboxSpec

if TYPE_CHECKING:
    from legorl_jax.config import SandboxConfig

BACKENDS = ("auto", "docker", "bwrap")

__all__ = [
    "BACKENDS",
    "NETWORK_MODES",
    "ExecResult",
    "Sandbox",
    "SandboxError",
    "SandboxSpec",
    "make_sandbox",
    "resolve_backend",
    "spec_from_config",
]


def resolve_backend(backend: str = "auto") -> str:
    """'docker' or 'bwrap': `backend` itself, or for 'auto' Docker when a daemon answers, else bubblewrap."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend != "auto":
        return backend
    from legorl_jax.sandbox import daemon

    return "docker" if daemon.available() else "bwrap"


def make_sandbox(spec: SandboxSpec, backend: str = "auto") -> Sandbox:
    """An unstarted sandbox for `spec` on `backend` ('auto' | 'docker' | 'bwrap')."""
    if not isinstance(spec, SandboxSpec):
        raise TypeError(f"spec must be a SandboxSpec, got {type(spec).__name__}")
    if resolve_backend(backend) == "docker":
        from legorl_jax.sandbox.docker_backend import DockerSandbox

        return DockerSandbox(spec)
    from legorl_jax.sandbox.bwrap_backend import BwrapSandbox

    return BwrapSandbox(spec)


def spec_from_config(
    config: SandboxConfig,
    *,
    image: str,
    workdir: str = "/testbed",
    proxy_port: int | None = None,
    network: str | None = None,
    labels: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    mounts: Mapping[str, str] | None = None,
) -> SandboxSpec:
    """The `SandboxSpec` of one trial from the run's `sandbox` config plus what only the trial knows."""
    return SandboxSpec(
        image=image,
        workdir=workdir,
        network=network or config.network,
        proxy_port=proxy_port,
        cpus=config.cpus,
        memory_mb=config.memory_mb,
        pids=config.pids,
        disk_mb=config.disk_mb,
        env=dict(env or {}),
        labels=dict(labels or {}),
        output_limit_bytes=config.output_limit_bytes,
        read_only_root=config.read_only_root,
        mounts=dict(mounts or {}),
    )
