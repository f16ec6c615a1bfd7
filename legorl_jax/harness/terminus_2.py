"""Terminus-2 (terminal-bench 0.2.18), unmodified, in its own virtualenv, driving a tmux pane in our sandbox.

    python tools/install_harness.py terminus_2           # once (idempotent)
    harness = get_harness("terminus_2")
    result = await harness.run(task, sandbox, llm)

Terminus-2 calls no tools: each reply is a JSON object of keystrokes for a tmux pane (`{"analysis", "plan",
"commands": [{"keystrokes", "duration"}], "task_complete"}`), and it ends when the model says
`task_complete` twice in a row or after `max_episodes` replies. terminal-bench's own `Terminus2` agent and
`TmuxSession` run in a driver process in the harness's virtualenv (Python >= 3.12; its dependencies clash
with ours), its LLM calls (litellm, `openai/<llm.model>`) going to the session's OpenAI URL from the host,
so the sandbox keeps network `none`. `TmuxSession` drives tmux through a docker-py container's `exec_run`
and `put_archive`; the driver hands it a stand-in whose two methods are HTTP calls to `ExecRelay`, a
loopback server in this process that runs them with our `sandbox.exec` / `sandbox.write_file`: every
keystroke goes through our exec API, with the sandbox's limits intact.

What `install()` lays out under `install_dir("terminus_2")`:
- `venv/`: terminal-bench 0.2.18 and its dependencies;
- `tmux/`: the host's tmux executable with the libraries the sandbox image lacks (libevent, libutempter),
  run through the dynamic loader by a small `tmux` script with `tmux.conf` (new panes start a non-login bash,
  which keeps the PATH that finds `tmux` for Terminus-2's `tmux wait -S done`); the adapter bind-mounts it
  read-only at `TMUX_MOUNT`, so nothing is downloaded at trial time (the sandbox image and the host are
  both Debian 12, glibc 2.36);
- `installed.json`, written last.

How a run ends: fewer episodes than `max_episodes` (= `llm.step_limit`) -> `submitted` (the model confirmed
`task_complete`); all of them -> `step_limit` (a confirmation in the very last episode counts as the step
limit too). Replies that do not parse are fed back by Terminus-2 itself and end as `step_limit`; so does a
run stopped at `CALLS_PER_STEP * step_limit` model calls (truncated replies, see `CALLS_PER_STEP`). A driver
that exits non-zero or prints no result is `HarnessCrashed` with its output.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import pathlib
import shutil
import sys
import tarfile
import tempfile
from typing import Any

from legorl_jax.harness.base import HarnessCrashed, HarnessNotInstalled, HarnessResult, LLMEndpoint
from legorl_jax.harness.install import clear, install_record, run_command, write_record
from legorl_jax.harness.install import install_dir as _install_dir
from legorl_jax.types import Outcome
from legorl_jax.validate import positive_number

NAME = "terminus_2"
REQUIREMENT = "terminal-bench==0.2.18"
INSTALL_COMMAND = f"python tools/install_harness.py {NAME}"
TMUX_MOUNT = "/opt/legorl-tmux"
SANDBOX_PATH = f"{TMUX_MOUNT}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOST_LIBRARIES = ("libutempter.so.0", "libevent_core-2.1.so.7")
"""The libraries of Debian 12's tmux that its base image does not ship (libtinfo and glibc it does)."""
RESULT_PREFIX = "LEGORL_RESULT "
CALL_LIMIT_PREFIX = "LEGORL_CALL_LIMIT "
CALLS_PER_STEP = 2
"""Terminus-2 answers a truncated reply (finish_reason `length`) by asking again inside the same episode, with
no bound: a policy whose replies are always cut off never reaches `max_episodes` (the tiny model's trial ran
until the trial timeout). The driver counts model calls with a litellm success callback (configuration, not a
patch) and ends the run after `CALLS_PER_STEP * step_limit` of them: `step_limit`."""


def driver_result(output: str, returncode: int | None, step_limit: int) -> HarnessResult:
    """The run's outcome from the driver's output: its call-limit line (`step_limit`) wins over a result
    line; otherwise the result line's episode count decides (module docstring). A marker is read where it
    starts, even mid-line (a driver before the write lock could append it to another line)."""
    limited = [
        line[line.index(CALL_LIMIT_PREFIX) :] for line in output.splitlines() if CALL_LIMIT_PREFIX in line
    ]
    if limited:
        count = limited[-1][len(CALL_LIMIT_PREFIX) :].split(RESULT_PREFIX.strip())[0].strip()
        if not count.isdigit():
            raise HarnessCrashed(
                f"the Terminus-2 driver's call-limit line has no count: {limited[-1][:200]!r}"
            )
        return HarnessResult(Outcome.STEP_LIMIT, int(count), output, {"turns": float(count)})
    lines = [line[line.index(RESULT_PREFIX) :] for line in output.splitlines() if RESULT_PREFIX in line]
    if returncode != 0 or not lines:
        raise HarnessCrashed(f"the Terminus-2 driver exited {returncode} without a result:\n{output[-4000:]}")
    result = json.loads(lines[-1][len(RESULT_PREFIX) :])
    episodes = int(result["episodes"])
    status = Outcome.SUBMITTED if episodes < step_limit else Outcome.STEP_LIMIT
    return HarnessResult(status, episodes, output, {"turns": float(episodes)})


