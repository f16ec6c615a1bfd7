"""Relays that carry a proxy_only sandbox's traffic to the capture proxy on the host's loopback.

The capture proxy binds 127.0.0.1 (docs/security.md §1). A sandbox cannot reach the host's loopback, so the
sandbox layer listens where the sandbox can reach and copies bytes to `127.0.0.1:<proxy_port>` (or to the
proxy's own address when the sandbox runs on another machine than the proxy: a Ray node):
- Docker: on the sandbox network's gateway address, port `proxy_port` (the only host address:port its
  firewall rules let through). When that bind fails because the proxy itself listens on every address
  (0.0.0.0), the sandbox reaches the proxy directly and no relay is needed;
- bubblewrap: on a unix socket bound into the sandbox (its network namespace has no route out).
Each relay lives in the event loop that started the sandbox and closes with it. Connections are copied
both ways until either side closes; a proxy that is down closes the sandbox's connection at once.
"""

from __future__ import annotations

import asyncio
import errno
import logging

log = logging.getLogger(__name__)

_CHUNK = 1 << 16


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(_CHUNK):
            dst.write(data)
            await dst.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass  # either side went away; closing the other is all that is left to do
    finally:
        dst.close()


def _handler(proxy_port: int, proxy_host: str):
    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(proxy_host, proxy_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    return relay


async def start_tcp_relay(
    host: str, proxy_port: int, proxy_host: str = "127.0.0.1"
) -> asyncio.base_events.Server | None:
    """A relay listening on host:proxy_port, or None when the proxy already listens on every address."""
    try:
        return await asyncio.start_server(
            _handler(proxy_port, proxy_host), host, proxy_port, reuse_address=True
        )
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        log.debug("port %d is taken on %s: the proxy listens there itself", proxy_port, host)
        return None


async def start_unix_relay(
    path: str, proxy_port: int, proxy_host: str = "127.0.0.1"
) -> asyncio.base_events.Server:
    """A relay listening on the unix socket `path`."""
    return await asyncio.start_unix_server(_handler(proxy_port, proxy_host), path=path)
