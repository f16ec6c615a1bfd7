"""The `proxy_only` network of a Docker sandbox: only the capture proxy's address:port is reachable.

Each proxy_only sandbox gets its own Docker network, so trials never see each other:
- `internal=True`: Docker installs no route or masquerading to the outside, so no outside address is
  reachable (and its embedded DNS does not resolve outside names);
- a /28 subnet drawn from `SUBNET_POOL` (not Docker's default pools, which hold only ~30 networks) and a
  bridge named `lgr-<id>`, so the firewall rules below can name the interface;
- host firewall rules (iptables, INPUT chain `LGR-<id>`): from that bridge the host accepts TCP to the
  gateway address on the proxy port and drops everything else. Without them an internal network still
  reaches every port the host listens on. IPv6 is dropped the same way (and disabled in the container).
  Traffic the host would forward from or to the bridge is dropped too (FORWARD), whatever rules the daemon
  writes itself (none when it runs with --iptables=false).
The container reaches the proxy at the gateway address (`create_network` returns it); the Docker backend
relays that to a proxy on 127.0.0.1 (`relay.py`). The rules need root and a local daemon; otherwise
`create_network` raises `SandboxError` rather than give a weaker sandbox than asked for.

Rules are removed with their network (`remove_network`); `remove_stale_rules` deletes chains whose
network no longer exists (a killed owner; a bridge still on the host is another daemon's network, kept),
and the reaper calls it on every start.
"""

from __future__ import annotations

import ipaddress
import os
import random
import shutil
import socket
import subprocess
from typing import Any

from legorl_jax.sandbox.base import SandboxError

SUBNET_POOL = os.environ.get("LEGORL_SANDBOX_SUBNETS", "10.231.0.0/16")
"""Address space the per-sandbox /28 networks are drawn from."""
BRIDGE_OPTION = "com.docker.network.bridge.name"
_CHAIN_PREFIX = "LGR-"
_BRIDGE_PREFIX = "lgr-"
_ATTEMPTS = 24


