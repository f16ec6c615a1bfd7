"""A second Docker daemon on this machine for the second node of a local Ray cluster (tests and
`tools/bench_rollout.py --second-daemon`): `tools/second_dockerd.sh` driven from Python, and a Ray node
whose raylet, and so every worker it starts, talks to that daemon.

    daemon = start_second_daemon()                   # idempotent; the base image is loaded from the first
    add_node_on(cluster, daemon, num_cpus=1, ...)    # that node's trials run on `daemon`
    stop_second_daemon(daemon)

A node process finds its daemon through `DOCKER_HOST` (the `docker` SDK's `from_env`, per process:
`legorl_jax/sandbox/daemon.py`); Ray starts the raylet with a copy of this process's environment and the
raylet passes it on to its workers, so `add_node_on` sets it only while the node starts. The node's
proxy_only subnets come from `SUBNETS` (`LEGORL_SANDBOX_SUBNETS`): the two daemons share one kernel but not
their network lists, so they must not draw from one pool.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "tools" / "second_dockerd.sh"
SUBNETS = "10.232.0.0/16"
"""proxy_only subnets of the second daemon's sandboxes; the first daemon's users keep the default pool."""
START_TIMEOUT_S = 420  # the script waits 60 s for the daemon and up to 300 s to load the base image


@dataclass(frozen=True)
class SecondDaemon:
    name: str
    docker_host: str
    """`unix:///run/<name>.sock`."""

    @property
    def env(self) -> dict[str, str]:
        """What a node process needs to run its trials on this daemon."""
        return {"DOCKER_HOST": self.docker_host, "LEGORL_SANDBOX_SUBNETS": SUBNETS}

    def client(self) -> Any:
        import docker

        return docker.DockerClient(base_url=self.docker_host, timeout=120)


def _script(*argv: str, timeout_s: float) -> str:
    proc = subprocess.run(
        [str(SCRIPT), *argv], capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"{SCRIPT.name} {' '.join(argv)} failed with exit code {proc.returncode}: {proc.stderr.strip()}"
        )
    return proc.stdout


def start_second_daemon(name: str = "legorl-docker2", data_root: str | None = None) -> SecondDaemon:
    """Starts (or finds) the daemon `name` with the base image of the first; RuntimeError when it cannot."""
    out = _script("start", "--name", name, *(["--data-root", data_root] if data_root else []),
                  timeout_s=START_TIMEOUT_S)  # fmt: skip
    line = next((x for x in out.splitlines() if x.startswith("DOCKER_HOST=")), None)
    if line is None:
        raise RuntimeError(f"{SCRIPT.name} start printed no DOCKER_HOST line: {out!r}")
    return SecondDaemon(name, line.removeprefix("DOCKER_HOST="))


def stop_second_daemon(
    daemon: SecondDaemon | str, *, purge: bool = False, data_root: str | None = None
) -> None:
    """Stops the daemon and removes its exec root; `purge` removes its data root (images) as well."""
    name = daemon.name if isinstance(daemon, SecondDaemon) else daemon
    _script("stop", "--name", name, *(["--data-root", data_root] if data_root else []),
            *(["--purge"] if purge else []), timeout_s=120)  # fmt: skip


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """`env` in `os.environ` inside the block; the previous values (or their absence) after."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def add_node_on(cluster: Any, daemon: SecondDaemon, **node_args: Any) -> Any:
    """`cluster.add_node(**node_args)` whose raylet and workers use `daemon`."""
    with environment(daemon.env):
        return cluster.add_node(**node_args)
