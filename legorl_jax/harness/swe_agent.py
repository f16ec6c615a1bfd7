"""SWE-agent 1.1.0, unmodified, in its own virtualenv, its commands run by a SWE-ReX server in our sandbox.

    python tools/install_harness.py swe_agent [--source PATH]      # once (idempotent, offline-capable)
    harness = get_harness("swe_agent")
    result = await harness.run(task, sandbox, llm)

`install()` takes the release from `--source` when given, else from the archive vendored beside the
checkout (`VENDORED_ARCHIVE`, offline) when it is there, else from GitHub's archive of the release tag
(`UPSTREAM_ARCHIVE`), and prints which. What it lays out under `install_dir()` (default
`$XDG_CACHE_HOME/legorl_jax/harness/swe_agent`, or `$LEGORL_HARNESS_HOME/swe_agent`):
- `src/`: the release tree (`sweagent/`, `config/`, `tools/`, `trajectories/`), installed editable because
  `sweagent/__init__.py` requires those folders beside the package;
- `venv/`: SWE-agent's own virtualenv (litellm, swe-rex, textual... clash with ours);
- `runtime/`: swe-rex 1.4.0 and its dependencies, plus what the default tool bundles pip-install
  (`TOOL_REQUIREMENTS`), as CPython 3.11 manylinux wheels unpacked into one folder, for the sandbox
  image's /usr/bin/python3 (Debian bookworm, 3.11); the adapter mounts it read-only at `RUNTIME_MOUNT`
  and starts `python3 -m swerex.server` from it, so nothing is downloaded at trial time;
- `installed.json`: what was installed, written last (its presence is what "installed" means).

The adapter sets only configuration: `agent.model` = GenericAPIModelConfig on the session's OpenAI URL
(model `openai/<llm.model>`, `per_instance_call_limit` = the step limit, both cost limits 0,
`max_input_tokens` 0), the release's default tool-calling agent config (bash, str_replace_editor,
submit) with the Anthropic-only `cache_control` history processor left out, and the deployment pointed
at the trial sandbox's SWE-ReX server.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import sys
import tarfile
import tempfile
import urllib.request
from typing import Any

from legorl_jax.harness.base import HarnessCrashed, HarnessNotInstalled, HarnessResult, LLMEndpoint
from legorl_jax.harness.install import clear, install_record, run_command, write_record
from legorl_jax.harness.install import install_dir as _install_dir
from legorl_jax.types import Outcome

SWE_AGENT_VERSION = "1.1.0"
SWE_REX_REQUIREMENT = "swe-rex==1.4.0"
TOOL_REQUIREMENTS = ("tree-sitter==0.21.3", "tree-sitter-languages", "pip")
"""What the default config's tool bundles install at setup (edit_anthropic's install.sh runs
`pip install 'tree-sitter==0.21.3'` and `pip install 'tree-sitter-languages'`): shipped in the runtime
with a real pip, so inside the offline sandbox those commands find them already satisfied."""
SANDBOX_PYTHON = "3.11"
"""The Python of the sandbox base image (debootstrap bookworm: /usr/bin/python3 3.11)."""
RUNTIME_MOUNT = "/opt/legorl-swerex"
"""Where the SWE-ReX runtime is bind-mounted (read-only) in the agent sandbox."""
INSTALL_COMMAND = "python tools/install_harness.py swe_agent"
REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
VENDORED_ARCHIVE = REPO_ROOT.parent / "shared" / "vendor" / f"swe-agent-{SWE_AGENT_VERSION}.tar.gz"
"""The release archive kept beside the checkout for offline installs; used when it is there."""
UPSTREAM_ARCHIVE = f"https://github.com/SWE-agent/SWE-agent/archive/refs/tags/v{SWE_AGENT_VERSION}.tar.gz"
"""GitHub's archive of the release tag: the source when no archive is given or vendored."""

# SWE-agent's exit statuses (DefaultAgent info["exit_status"], possibly "submitted (exit_...)") -> ours.
EXIT_STATUS_MAP = {
    "submitted": Outcome.SUBMITTED,
    "exit_cost": Outcome.STEP_LIMIT,
    "exit_format": Outcome.FORMAT_FAILURE,
    "exit_context": Outcome.CONTEXT_OVERFLOW,
    "exit_forfeit": Outcome.SUBMITTED,
}