_TMUX_SCRIPT = f"""#!/bin/sh
exec /lib64/ld-linux-x86-64.so.2 --library-path {TMUX_MOUNT}/lib {TMUX_MOUNT}/lib/tmux -f {TMUX_MOUNT}/tmux.conf "$@"
"""  # noqa: E501
_TMUX_CONF = 'set -g default-command "exec bash"\n'


def install_dir() -> pathlib.Path:
    return _install_dir(NAME)


def installed() -> dict[str, Any] | None:
    """The install record when the venv and the tmux runtime are in place, else None."""
    root = install_dir()
    record = install_record(root)
    if record is None:
        return None
    ok = (
        record.get("requirement") == REQUIREMENT
        and (root / "venv" / "bin" / "python").exists()
        and (root / "tmux" / "lib" / "tmux").exists()
    )
    return record if ok else None


def install() -> str:
    """terminal-bench in its own venv and the sandbox's tmux runtime under `install_dir()`; a no-op when
    there."""
    root = install_dir()
    if installed() is not None:
        return f"{REQUIREMENT} (Terminus-2) is already installed in {root}"
    tmux = shutil.which("tmux")
    if tmux is None:
        raise SystemExit(
            "installing terminus_2 needs the host's tmux (Debian 12: apt-get install tmux); none found"
        )
    libraries = []
    for name in HOST_LIBRARIES:
        found = [
            p
            for p in (
                pathlib.Path("/lib/x86_64-linux-gnu") / name,
                pathlib.Path("/usr/lib/x86_64-linux-gnu") / name,
            )
            if p.exists()
        ]
        if not found:
            raise SystemExit(
                f"the host's tmux needs {name}, which is not in /lib or /usr/lib/x86_64-linux-gnu"
            )
        libraries.append(found[0])
    python = sys.executable if sys.version_info >= (3, 12) else shutil.which("python3.12")
    if python is None:
        raise SystemExit(
            f"terminal-bench needs Python >= 3.12; this is {sys.version.split()[0]} "
            "and no python3.12 is on PATH"
        )
    clear(root, ("installed.json", "venv", "tmux"))
    run_command([python, "-m", "venv", str(root / "venv")], "creating Terminus-2's virtualenv (Python 3.12+)")
    run_command([str(root / "venv" / "bin" / "python"), "-m", "pip", "install", "--quiet", REQUIREMENT],
                f"pip install of {REQUIREMENT}")  # fmt: skip
    (root / "tmux" / "lib").mkdir(parents=True)
    shutil.copy2(tmux, root / "tmux" / "lib" / "tmux")
    for library in libraries:
        shutil.copy2(library.resolve(), root / "tmux" / "lib" / library.name)
    (root / "tmux" / "tmux").write_text(_TMUX_SCRIPT)
    (root / "tmux" / "tmux").chmod(0o755)
    (root / "tmux" / "tmux.conf").write_text(_TMUX_CONF)
    record = {"requirement": REQUIREMENT, "tmux": tmux, "python": python}
    write_record(root, record)
    return f"installed {REQUIREMENT} and the sandbox's tmux runtime into {root}"


# Runs in the harness's venv: terminal-bench's TmuxSession over a container stand-in whose exec_run and
# put_archive are calls to ExecRelay, then its Terminus2 agent as `tb run` would run it (recording off).
_DRIVER = """
import base64, json, os, pathlib, sys, threading, urllib.request
import litellm
from terminal_bench.agents.terminus_2 import Terminus2
from terminal_bench.terminal.tmux_session import TmuxSession

cfg = json.load(open(sys.argv[1]))
calls = [0]
out = threading.Lock()

def emit(line):
    # litellm runs success callbacks on its own thread: one write per line, under a lock, or a marker
    # line and the result line interleave
    with out:
        sys.stdout.write(line + "\\n")
        sys.stdout.flush()

def count_call(kwargs, response, start, end):
    calls[0] += 1
    if calls[0] >= cfg["max_calls"]:
        emit("LEGORL_CALL_LIMIT " + str(calls[0]))
        os._exit(3)

litellm.success_callback = [count_call]

def call(path, payload):
    request = urllib.request.Request(cfg["relay"] + path, data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(request, timeout=cfg["command_timeout_s"] + 60).read())

class Done:
    def __init__(self, exit_code, output):
        self.exit_code, self.output = exit_code, output

class Container:
    attrs = {"Config": {"WorkingDir": cfg["workdir"]}}
    def exec_run(self, cmd, user="", **kwargs):
        done = call("/exec", {"cmd": cmd})
        return Done(done["exit_code"], done["output"].encode())
    def put_archive(self, path, data):
        call("/put_archive", {"path": path, "data": base64.b64encode(data).decode()})
        return True

session = TmuxSession("agent", Container(), disable_recording=True)
session.start()
agent = Terminus2(model_name=cfg["model"], max_episodes=cfg["max_episodes"], api_base=cfg["api_base"],
                  temperature=cfg["temperature"])
result = agent.perform_task(cfg["instruction"], session, logging_dir=pathlib.Path(cfg["logging_dir"]))
emit("LEGORL_RESULT " + json.dumps({**result.model_dump(mode="json"), "episodes": len(agent._timestamped_markers)}))
"""  # noqa: E501


