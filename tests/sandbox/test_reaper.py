"""The reaper: a driver killed with SIGKILL leaks nothing past the next start; owner liveness is exact."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from legorl_jax.sandbox import SandboxSpec, make_sandbox, reaper

DRIVER = textwrap.dedent("""
    import asyncio, json, sys
    from legorl_jax.sandbox import SandboxSpec, make_sandbox

    async def main():
        spec = SandboxSpec(image=sys.argv[2], network=sys.argv[3], proxy_port=int(sys.argv[4]) or None)
        sb = make_sandbox(spec, backend=sys.argv[1])
        await sb.start()
        await sb.exec("sleep 1000 &")
        cgroup = sb._cgroup.dirs if getattr(sb, "_cgroup", None) else {}
        print(json.dumps({"name": sb.name, "network": getattr(sb, "network", None),
                          "state": str(getattr(sb, "state", "") or ""),
                          "cgroups": [str(p) for p in cgroup.values()]}), flush=True)
        await asyncio.sleep(1000)

    asyncio.run(main())
""")


def _docker_leftovers(found: dict) -> list[str]:
    import docker

    from legorl_jax.sandbox import daemon

    api, left = daemon.client().api, []
    for kind, inspect in (("name", api.inspect_container), ("network", api.inspect_network)):
        if found.get(kind):
            try:
                inspect(found[kind])
                left.append(found[kind])
            except docker.errors.NotFound:
                pass
    if found.get("network") and os.geteuid() == 0:
        chains = subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout
        suffix = found["network"].removeprefix("legorl-")
        left += [line for line in chains.splitlines() if suffix in line]
    return left


def _bwrap_leftovers(found: dict) -> list[str]:
    return [p for p in [found["state"], *found["cgroups"]] if p and Path(p).exists()]


async def test_a_driver_killed_with_sigkill_leaves_nothing_after_the_next_start(backend, base_image):
    network = "proxy_only" if backend == "docker" and os.geteuid() == 0 else "none"
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, backend, base_image, network, "18999"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        found = json.loads(driver.stdout.readline())
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    leftovers = _docker_leftovers if backend == "docker" else _bwrap_leftovers
    assert leftovers(found), "the killed driver's sandbox should still exist before the next start"
    async with make_sandbox(SandboxSpec(image=base_image), backend=backend) as sb:
        assert (await sb.exec(["true"])).exit_code == 0
        assert leftovers(found) == []


def test_owner_liveness_tells_live_dead_recycled_and_foreign_owners_apart():
    mine = reaper.owner_labels({"run": "r1"})
    assert mine["legorl.run"] == "r1" and reaper.owner_alive(mine) is True
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    labels = dict(
        mine, **{reaper.OWNER_PID: str(child.pid), reaper.OWNER_START: reaper.process_start(child.pid)}
    )
    assert reaper.owner_alive(labels) is True
    child.kill()
    child.wait()
    assert reaper.owner_alive(labels) is False
    recycled = dict(mine, **{reaper.OWNER_START: "1"})  # our pid, but a different process start time
    assert reaper.owner_alive(recycled) is False
    assert reaper.owner_alive(dict(mine, **{reaper.OWNER_BOOT: "another-boot"})) is False
    assert reaper.owner_alive(dict(mine, **{reaper.OWNER_HOST: "another-machine"})) is None


def test_registered_cleanups_run_once_at_exit_and_on_sigterm(tmp_path):
    code = textwrap.dedent(f"""
        import os, signal, sys, time
        from legorl_jax.sandbox import reaper
        reaper.register(lambda: open({str(tmp_path / "ran")!r}, 'a').write('x'))
        if sys.argv[1] == 'term':
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
    """)
    for how in ("exit", "term"):
        (tmp_path / "ran").unlink(missing_ok=True)
        proc = subprocess.run(
            [sys.executable, "-c", code, how], cwd=Path(__file__).resolve().parents[2], timeout=30
        )
        assert (tmp_path / "ran").read_text() == "x", how
        assert proc.returncode == (0 if how == "exit" else -signal.SIGTERM)


@pytest.mark.docker
def test_the_docker_reaper_spares_live_owners(docker_available, base_image):
    assert docker_available, "no Docker daemon answers (make system starts one)"
    from legorl_jax.sandbox import daemon

    api = daemon.client().api
    container = api.create_container(base_image, command=["true"], labels=reaper.owner_labels())["Id"]
    try:
        reaper.reap_docker_orphans(daemon.client())
        assert api.inspect_container(container)["Id"] == container
    finally:
        api.remove_container(container, force=True)


@pytest.mark.docker
def test_reaping_by_owner_removes_that_owners_containers_only_and_refuses_an_owner_without_its_labels(
    docker_available, base_image
):
    assert docker_available, "no Docker daemon answers (make system starts one)"
    from legorl_jax.sandbox import daemon

    api = daemon.client().api
    # A process of another machine (a lost Ray node's slot), as its own labels named it.
    lost = {**reaper.owner_identity(), reaper.OWNER_HOST: "lost-node", reaper.OWNER_PID: "4242"}
    left = api.create_container(base_image, command=["true"], labels=reaper.owner_labels(lost))["Id"]
    ours = api.create_container(base_image, command=["true"], labels=reaper.owner_labels())["Id"]
    try:
        with pytest.raises(ValueError, match="owner_pid"):
            reaper.reap_owned_by(daemon.client(), {reaper.OWNER_HOST: "lost-node"})
        removed = reaper.reap_owned_by(daemon.client(), lost)
        assert len(removed) == 1
        assert not api.containers(all=True, filters={"id": left})
        assert api.inspect_container(ours)["Id"] == ours
    finally:
        for container in (left, ours):
            with contextlib.suppress(Exception):
                api.remove_container(container, force=True)


@pytest.mark.docker
@pytest.mark.skipif(os.geteuid() != 0, reason="proxy_only firewall rules need root")
def test_stale_rule_removal_keeps_the_rules_of_a_bridge_another_daemon_owns(docker_available):
    """A second daemon on this host (a second node's) has proxy_only networks the first does not list; its
    reaper must leave their rules alone, and drop them once the bridge is gone."""
    assert docker_available, "no Docker daemon answers (make system starts one)"
    from legorl_jax.sandbox import daemon, docker_network

    suffix = f"t{os.getpid():010d}"[:11]
    bridge, chain = f"lgr-{suffix}", f"LGR-{suffix}"

    def chains() -> str:
        return subprocess.run(["iptables", "-S"], capture_output=True, text=True, check=True).stdout

    subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True)  # no daemon lists it
    try:
        docker_network._add_rules(chain, bridge, "10.231.255.241", 18999)
        docker_network.remove_stale_rules(daemon.client())
        assert f"-N {chain}" in chains() and f"-A INPUT -i {bridge} -j {chain}" in chains()
    finally:
        subprocess.run(["ip", "link", "del", bridge], check=True)
    docker_network.remove_stale_rules(daemon.client())
    assert chain not in chains() and bridge not in chains()
