#!/usr/bin/env python
"""Installs a third-party coding-agent harness so `legorl_jax.harness.get_harness(NAME)` can run it.

    python tools/install_harness.py NAME [--wheelhouse DIR]      # NAME: one of INSTALLERS below

Each harness has one installer function registered in `INSTALLERS`; every installer is idempotent (a
second run with the harness in place does nothing and says so) and works offline once it has run online
once (what it downloads is kept in a wheelhouse, by default `$XDG_CACHE_HOME/legorl_jax/wheels/NAME`).
Run it with the interpreter of the environment the harness must land in (`make test` uses `.venv`).

- `mini_swe_agent`: the `mini-swe-agent` 2.4.x package, in process. Its dependencies resolve together
  with ours, so it goes into this interpreter's environment (it is pyproject's `harness` extra), under a
  constraint that keeps every package already installed at its version: adding the harness never
  changes what the rest of the project runs on; if that cannot be done, pip says which package clashes.
- `swe_agent`: SWE-agent 1.1.0 in its own virtualenv (its dependencies clash with ours), installed editable
  from the upstream release archive (`--source PATH`; else the archive vendored beside the checkout when it
  is there, else GitHub's archive of the v1.1.0 tag; it prints which), plus a self-contained SWE-ReX 1.4.0
  server (`swerex-remote`) for the sandbox image's Python 3.11, which the adapter bind-mounts read-only into
  the trial sandbox, so nothing is downloaded at trial time. Everything lands under
  `legorl_jax.harness.swe_agent.install_dir()`.
- `claude_code`, `opencode`: the pinned npm release (`@anthropic-ai/claude-code`, `opencode-ai`; the newest
  whose `engines.node` this machine's Node 20 satisfies) via `npm install`, keeping only its native
  executable, which the adapter bind-mounts read-only into the trial sandbox
  (`legorl_jax.harness.native_agent`). npm's own cache makes a re-install work offline.
- `codex`: `@openai/codex` 0.171.0 the same way: npm installs the launcher and its platform package (a static
  musl executable, from the npm registry like everything else), and only that executable is kept and
  bind-mounted (`legorl_jax.harness.codex`).
- `terminus_2`: terminal-bench 0.2.18 (its Terminus-2 agent) in its own Python >= 3.12 virtualenv, plus the
  host's tmux staged for the sandbox (`legorl_jax.harness.terminus_2`).
- `openhands`: the OpenHands SDK and tools 1.58.2 in their own Python 3.12 virtualenv, plus that Python
  staged for the sandbox, where the SDK's process runs (`legorl_jax.harness.openhands`).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import pathlib
import subprocess
import sys
import tempfile

MINI_SWE_AGENT_REQUIREMENT = "mini-swe-agent>=2.4,<2.5"


def default_wheelhouse(name: str) -> pathlib.Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(pathlib.Path.home() / ".cache")
    return pathlib.Path(cache) / "legorl_jax" / "wheels" / name


def _pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)


def _installed_pins(replaced: str) -> str:
    """`name==version` of every distribution in this environment but `replaced` (editable/local ones left
    out)."""
    frozen = _pip("freeze", "--exclude-editable")
    if frozen.returncode != 0:
        raise SystemExit(f"pip freeze failed (exit {frozen.returncode}): {frozen.stderr.strip()[-1000:]}")
    keep = [line for line in frozen.stdout.splitlines() if "==" in line and " @ " not in line
            and _normalized(line.split("==")[0]) != _normalized(replaced)]  # fmt: skip
    return "\n".join(keep) + "\n"


def _normalized(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(".", "-")


def install_mini_swe_agent(wheelhouse: pathlib.Path) -> str:
    """mini-swe-agent 2.4.x into this environment (module docstring); returns what was done."""
    try:
        version = importlib.metadata.version("mini-swe-agent")
    except importlib.metadata.PackageNotFoundError:
        version = None
    if version is not None and version.startswith("2.4."):
        return f"mini-swe-agent {version} is already installed in {sys.prefix}"
    wheelhouse.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", prefix="legorl-pins-") as pins:
        pins.write(_installed_pins("mini-swe-agent"))
        pins.flush()
        common = ["-c", pins.name, MINI_SWE_AGENT_REQUIREMENT]
        # Offline first: everything from the wheelhouse a previous run filled.
        offline = _pip("install", "--no-index", "--find-links", str(wheelhouse), *common)
        if offline.returncode == 0:
            return f"installed {MINI_SWE_AGENT_REQUIREMENT} into {sys.prefix} from {wheelhouse}"
        fetched = _pip("download", "--dest", str(wheelhouse), *common)
        if fetched.returncode != 0:
            raise SystemExit(
                f"cannot fetch {MINI_SWE_AGENT_REQUIREMENT} without changing an installed package "
                f"(pip download exit {fetched.returncode}):\n{fetched.stderr.strip()[-3000:]}"
            )
        done = _pip("install", "--no-index", "--find-links", str(wheelhouse), *common)
        if done.returncode != 0:
            raise SystemExit(
                f"pip install of {MINI_SWE_AGENT_REQUIREMENT} failed (exit {done.returncode}):\n"
                f"{done.stderr.strip()[-3000:]}"
            )
    return f"installed {MINI_SWE_AGENT_REQUIREMENT} into {sys.prefix} (wheels kept in {wheelhouse})"


def install_swe_agent(wheelhouse: pathlib.Path, source: pathlib.Path | None = None) -> str:
    """SWE-agent 1.1.0 in its own venv plus the in-sandbox SWE-ReX runtime (module docstring)."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
    from legorl_jax.harness import swe_agent

    return swe_agent.install(source=source, wheelhouse=wheelhouse)


