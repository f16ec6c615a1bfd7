"""Network isolation: no route out by default; with proxy_only, exactly the proxy's address:port (also on a
second Docker daemon of this host, `slow`: the layout of a one-machine cluster, tools/second_dockerd.sh)."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import pathlib
import subprocess
import sys
import time

import pytest
from second_daemon import SUBNETS as SECOND_SUBNETS

PROBE = """
import socket, sys, concurrent.futures as cf
def probe(target):
    host, port = target.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=2) as s:
            s.sendall(b"ping")
            return f"{target} open {s.recv(100).decode()}"
    except OSError as exc:
        return f"{target} closed {type(exc).__name__}"
with cf.ThreadPoolExecutor(len(sys.argv) - 1) as pool:
    print("\\n".join(pool.map(probe, sys.argv[1:])))
"""
"""Run inside a sandbox as `python3 -c PROBE host:port ...`: one line per target, 'open pong:ping' or
'closed'."""


def _host_addresses() -> list[str]:
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True
    ).stdout
    return sorted({line.split()[3].split("/")[0] for line in out.splitlines()})


async def _probe(sb, targets: list[str]) -> dict[str, str]:
    result = await sb.exec(["python3", "-c", PROBE, *targets], timeout=30)
    assert result.exit_code == 0, result
    return {line.split()[0]: line.split(" ", 1)[1] for line in result.stdout.splitlines()}


async def test_without_network_no_host_or_outside_address_is_reachable(open_sandbox, tcp_server):
    server = await tcp_server()
    sb = await open_sandbox()
    targets = [f"{a}:{server.port}" for a in _host_addresses()] + ["1.1.1.1:53", "deb.debian.org:80"]
    seen = await _probe(sb, targets)
    assert all(v.startswith("closed") for v in seen.values()), seen
    assert server.hits == 0


async def test_proxy_only_reaches_the_proxy_port_and_nothing_else(open_sandbox, tcp_server):
    proxy, other = await tcp_server(), await tcp_server()
    sb = await open_sandbox(network="proxy_only", proxy_port=proxy.port)
    host = sb.proxy_url_base.removeprefix("http://").rsplit(":", 1)[0]
    assert sb.proxy_url_base == f"http://{host}:{proxy.port}"
    others = [a for a in _host_addresses() if a != host]
    blocked = [
        f"{host}:{other.port}",
        "1.1.1.1:53",
        *(f"{a}:{p}" for a in others for p in (proxy.port, other.port)),
    ]
    seen = await _probe(sb, [f"{host}:{proxy.port}", *blocked])
    assert seen.pop(f"{host}:{proxy.port}") == "open pong:ping"
    assert all(v.startswith("closed") for v in seen.values()), seen
    assert (proxy.hits, other.hits) == (1, 0)


async def test_proxy_only_reaches_a_proxy_that_listens_on_loopback_only(open_sandbox, tcp_server):
    proxy = await tcp_server(host="127.0.0.1")
    sb = await open_sandbox(network="proxy_only", proxy_port=proxy.port)
    host = sb.proxy_url_base.removeprefix("http://").rsplit(":", 1)[0]
    seen = await _probe(sb, [f"{host}:{proxy.port}"])
    assert seen == {f"{host}:{proxy.port}": "open pong:ping"} and proxy.hits == 1


@pytest.mark.docker
@pytest.mark.skipif(os.geteuid() != 0, reason="proxy_only firewall rules need root")
def test_proxy_only_rules_drop_what_the_host_would_forward_whatever_the_daemon_writes(docker_available):
    """A daemon run with --iptables=false (tools/second_dockerd.sh) writes no isolation rules of its own and
    gives an internal network's container a default route: our rules alone keep it from being routed."""
    assert docker_available, "no Docker daemon answers (make system starts one)"
    from legorl_jax.sandbox import daemon, docker_network

    def forward_rules() -> list[str]:
        out = subprocess.run(["iptables", "-S", "FORWARD"], capture_output=True, text=True, check=True).stdout
        return out.splitlines()

    name, _ = docker_network.create_network(daemon.client(), f"fwd{os.getpid():08d}", {}, 18999)
    try:
        bridge = daemon.client().api.inspect_network(name)["Options"][docker_network.BRIDGE_OPTION]
        rules = forward_rules()
        assert f"-A FORWARD -i {bridge} -j DROP" in rules and f"-A FORWARD -o {bridge} -j DROP" in rules
    finally:
        docker_network.remove_network(daemon.client(), name)
    assert not [r for r in forward_rules() if bridge in r]


SECOND_DAEMON_DRIVER = """
import asyncio, json, sys
from legorl_jax.sandbox import SandboxSpec, make_sandbox

async def main(probe, port, *targets):
    spec = SandboxSpec(image="legorl-base:latest", network="proxy_only", proxy_port=int(port))
    async with make_sandbox(spec, backend="docker") as sb:
        gateway = sb.proxy_url_base.removeprefix("http://").rsplit(":", 1)[0]
        result = await sb.exec(["python3", "-c", probe, *(t.replace("GATEWAY", gateway) for t in targets)])
        print(json.dumps({"gateway": gateway, "exit_code": result.exit_code, "stdout": result.stdout}))

asyncio.run(main(*sys.argv[1:]))
"""
"""A process whose sandboxes live on the daemon its environment names: one proxy_only sandbox runs PROBE."""


@pytest.mark.docker
@pytest.mark.slow
async def test_proxy_only_on_a_second_daemon_reaches_the_proxy_port_and_nothing_else(
    second_daemon, tcp_server
):
    """A second daemon of this host (no default bridge, no iptables rules of its own) gives a proxy_only
    sandbox the same network as the first: the proxy's port through the relay, nothing else."""
    proxy, other = await tcp_server(host="127.0.0.1"), await tcp_server()
    since = time.time()
    targets = [f"GATEWAY:{proxy.port}", f"GATEWAY:{other.port}", "1.1.1.1:53"]
    targets += [f"{a}:{other.port}" for a in _host_addresses()]
    driver = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SECOND_DAEMON_DRIVER, PROBE, str(proxy.port), *targets,
        env={**os.environ, **second_daemon.env}, stdout=asyncio.subprocess.PIPE,
        cwd=pathlib.Path(__file__).resolve().parents[2],
    )  # fmt: skip
    out, _ = await asyncio.wait_for(driver.communicate(), timeout=300)
    assert driver.returncode == 0
    ran = json.loads(out.decode().strip().splitlines()[-1])
    assert ran["exit_code"] == 0, ran
    seen = {line.split()[0]: line.split(" ", 1)[1] for line in ran["stdout"].splitlines()}
    assert seen.pop(f"{ran['gateway']}:{proxy.port}") == "open pong:ping"
    assert all(v.startswith("closed") for v in seen.values()), seen
    assert (proxy.hits, other.hits) == (1, 0)
    networks = second_daemon.client().api.events(
        since=int(since), until=int(time.time()) + 1, filters={"type": "network", "event": "create"},
        decode=True,
    )  # fmt: skip
    assert any(e["Actor"]["Attributes"]["name"].startswith("legorl-") for e in networks)
    assert ipaddress.ip_address(ran["gateway"]) in ipaddress.ip_network(SECOND_SUBNETS)