def install_dir() -> pathlib.Path:
    return _install_dir("swe_agent")


def installed() -> dict[str, Any] | None:
    """The install record when SWE-agent, its venv and the sandbox runtime are all in place, else None."""
    root = install_dir()
    record = install_record(root)
    if record is None:
        return None
    ok = (
        record.get("swe_agent") == SWE_AGENT_VERSION
        and (root / "venv" / "bin" / "python").exists()
        and (root / "runtime" / "swerex" / "server.py").exists()
        and (root / "runtime" / "bin" / "pip").exists()
    )
    return record if ok else None


def choose_source(
    source: pathlib.Path | None, vendored: pathlib.Path = VENDORED_ARCHIVE
) -> tuple[pathlib.Path | str, str]:
    """What to install from, and its name for the user: `source` when given, else the vendored archive when
    it exists, else the upstream release archive's URL (downloaded, then installed like the others)."""
    if source is not None:
        return pathlib.Path(source), "the given source"
    if vendored.is_file():
        return vendored, "the vendored archive"
    return UPSTREAM_ARCHIVE, f"the upstream release tag v{SWE_AGENT_VERSION}"


def _download(url: str, folder: pathlib.Path) -> pathlib.Path:
    """`url` saved under `folder`; `SystemExit` naming the URL and the offline alternative when it fails."""
    target = folder / url.rsplit("/", 1)[-1]
    try:
        with urllib.request.urlopen(url, timeout=120) as response, target.open("wb") as out:
            shutil.copyfileobj(response, out)
    except OSError as exc:
        raise SystemExit(
            f"downloading SWE-agent {SWE_AGENT_VERSION} from {url} failed ({exc}); without network, pass "
            f"--source with the release archive or tree"
        ) from exc
    return target


def _unpack(source: pathlib.Path, dest: pathlib.Path) -> None:
    """The release tree (an archive with one top folder, or an unpacked tree) copied to `dest`."""
    if source.is_dir():
        shutil.copytree(source, dest, ignore=shutil.ignore_patterns(".git", "__pycache__"))
    else:
        with tempfile.TemporaryDirectory(dir=dest.parent) as tmp, tarfile.open(source) as archive:
            archive.extractall(tmp, filter="data")
            tops = list(pathlib.Path(tmp).iterdir())
            if len(tops) != 1 or not tops[0].is_dir():
                raise SystemExit(
                    f"{source}: expected one top-level folder in the archive, found {[t.name for t in tops]}"
                )
            shutil.move(str(tops[0]), dest)
    for folder in ("sweagent", "config", "tools"):
        if not (dest / folder).is_dir():
            raise SystemExit(f"{source} is not a SWE-agent release tree: {folder}/ is missing")
    (dest / "trajectories").mkdir(exist_ok=True)