def install_native(name: str):
    """The installer of an npm-published native agent (`legorl_jax.harness.<name>.PACKAGE`); no wheels
    involved."""

    def installer(wheelhouse: pathlib.Path) -> str:
        import importlib

        sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
        from legorl_jax.harness import native_agent

        return native_agent.install(importlib.import_module(f"legorl_jax.harness.{name}").PACKAGE)

    return installer


def install_terminus_2(wheelhouse: pathlib.Path) -> str:
    """terminal-bench's Terminus-2 in its own venv plus the sandbox's tmux runtime (module docstring)."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
    from legorl_jax.harness import terminus_2

    return terminus_2.install()


def install_openhands(wheelhouse: pathlib.Path) -> str:
    """The OpenHands SDK in its own venv plus the interpreter its sandbox runs it with (module docstring)."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
    from legorl_jax.harness import openhands

    return openhands.install()


# NAME -> installer(wheelhouse) -> a one-line account of what it did. Add a harness by adding its function
# here.
INSTALLERS = {
    "mini_swe_agent": install_mini_swe_agent,
    "swe_agent": install_swe_agent,
    "claude_code": install_native("claude_code"),
    "opencode": install_native("opencode"),
    "terminus_2": install_terminus_2,
    "openhands": install_openhands,
    "codex": install_native("codex"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", choices=sorted(INSTALLERS), help="the harness to install")
    parser.add_argument(
        "--wheelhouse",
        type=pathlib.Path,
        default=None,
        help="where downloaded wheels are kept for offline re-installs (default: the user cache)",
    )
    parser.add_argument(
        "--source",
        type=pathlib.Path,
        default=None,
        help="swe_agent: the SWE-agent release archive or unpacked tree to install from",
    )
    args = parser.parse_args(argv)
    extra = {"source": args.source} if args.source is not None else {}
    if extra and args.name != "swe_agent":
        parser.error("--source applies to swe_agent only")
    print(INSTALLERS[args.name](args.wheelhouse or default_wheelhouse(args.name), **extra))
    return 0


if __name__ == "__main__":
    sys.exit(main())