class ExecRelay:
    """A loopback HTTP server that runs the driver's `exec_run` / `put_archive` in the sandbox (module
    docstring)."""

    def __init__(self, sandbox: Any, command_timeout_s: float):
        self.sandbox, self.command_timeout_s = sandbox, command_timeout_s
        self.url = ""
        self._runner: Any = None

    async def __aenter__(self) -> ExecRelay:
        from aiohttp import web

        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/exec", self._exec)
        app.router.add_post("/put_archive", self._put_archive)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()

    async def _exec(self, request: Any) -> Any:
        from aiohttp import web

        cmd = (await request.json())["cmd"]
        argv = cmd if isinstance(cmd, list) else ["bash", "-c", str(cmd)]
        done = await self.sandbox.exec(
            [str(a) for a in argv], timeout=self.command_timeout_s, env={"PATH": SANDBOX_PATH}
        )
        return web.json_response({"exit_code": done.exit_code, "output": done.stdout + done.stderr})

    async def _put_archive(self, request: Any) -> Any:
        from aiohttp import web

        body = await request.json()
        with tarfile.open(fileobj=io.BytesIO(base64.b64decode(body["data"]))) as archive:
            for member in archive.getmembers():
                extracted = archive.extractfile(member) if member.isfile() else None
                if extracted is not None:
                    await self.sandbox.write_file(
                        f"{body['path'].rstrip('/')}/{member.name}", extracted.read()
                    )
        return web.json_response({"ok": True})


class Terminus2Harness:
    """terminal-bench's Terminus-2 driving tmux in the trial sandbox (module docstring)."""

    name = NAME
    network = "none"
    """Terminus-2 calls the model from the host (the proxy on loopback); the sandbox needs no network."""
    sandbox_user = None

    def __init__(
        self, *, temperature: float = 1.0, command_timeout_s: float = 180.0, timeout_s: float = 1800.0
    ):
        if installed() is None:
            raise HarnessNotInstalled(
                f"{REQUIREMENT} (Terminus-2) is not installed in {install_dir()}; "
                f"install it with: {INSTALL_COMMAND}"
            )
        positive_number("temperature", temperature)
        positive_number("command_timeout_s", command_timeout_s, unit="seconds")
        positive_number("timeout_s", timeout_s, unit="seconds")
        self.root = install_dir()
        self.temperature, self.command_timeout_s, self.timeout_s = (
            float(temperature),
            float(command_timeout_s),
            float(timeout_s),
        )

    @property
    def mounts(self) -> dict[str, str]:
        """Read-only mounts the trial sandbox needs: the tmux runtime."""
        return {TMUX_MOUNT: str(self.root / "tmux")}

    async def run(self, task: Any, sandbox: Any, llm: LLMEndpoint) -> HarnessResult:
        with tempfile.TemporaryDirectory(prefix="legorl-terminus2-") as tmp:
            async with ExecRelay(sandbox, self.command_timeout_s) as relay:
                config = {"relay": relay.url, "workdir": task.workdir, "model": f"openai/{llm.model}",
                          "max_episodes": llm.step_limit, "api_base": llm.openai_base_url,
                          "temperature": self.temperature, "instruction": task.problem_statement,
                          "logging_dir": f"{tmp}/logs", "command_timeout_s": self.command_timeout_s,
                          "max_calls": CALLS_PER_STEP * llm.step_limit}  # fmt: skip
                path = pathlib.Path(tmp) / "config.json"
                path.write_text(json.dumps(config))
                env = {
                    k: v
                    for k, v in os.environ.items()
                    if not k.startswith(("OPENAI_", "ANTHROPIC_", "LITELLM_"))
                }
                env.update(
                    {
                        "OPENAI_API_KEY": llm.api_key,
                        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                        "PYTHONUNBUFFERED": "1",
                    }
                )
                proc = await asyncio.create_subprocess_exec(
                    str(self.root / "venv" / "bin" / "python"), "-c", _DRIVER, str(path), cwd=tmp, env=env,
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                )  # fmt: skip
                try:
                    out, _ = await asyncio.wait_for(proc.communicate(), self.timeout_s)
                except BaseException:
                    proc.kill()
                    await proc.wait()
                    raise
        return driver_result(out.decode("utf-8", "replace"), proc.returncode, llm.step_limit)