def install(source: pathlib.Path | None = None, wheelhouse: pathlib.Path | None = None) -> str:
    """Installs SWE-agent and the sandbox runtime under `install_dir()`; a no-op when already there."""
    root = install_dir()
    if (record := installed()) is not None:
        return f"SWE-agent {record['swe_agent']} is already installed in {root}"
    chosen, what = choose_source(source)
    if isinstance(chosen, pathlib.Path) and not chosen.exists():
        raise SystemExit(
            f"SWE-agent source {chosen} does not exist; pass --source with the v{SWE_AGENT_VERSION} "
            f"release archive (github.com/SWE-agent/SWE-agent, git archive v{SWE_AGENT_VERSION}) or tree"
        )
    print(f"installing SWE-agent {SWE_AGENT_VERSION} from {what}: {chosen}", flush=True)
    clear(root, ("installed.json", "src", "venv", "runtime"))
    if isinstance(chosen, str):
        with tempfile.TemporaryDirectory(dir=root) as tmp:
            _unpack(_download(chosen, pathlib.Path(tmp)), root / "src")
    else:
        _unpack(chosen, root / "src")
    python = shutil.which(f"python{SANDBOX_PYTHON}") or sys.executable
    run_command([python, "-m", "venv", str(root / "venv")], "creating SWE-agent's virtualenv")
    pip = [str(root / "venv" / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    links = ["--find-links", str(wheelhouse)] if wheelhouse is not None and wheelhouse.is_dir() else []
    run_command([*pip, *links, "-e", str(root / "src"), SWE_REX_REQUIREMENT], "pip install of SWE-agent")
    # The server's runtime for the sandbox's Python: binary wheels only, for cp311 on manylinux x86_64.
    run_command(
        [
            *pip,
            *links,
            "--target",
            str(root / "runtime"),
            "--python-version",
            SANDBOX_PYTHON,
            "--implementation",
            "cp",
            "--platform",
            "manylinux2014_x86_64",
            "--only-binary=:all:",
            SWE_REX_REQUIREMENT,
            *TOOL_REQUIREMENTS,
        ],
        "pip install of the SWE-ReX sandbox runtime",
    )
    # `pip` on the sandbox's PATH: the runtime's own pip, on the sandbox's python3 (which has none).
    for name in ("pip", "pip3"):
        script = root / "runtime" / "bin" / name
        script.write_text('#!/bin/sh\nexec python3 -m pip "$@"\n')
        script.chmod(0o755)
    record = {
        "swe_agent": SWE_AGENT_VERSION,
        "swe_rex": SWE_REX_REQUIREMENT,
        "source": str(chosen),
        "sandbox_python": SANDBOX_PYTHON,
    }
    write_record(root, record)
    return f"installed SWE-agent {SWE_AGENT_VERSION} from {what} ({chosen}) into {root}"


# Runs inside the sandbox per relayed request: the raw HTTP request (a file in /tmp) goes to the SWE-ReX
# server on the sandbox's loopback; the server's whole response (the request asks it to close) comes
# back on stdout.
_RELAY_CLIENT = """
import os, socket, sys
with open(sys.argv[3], "rb") as f:
    request = f.read()
os.unlink(sys.argv[3])
conn = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=float(sys.argv[2]))
conn.sendall(request)
while chunk := conn.recv(65536):
    sys.stdout.buffer.write(chunk)
"""


# What `sweagent run --config` does (RunSingle from the config), with one difference: swe-rex 1.4.0's
# RemoteDeployment.is_alive takes no `timeout`, which every other deployment takes and SWE-agent 1.1.0 passes
# when it autosubmits after an error or a limit (agents.py: `deployment.is_alive(timeout=10)`), so that path
# would crash with a TypeError. The subclass gives it the common signature; nothing else changes.
_DRIVER = """
import sys, yaml
from sweagent.run.run_single import RunSingle, RunSingleConfig
from swerex.deployment.remote import RemoteDeployment

class Deployment(RemoteDeployment):
    async def is_alive(self, *, timeout=None):
        return await self.runtime.is_alive(timeout=timeout)

config = RunSingleConfig.model_validate(yaml.safe_load(open(sys.argv[1])))
single = RunSingle.from_config(config)
single.env.deployment = Deployment.from_config(config.env.deployment)
single.run()
"""


class SandboxRelay:
    """An HTTP relay on the host's loopback into a SWE-ReX server listening on the sandbox's own loopback.

    Our sandboxes accept no connection from the host (network 'none', or 'proxy_only', whose firewall lets
    only sandbox->proxy traffic through), and SWE-ReX's protocol is one HTTP request per call. So each request
    SWE-agent's RemoteRuntime makes is read whole here, marked `Connection: close`, and carried by one
    `sandbox.write_file` of it into the sandbox's /tmp and one `sandbox.exec` of a small stdlib client that
    sends it to the server and prints the response back.
    """

    def __init__(self, sandbox: Any, server_port: int, timeout_s: float):
        self.sandbox, self.server_port, self.timeout_s = sandbox, server_port, timeout_s
        self.port: int | None = None
        self.failures: list[str] = []
        self._server: Any = None
        self._count = 0

    async def __aenter__(self) -> SandboxRelay:
        import asyncio

        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, reader: Any, writer: Any) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            headers = [
                line
                for line in lines[1:]
                if line and not line.lower().startswith((b"connection:", b"keep-alive:"))
            ]
            length = next(
                (
                    int(line.split(b":", 1)[1])
                    for line in headers
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            body = await reader.readexactly(length) if length else b""
            request = b"\r\n".join([lines[0], *headers, b"Connection: close", b"", b""]) + body
            self._count += 1
            path = f"/tmp/legorl-swerex-relay-{self._count}.http"
            await self.sandbox.write_file(path, request)
            result = await self.sandbox.exec(
                ["python3", "-c", _RELAY_CLIENT, str(self.server_port), str(self.timeout_s), path],
                timeout=self.timeout_s + 30,
            )
            if result.exit_code != 0 or not result.stdout:
                self.failures.append(f"relay exec exit {result.exit_code}: {result.stderr.strip()[-500:]}")
                writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            else:
                writer.write(result.stdout.encode("utf-8", "surrogateescape"))
            await writer.drain()
        except Exception as exc:  # noqa: BLE001 - recorded; the client sees its connection close
            self.failures.append(f"relay: {type(exc).__name__}: {exc}")
        finally:
            writer.close()


class SweAgentHarness:
    """SWE-agent 1.1.0 (module docstring): its RunSingle in its venv, SWE-ReX in the trial sandbox."""

    name = "swe_agent"
    network = "none"
    """SWE-agent calls the model from the host (the proxy on loopback); the sandbox needs no network."""
    sandbox_user = "root"
    """SWE-agent 1.1.0 hard-codes /root (its tool bundles in /root/tools, /root/state.json and
    /root/model.patch), so its sandbox runs as root (`SandboxSpec.user`); the sandbox's limits and
    isolation stay as they are."""

    def __init__(
        self,
        *,
        config: str = "default.yaml",
        command_timeout_s: float = 60.0,
        request_timeout_s: float = 1800.0,
        server_port: int = 8000,
        startup_timeout_s: float = 60.0,
    ):
        record = installed()
        if record is None:
            raise HarnessNotInstalled(
                f"SWE-agent {SWE_AGENT_VERSION} is not installed in {install_dir()}; "
                f"install it with: {INSTALL_COMMAND}"
            )
        self.root = install_dir()
        self.config_path = self.root / "src" / "config" / config
        if not self.config_path.is_file():
            raise ValueError(
                f"config must name a file in SWE-agent's config/ folder; {self.config_path} is missing"
            )
        self.command_timeout_s = command_timeout_s
        self.request_timeout_s = request_timeout_s
        self.server_port = server_port
        self.startup_timeout_s = startup_timeout_s

    @property
    def mounts(self) -> dict[str, str]:
        """Read-only mounts the trial sandbox needs: the SWE-ReX runtime."""
        return {RUNTIME_MOUNT: str(self.root / "runtime")}

    def run_config(
        self, task: Any, llm: LLMEndpoint, relay_port: int, token: str, output_dir: str
    ) -> dict[str, Any]:
        """The `sweagent run --config` document: the release's agent config, our model, deployment, repo."""
        import yaml

        agent = yaml.safe_load(self.config_path.read_text())["agent"]
        # cache_control marks messages for Anthropic prompt caching; our model is not Anthropic's.
        agent["history_processors"] = [
            p for p in agent.get("history_processors", []) if p.get("type") != "cache_control"
        ]
        agent["model"] = {
            "name": f"openai/{llm.model}",
            "api_base": llm.openai_base_url,
            "api_key": llm.api_key,
            "per_instance_call_limit": llm.step_limit,
            "per_instance_cost_limit": 0,
            "total_cost_limit": 0,
            "max_input_tokens": 0,
        }
        agent.setdefault("tools", {})["execution_timeout"] = self.command_timeout_s
        workdir = task.workdir.rstrip("/")
        if workdir.count("/") != 1:
            raise ValueError(
                f"SWE-agent's preexisting repo must sit at /<name>; task workdir is {task.workdir!r}"
            )
        return {
            "agent": agent,
            "env": {
                "deployment": {
                    "type": "remote",
                    "host": "http://127.0.0.1",
                    "port": relay_port,
                    "auth_token": token,
                    "timeout": self.request_timeout_s,
                },
                "repo": {"type": "preexisting", "repo_name": workdir.lstrip("/")},
                "post_startup_commands": [],
            },
            "problem_statement": {"type": "text", "text": task.problem_statement, "id": "trial"},
            "output_dir": output_dir,
        }

    async def _start_server(self, sandbox: Any, token: str) -> None:
        import asyncio
        import time

        whoami = await sandbox.exec(["id", "-u"], timeout=30)
        if whoami.stdout.strip() != "0":
            raise HarnessCrashed(
                f"SWE-agent writes its tools and state under /root, so its sandbox must run as root "
                f"(SandboxSpec.user={self.sandbox_user!r}); this one runs as uid {whoami.stdout.strip()!r}"
            )
        # The server's bash session (where SWE-agent's tools run) inherits this environment: the runtime's
        # packages and pip, pip told the network is not there (and that the read-only system Python is fine).
        start = (
            f"PATH={RUNTIME_MOUNT}/bin:$PATH PYTHONPATH={RUNTIME_MOUNT} PIP_NO_INDEX=1 "
            "PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_BREAK_SYSTEM_PACKAGES=1 "
            "setsid nohup python3 -m swerex.server --host 127.0.0.1 "
            f"--port {self.server_port} --auth-token {token} >/tmp/swerex.log 2>&1 </dev/null &"
        )
        started = await sandbox.exec(["sh", "-c", start], timeout=30)
        if started.exit_code != 0:
            raise HarnessCrashed(
                f"could not start the SWE-ReX server in the sandbox: {started.stderr.strip()[-1000:]}"
            )
        probe = (
            "import socket,sys\n"
            f"try: socket.create_connection(('127.0.0.1', {self.server_port}), timeout=2)\n"
            "except OSError: sys.exit(1)"
        )
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if (await sandbox.exec(["python3", "-c", probe], timeout=10)).exit_code == 0:
                return
            await asyncio.sleep(0.5)
        log = await sandbox.exec(["sh", "-c", "cat /tmp/swerex.log"], timeout=10)
        raise HarnessCrashed(
            f"the SWE-ReX server did not listen within {self.startup_timeout_s:.0f}s; its log:\n"
            f"{log.stdout.strip()[-2000:]}"
        )

    async def run(self, task: Any, sandbox: Any, llm: LLMEndpoint) -> HarnessResult:
        import asyncio
        import secrets

        import yaml

        token = secrets.token_hex(16)
        await self._start_server(sandbox, token)
        with tempfile.TemporaryDirectory(prefix="legorl-swea-") as tmp:
            async with SandboxRelay(sandbox, self.server_port, self.request_timeout_s) as relay:
                config = pathlib.Path(tmp) / "run.yaml"
                port = relay.port
                assert port is not None  # set when the relay started
                config.write_text(yaml.safe_dump(self.run_config(task, llm, port, token, f"{tmp}/out")))
                env = {
                    k: v
                    for k, v in os.environ.items()
                    if not k.startswith(("OPENAI_", "ANTHROPIC_", "LITELLM_"))
                }
                env.update({"PYTHONUNBUFFERED": "1", "SWE_AGENT_LOG_STREAM_LEVEL": "INFO"})
                proc = await asyncio.create_subprocess_exec(
                    str(self.root / "venv" / "bin" / "python"),
                    "-c",
                    _DRIVER,
                    str(config),
                    cwd=tmp,
                    env=env,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.STDOUT,
                )
                try:
                    out, _ = await proc.communicate()
                except BaseException:
                    proc.kill()
                    await proc.wait()
                    raise
            output = out.decode("utf-8", "replace")
            trajs = list(pathlib.Path(tmp, "out").glob("*/*.traj"))
            if proc.returncode != 0 or not trajs:
                raise HarnessCrashed(
                    f"SWE-agent (RunSingle) exited {proc.returncode} without a trajectory"
                    f"{'; relay: ' + '; '.join(relay.failures[-3:]) if relay.failures else ''}:\n"
                    f"{output[-4000:]}"
                )
            traj = json.loads(trajs[0].read_text())
        return _result(traj, output)


def _result(traj: dict[str, Any], output: str) -> HarnessResult:
    info = traj.get("info", {})
    raw = str(info.get("exit_status") or "")
    # "submitted (exit_cost)": an autosubmission after the named exit; the named exit says how it ended.
    key = raw[len("submitted (") : -1] if raw.startswith("submitted (") else raw
    status = EXIT_STATUS_MAP.get(key)
    if status is None:
        raise HarnessCrashed(f"SWE-agent ended with exit status {raw!r}:\n{output[-4000:]}")
    steps = int(info.get("model_stats", {}).get("api_calls", len(traj.get("trajectory", []))))
    actions = [str(step.get("action", "")) for step in traj.get("trajectory", [])]
    features = {
        "tool_calls": float(len(actions)),
        "edits": float(sum(a.startswith("str_replace_editor") and " view " not in a for a in actions)),
    }
    return HarnessResult(exit_status=status, steps=steps, log=json.dumps(traj, indent=1), features=features)
