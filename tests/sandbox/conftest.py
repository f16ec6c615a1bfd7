"""Fixtures for the sandbox tests: the same protocol tests run on both backends.

`backend` is parametrised over "docker" (marked `docker`: it needs a daemon, `make test` starts one, and
without one the test fails rather than pretend) and "bwrap" (needs the `bwrap` binary; its root
filesystem is exported from the Docker image when a daemon answers, else unpacked from the cached
debootstrap tarball). `open_sandbox(**spec_fields)` starts a sandbox of the base image on that backend
and closes it after the test. `tcp_server` is a tiny host-side TCP server that answers `pong:<data>`.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Callable

import pytest

from legorl_jax.sandbox import SandboxSpec, make_sandbox
from legorl_jax.sandbox.exec_sandbox import ExecSandbox

BACKENDS = [pytest.param("docker", marks=pytest.mark.docker), "bwrap"]


@pytest.fixture(scope="session")
def docker_available() -> bool:
    from legorl_jax.sandbox import daemon

    return daemon.available()


@pytest.fixture(scope="session")
def base_image(docker_available: bool) -> str:
    """The base image tag (built when missing), or the base root filesystem directory without Docker."""
    from legorl_jax.sandbox import images, rootfs

    if docker_available:
        return images.ensure_base_image()
    return str(rootfs.ensure_base_rootfs())


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, docker_available: bool) -> str:
    if request.param == "docker" and not docker_available:
        pytest.fail("no Docker daemon answers; start one (make system) or deselect with -m 'not docker'")
    if request.param == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed on this host (tools/system_setup.sh installs it)")
    return request.param


@pytest.fixture
async def open_sandbox(backend: str, base_image: str) -> AsyncIterator[Callable[..., object]]:
    opened: list[ExecSandbox] = []

    async def opener(**fields: object) -> ExecSandbox:
        fields.setdefault("image", base_image)
        sandbox = make_sandbox(SandboxSpec(**fields), backend=backend)
        opened.append(sandbox)
        await sandbox.start()
        return sandbox

    yield opener
    for sandbox in opened:
        await sandbox.close()


class TcpServer:
    """A host-side TCP server on <host>:<port> that answers each connection with b'pong:' + what it read."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.port = 0
        self.hits = 0
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> TcpServer:
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.hits += 1
        data = await reader.read(100)
        writer.write(b"pong:" + data)
        await writer.drain()
        writer.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()


@pytest.fixture
async def tcp_server() -> AsyncIterator[Callable[[], object]]:
    servers: list[TcpServer] = []

    async def factory(host: str = "0.0.0.0") -> TcpServer:
        server = await TcpServer(host).start()
        servers.append(server)
        return server

    yield factory
    for server in servers:
        await server.stop()
