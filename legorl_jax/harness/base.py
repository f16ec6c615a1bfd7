"""The `Harness` protocol: an unmodified coding agent, configured (never patched) to work on one task.

    result = await harness.run(task, sandbox, llm)        # HarnessResult; raises HarnessCrashed

`llm` (`LLMEndpoint`) carries the proxy session's OpenAI and Anthropic base URLs, the model name and the
step limit; `sandbox` is the trial's started agent sandbox (the repository at `task.workdir`, history
stripped, hidden tests absent). An adapter only configures its harness: the base URL, the model name, the
step limit, cost tracking off, timeouts, and command execution pointed at `sandbox` with its limits intact.
An adapter also says what its trial sandbox needs: `network` (`none`, or `proxy_only` when the agent runs
inside and must reach the proxy), `mounts` (read-only host folders, or None) and `sandbox_user` (None: the
image's user). How the run ended is the `HarnessResult`'s `exit_status`, a policy `Outcome`:

- `submitted`: the agent said it was done (a submit tool, a final answer, the harness's own end);
- `step_limit`: the step limit ended it;
- `context_overflow`: the proxy refused a prompt over the context window;
- `no_tool_collapse`: the proxy ended the session after replies without tool calls;
- `format_failure`: the agent could not go on because its output did not parse.
These are the policy's doing and stay in the loss. `HarnessCrashed` is the harness failing on its own
(a traceback, a missing binary, an engine error it could not survive): the trial is dropped.
The diff is never taken from the harness: the rollout takes `git diff` in the sandbox afterwards.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from legorl_jax.types import Outcome
from legorl_jax.validate import positive_int

if TYPE_CHECKING:
    from legorl_jax.sandbox.base import Sandbox
    from legorl_jax.tasks.schema import Task


class HarnessCrashed(RuntimeError):
    """The harness failed for reasons of its own or of the infrastructure; the trial is dropped."""


class HarnessNotInstalled(RuntimeError):
    """The selected harness is not installed; the message holds the command that installs it."""


@dataclasses.dataclass(frozen=True)
class LLMEndpoint:
    """Where the harness sends its model calls (one proxy session) and how long it may go on."""

    openai_base_url: str
    """Ends in /v1 (OpenAI SDKs and litellm take it as `base_url` / `api_base`)."""
    anthropic_base_url: str
    """Without /v1 (the Anthropic SDK and Claude Code append `/v1/messages`)."""
    model: str = "legorl-policy"
    """The model name the harness sends (the proxy accepts any)."""
    step_limit: int = 30
    """Most model calls (agent steps) the harness may make."""
    api_key: str = "legorl-session"
    """Sent as the bearer / x-api-key; the proxy's model API needs none (the session id is the secret)."""

    def __post_init__(self) -> None:
        for name in ("openai_base_url", "anthropic_base_url"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.startswith(("http://", "https://")):
                raise ValueError(f"{name} must be an http(s) URL, got {value!r}")
        positive_int("step_limit", self.step_limit)


@dataclasses.dataclass(frozen=True)
class HarnessResult:
    """How one harness run ended."""

    exit_status: Outcome
    """How the run ended: one of the policy outcomes (module docstring), never an infrastructure one."""
    steps: int
    """Model calls the harness made."""
    log: str = ""
    """The harness's own log (its trajectory file or output), for the trial archive."""
    features: dict[str, float] = dataclasses.field(default_factory=dict)
    """What the harness saw itself do (commands run, edits, test runs, re-reads of edited files)."""

    def __post_init__(self) -> None:
        if not isinstance(self.exit_status, Outcome) or self.exit_status.is_infra_failure:
            policy = [o.value for o in Outcome if not o.is_infra_failure]
            raise ValueError(f"exit_status must be a policy Outcome ({policy}), got {self.exit_status!r}")


@runtime_checkable
class Harness(Protocol):
    """A coding agent run unmodified against the proxy (module docstring)."""

    name: str

    @property
    def network(self) -> str:
        """The trial sandbox's network: `none`, or `proxy_only` for an agent that runs inside it."""
        ...

    @property
    def mounts(self) -> Mapping[str, str] | None:
        """Read-only bind mounts (sandbox path -> host path) the agent needs, or None."""
        ...

    @property
    def sandbox_user(self) -> str | None:
        """The user the trial sandbox runs as (None: the image's own)."""
        ...

    async def run(self, task: Task, sandbox: Sandbox, llm: LLMEndpoint) -> HarnessResult:
        """Works on `task` in `sandbox` until it ends; raises HarnessCrashed when the harness itself fails."""
        ...
