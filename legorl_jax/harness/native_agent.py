"""Agents shipped as one native binary on the npm registry (Claude Code, OpenCode, Codex): install once, run
in the sandbox.

    package = NativePackage("claude_code", "@anthropic-ai/claude-code", "2.1.197", ...)
    install(package)                          # tools/install_harness.py NAME; idempotent, offline once cached
    root = require(package)                   # the install dir, or HarnessNotInstalled naming the command
    result = await run_binary(sandbox, package, argv, env=..., timeout=...)

Claude Code and OpenCode are Bun-compiled executables linked against glibc only, Codex a static (musl) Rust
executable; each is published as per-platform npm packages beside a thin launcher package. `install` runs
`npm install` of the pinned launcher version into `install_dir(name)/npm` (npm keeps the tarballs in its
cache, so a re-install works offline), takes the platform package's executable, and hard-links (or copies) it
to `install_dir(name)/bin/<binary>`; writing `installed.json` last is what makes it installed. The adapters
bind-mount that `bin/` read-only at `package.mount` in the trial sandbox and run it there with `sandbox.exec`:
no Node in the sandbox, nothing downloaded at trial time. They execute their tools where they run, so their
sandbox uses network `proxy_only` (only the capture proxy is reachable). The pinned versions are those whose
`engines.node` this machine's Node 20 satisfies.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import platform
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

from legorl_jax.harness.base import HarnessCrashed, HarnessNotInstalled
from legorl_jax.harness.install import clear, install_dir, install_record, run_command, write_record

HOME = "/tmp/legorl-agent-home"
"""The agent's $HOME inside the sandbox (writable tmpfs): its settings, caches and session files."""


@dataclasses.dataclass(frozen=True)
class NativePackage:
    """One npm-published native agent and where it goes."""

    name: str
    """The harness name (install dir and `tools/install_harness.py NAME`)."""
    npm_name: str
    """The launcher package on the npm registry."""
    version: str
    """Pinned: the newest whose `engines.node` Node 20 satisfies, verified against the proxy here."""
    platform_binaries: Mapping[str, str]
    """`platform.machine()` -> the executable's path inside node_modules (the per-platform package)."""
    binary: str
    """The executable's name under `bin/` and in the sandbox."""
    mount: str
    """Where `bin/` is bind-mounted (read-only) in the agent sandbox."""

    @property
    def install_command(self) -> str:
        return f"python tools/install_harness.py {self.name}"

    @property
    def sandbox_binary(self) -> str:
        return f"{self.mount}/{self.binary}"


def installed(package: NativePackage) -> dict[str, Any] | None:
    """The install record when the pinned version's executable is in place, else None."""
    root = install_dir(package.name)
    record = install_record(root)
    if record is None:
        return None
    binary = root / "bin" / package.binary
    ok = record.get("version") == package.version and binary.is_file() and os.access(binary, os.X_OK)
    return record if ok else None


def require(package: NativePackage) -> pathlib.Path:
    """The install dir of `package`; HarnessNotInstalled with the install command when it is not installed."""
    if installed(package) is None:
        raise HarnessNotInstalled(
            f"{package.npm_name}@{package.version} is not installed in {install_dir(package.name)}; "
            f"install it with: {package.install_command}"
        )
    return install_dir(package.name)


def install(package: NativePackage) -> str:
    """npm-installs the pinned version and lays its executable out under `install_dir` (module docstring)."""
    root = install_dir(package.name)
    if (record := installed(package)) is not None:
        return f"{package.npm_name} {record['version']} is already installed in {root}"
    machine = platform.machine()
    inside = package.platform_binaries.get(machine)
    if inside is None:
        raise SystemExit(
            f"{package.npm_name}: no native build is wired up for machine {machine!r} "
            f"(known: {sorted(package.platform_binaries)})"
        )
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit(f"installing {package.name} needs npm (Node >= 18) on PATH; none was found")
    clear(root, ("installed.json", "bin", "npm"))
    spec = f"{package.npm_name}@{package.version}"
    # --prefer-offline: a tarball npm already cached is used without asking the registry.
    argv = [npm, "install", "--prefix", str(root / "npm"), "--no-save", "--no-audit", "--no-fund",
            "--prefer-offline", "--ignore-scripts", spec]  # fmt: skip
    run_command(argv, f"npm install of {spec}")
    source = root / "npm" / "node_modules" / inside
    if not source.is_file():
        raise SystemExit(f"npm installed {spec} but its native executable {source} is missing")
    (root / "bin").mkdir()
    target = root / "bin" / package.binary
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
    target.chmod(0o755)
    version = subprocess.run([str(target), "--version"], capture_output=True, text=True, timeout=60)
    if version.returncode != 0 or package.version not in version.stdout:
        raise SystemExit(
            f"{target} --version exited {version.returncode} printing {version.stdout.strip()!r}, "
            f"expected version {package.version}: {version.stderr.strip()[-1000:]}"
        )
    record = {
        "package": package.npm_name,
        "version": package.version,
        "binary": str(target),
        "machine": machine,
    }
    write_record(root, record)
    return f"installed {spec} into {root}"


def json_events(stdout: str) -> list[dict[str, Any]]:
    """The JSON objects of an agent's JSON-lines event stream (`codex exec --json`, `opencode run --format
    json`); other lines skipped."""
    events = []
    for line in stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


async def run_binary(sandbox: Any, package: NativePackage, args: list[str], *, env: Mapping[str, str],
                     workdir: str, timeout: float, wrapper: tuple[str, ...] = ()) -> Any:  # fmt: skip
    """Runs the mounted executable (behind `wrapper`, an argv prefix, if any) in the sandbox with a fresh
    $HOME; its ExecResult (a timeout included)."""
    made = await sandbox.exec(["mkdir", "-p", HOME], timeout=30)
    if made.exit_code != 0:
        raise HarnessCrashed(
            f"could not make the agent's home {HOME} in the sandbox: {made.stderr.strip()[-500:]}"
        )
    return await sandbox.exec([*wrapper, package.sandbox_binary, *args], timeout=timeout, workdir=workdir,
                              env={"HOME": HOME, **env})  # fmt: skip
