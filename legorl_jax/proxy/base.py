"""The `Proxy` protocol: what the rollout needs of a capture proxy, and the session's address.

    info = proxy.open_session(task_id, trial_id, {"attempt": 0}, trial_dir=folder)
    ... the harness calls info.openai_base_url / info.anthropic_base_url ...
    proxy.session_flags(info.session_id)           # what the policy did so far (engine_failed, ...)
    record = await proxy.close_session(info.session_id)   # types.SessionRecord, archived

`CaptureProxy` (app.py) is the implementation; this module loads neither aiohttp nor jax.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Protocol

from legorl_jax.types import SessionFlags, SessionRecord


@dataclasses.dataclass(frozen=True)
class SessionInfo:
    """What a harness needs to reach its session."""

    session_id: str
    openai_base_url: str
    anthropic_base_url: str


class Proxy(Protocol):
    """Sessions of a capture proxy, one per trial attempt (module docstring)."""

    @property
    def base_url(self) -> str | None:
        """`http://host:port` once serving, else None."""
        ...

    def open_session(
        self,
        task_id: str = "",
        trial_id: str = "",
        metadata: dict[str, Any] | None = None,
        trial_dir: str | os.PathLike | None = None,
    ) -> SessionInfo:
        """A new session whose record is archived to `trial_dir` when it closes."""
        ...

    def session_flags(self, session_id: str) -> SessionFlags:
        """The open session's flags (a frozen record); none set for a session that is closed or unknown."""
        ...

    def find_session(self, trial_id: str, trial_dir: str | os.PathLike) -> str | None:
        """The id of the open session of `trial_id` archived to `trial_dir`, or None."""
        ...

    async def close_session(self, session_id: str) -> SessionRecord:
        """Closes the session once its request in flight is done, archives it, returns its record."""
        ...
