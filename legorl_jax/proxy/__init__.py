"""The capture proxy: harnesses speak OpenAI or Anthropic to a per-session URL; the proxy renders with the
policy's chat template, generates through an `Engine` with token ids in and out, and records at generation
time the sampled ids, behaviour log-probs and routed experts (docs/alignment.md §1, docs/security.md §1).

    from legorl_jax.proxy import CaptureProxy
    proxy = CaptureProxy.from_model_dir(engine, model_dir, cfg.proxy)
    await proxy.start("127.0.0.1", 0)
    info = proxy.open_session(task_id, trial_id, trial_dir=...)
    record = await proxy.close_session(info.session_id)     # types.SessionRecord

    python -m legorl_jax.proxy --engine-url URL --model DIR --host 127.0.0.1 --port P --admin-token TOKEN

Modules: base.py (the `Proxy` protocol the rollout uses), app.py (HTTP, sessions' lifecycle), session.py (one
session), recorder.py (branches and verbatim token record), toolcalls.py (parsers), openai_api.py,
responses_api.py and anthropic_api.py (wire formats), chat.py (the surface-neutral request and reply),
archive.py (the trial folder). Importing this package loads no jax.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the lazy attributes below are, for the type checker
    from legorl_jax.proxy.app import CaptureProxy, SessionInfo

__all__ = ["CaptureProxy", "SessionInfo"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from legorl_jax.proxy import app

        return getattr(app, name)
    raise AttributeError(f"module 'legorl_jax.proxy' has no attribute {name!r}")