def _firewall(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess:
    # -w: wait for the xtables lock instead of failing when another process (or dockerd) holds it.
    proc = subprocess.run([argv[0], "-w", *argv[1:]], capture_output=True, text=True, timeout=60)
    if check and proc.returncode != 0:
        raise SandboxError(f"{' '.join(argv)} failed: {proc.stderr.strip()}")
    return proc


def _require_local_root(client: Any) -> None:
    if os.geteuid() != 0 or shutil.which("iptables") is None:
        raise SandboxError(
            f"network='proxy_only' needs root and iptables on the Docker host to restrict the network to the "
            f"proxy port (uid {os.geteuid()}, iptables {'found' if shutil.which('iptables') else 'missing'})"
        )
    base_url = str(client.api.base_url)
    if "localhost" not in base_url and "/var/run" not in base_url and not base_url.startswith("http+unix"):
        raise SandboxError(f"network='proxy_only' needs a local Docker daemon, got {base_url!r}")


def create_network(client: Any, key: str, labels: dict[str, str], proxy_port: int) -> tuple[str, str]:
    """Creates the network `legorl-<key>` and its rules; returns (network name, gateway address)."""
    _require_local_root(client)
    import docker

    suffix = key[:11]
    name, bridge, chain = f"legorl-{key}", f"{_BRIDGE_PREFIX}{suffix}", f"{_CHAIN_PREFIX}{suffix}"
    subnets = list(ipaddress.IPv4Network(SUBNET_POOL).subnets(new_prefix=28))
    last_error: Exception | None = None
    for _ in range(_ATTEMPTS):
        subnet = random.choice(subnets)
        gateway = str(next(subnet.hosts()))
        ipam = docker.types.IPAMConfig(
            pool_configs=[docker.types.IPAMPool(subnet=str(subnet), gateway=gateway)]
        )
        try:
            client.api.create_network(
                name,
                driver="bridge",
                internal=True,
                ipam=ipam,
                labels=labels,
                check_duplicate=True,
                options={BRIDGE_OPTION: bridge, "com.docker.network.bridge.enable_icc": "false"},
            )
            break
        except docker.errors.APIError as exc:
            if "overlap" not in str(exc).lower():
                raise SandboxError(f"creating network {name} failed: {exc}") from exc
            last_error = exc  # another network took this subnet: draw again
    else:
        raise SandboxError(f"no free /28 in {SUBNET_POOL} after {_ATTEMPTS} draws: {last_error}")
    try:
        _add_rules(chain, bridge, gateway, proxy_port)
    except BaseException:
        remove_network(client, name)
        raise
    return name, gateway


def _add_rules(chain: str, bridge: str, gateway: str, port: int) -> None:
    _firewall(["iptables", "-N", chain])
    _firewall(["iptables", "-A", chain, "-p", "tcp", "-d", gateway, "--dport", str(port), "-j", "ACCEPT"])
    _firewall(["iptables", "-A", chain, "-j", "DROP"])
    _firewall(["iptables", "-I", "INPUT", "-i", bridge, "-j", chain])
    # Nothing is routed through the host either way. Docker's own isolation rules say so too, but a daemon
    # run with --iptables=false (a second daemon on one host, tools/second_dockerd.sh) writes none, and its
    # internal networks still give the container a default route via the gateway.
    for direction in ("-i", "-o"):
        _firewall(["iptables", "-I", "FORWARD", direction, bridge, "-j", "DROP"])
    if shutil.which("ip6tables"):
        _firewall(["ip6tables", "-I", "INPUT", "-i", bridge, "-j", "DROP"], check=False)


def _remove_rules(suffix: str) -> None:
    chain, bridge = f"{_CHAIN_PREFIX}{suffix}", f"{_BRIDGE_PREFIX}{suffix}"
    while _firewall(["iptables", "-D", "INPUT", "-i", bridge, "-j", chain], check=False).returncode == 0:
        pass
    for direction in ("-i", "-o"):
        while (
            _firewall(["iptables", "-D", "FORWARD", direction, bridge, "-j", "DROP"], check=False).returncode
            == 0
        ):
            pass
    _firewall(["iptables", "-F", chain], check=False)
    _firewall(["iptables", "-X", chain], check=False)
    if shutil.which("ip6tables"):
        while (
            _firewall(["ip6tables", "-D", "INPUT", "-i", bridge, "-j", "DROP"], check=False).returncode == 0
        ):
            pass


def remove_network(client: Any, name: str) -> None:
    """Removes the network `name` and its firewall rules (a missing network is not an error)."""
    import docker

    try:
        info = client.api.inspect_network(name)
    except docker.errors.NotFound:
        return
    bridge = (info.get("Options") or {}).get(BRIDGE_OPTION, "")
    if bridge.startswith(_BRIDGE_PREFIX) and os.geteuid() == 0 and shutil.which("iptables"):
        _remove_rules(bridge[len(_BRIDGE_PREFIX) :])
    try:
        client.api.remove_network(info["Id"])
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        raise SandboxError(f"removing network {name} failed: {exc}") from exc


def remove_stale_rules(client: Any) -> None:
    """Deletes `LGR-*` chains whose network is gone (its owner was killed between the two removals).

    A chain stays while its bridge exists on this host, even when `client`'s daemon does not list its
    network: that network belongs to another daemon of this host (a second node's in a local cluster,
    `tools/second_dockerd.sh`), whose live sandbox would otherwise lose its rules."""
    if os.geteuid() != 0 or shutil.which("iptables") is None:
        return
    listing = _firewall(["iptables", "-S"], check=False).stdout.splitlines()
    chains = [line.split()[1] for line in listing if line.startswith(f"-N {_CHAIN_PREFIX}")]
    if not chains:
        return
    # Listed after the chains: a network created meanwhile shows up here, so its chain is kept.
    live = {(n.get("Options") or {}).get(BRIDGE_OPTION, "") for n in client.api.networks()}
    for chain in chains:
        suffix = chain[len(_CHAIN_PREFIX) :]
        bridge = f"{_BRIDGE_PREFIX}{suffix}"
        if bridge not in live and not _interface_exists(bridge):
            _remove_rules(suffix)


def _interface_exists(name: str) -> bool:
    try:
        socket.if_nametoindex(name)
        return True
    except OSError:
        return False
