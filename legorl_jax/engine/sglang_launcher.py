"""Starting and stopping an SGLang server (`python -m sglang.launch_server ...`) from `engine.sglang`.

    async with SGLangLauncher(cfg.engine.sglang, model_path=cfg.model.path) as base_url:
        engine = SGLangEngine(base_url)

- `sglang_argv(config, model_path, weight_version=None)` is the command: `[python, -m, module,
  --model-path, PATH, --host, H, --port, P, --tp, N, --enable-return-routed-experts, (--weight-version V,)
  *extra_args]`. The routed-experts flag is always there: without it SGLang has no capture buffers and
  `return_routed_experts` silently returns nothing. `--weight-version` (the version the server reports
  until its first update; SGLang's default is "default") is passed only when a version other than
  "default" is asked for, so the command stays valid for SGLang builds older than that flag.
- `check_module(python, module)` runs `python -c` to see whether the module's top-level package is
  importable by that interpreter, and raises `SGLangNotInstalledError` with the install hint when it is
  not (or when the interpreter itself is missing): sglang is an optional extra that needs CUDA.
- `ServerProcess(argv, base_url)` runs any such server in its own session (process group), output to a
  log file; `wait_healthy(timeout)` polls `GET /health` until 200 and fails early, with the log's last
  lines, if the process exits; `stop(grace)` sends SIGTERM to the whole group, waits `grace` seconds,
  then SIGKILLs it (launch_server forks scheduler and detokenizer processes: the group takes them too).

Our own server (`python -m legorl_jax.engine.serve`) accepts SGLang's flags, so the same launcher, with
`module: legorl_jax.engine.serve`, starts it; the tests do exactly that.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import aiohttp

from legorl_jax.config import EngineConfig, SGLangConfig
from legorl_jax.engine.base import EngineError

log = logging.getLogger(__name__)

INSTALL_HINT = (
    "pip install 'legorl_jax[sglang]' on a CUDA host, or set engine.sglang.python to an interpreter "
    "that has it"
)


class SGLangNotInstalledError(EngineError):
    """The interpreter that should run the server cannot import its module."""


def sglang_argv(
    config: SGLangConfig, model_path: str | os.PathLike, weight_version: str | None = None
) -> list[str]:
    """The launch command (module docstring), as an argv list."""
    if not isinstance(config, SGLangConfig):
        raise TypeError(f"config must be an SGLangConfig, got {type(config).__name__}")
    path = os.fspath(model_path)
    if not path:
        raise ValueError(f"model_path must be a directory or a Hub id, got {model_path!r}")
    if weight_version is not None and (not isinstance(weight_version, str) or not weight_version):
        raise ValueError(f"weight_version must be a non-empty string or None, got {weight_version!r}")
    version = [] if weight_version in (None, "default") else ["--weight-version", weight_version]
    return [
        config.python or sys.executable, "-m", config.module,
        "--model-path", path,
        "--host", config.host,
        "--port", str(config.port),
        "--tp", str(config.tp),
        "--enable-return-routed-experts",
        *version,
        *config.extra_args,
    ]  # fmt: skip


NO_RADIX_CACHE = "--disable-radix-cache"


def for_update_policy(config: SGLangConfig, update_policy: str, loop_mode: str) -> SGLangConfig:
    """`config` with `--disable-radix-cache` added when SGLang serves the async loop under `in_place`.

    After an in-place update with requests in flight SGLang cannot flush its radix cache, and under steady
    load it never idles long enough for the client's deferred flush: every later request reuses the old
    weights' K/V of its task prompt, so all the new version's tokens are sampled over stale K/V
    (`Generation.token_stale_kv`) and the alignment gate has no fresh token to judge (BENCHMARKS.md, "The
    demo on real SGLang"). Without the radix cache a new request prefills on the weights it samples with;
    only the requests in flight at the update attend to old K/V, as `in_place` means. The sync loop (no
    request in flight at an update: its flush runs), the other policies and our own server (its prefix
    cache is dropped at every update) keep the cache."""
    if update_policy != "in_place" or loop_mode != "async" or not config.module.startswith("sglang"):
        return config
    if NO_RADIX_CACHE in config.extra_args:
        return config
    return dataclasses.replace(config, extra_args=[*config.extra_args, NO_RADIX_CACHE])


def engine_for_loop(config: EngineConfig, loop_mode: str) -> EngineConfig:
    """`config` with its launched SGLang servers set up for the loop (`for_update_policy`), logged; a server
    this run does not start (`engine.url`, `engine.servers`, `engine.router_url`) gets a warning instead."""
    if config.backend != "sglang":
        return config
    sglang = for_update_policy(config.sglang, config.update_policy, loop_mode)
    if sglang is config.sglang:
        return config
    if config.url is not None or config.servers or config.router_url is not None:
        log.warning(
            "engine.update_policy=in_place with loop.mode=async on SGLang servers this run does not start: "
            "unless they run with %s, requests after an update reuse the old weights' cached prompts "
            "(their tokens are recorded as sampled over stale K/V and left out of align/*)",
            NO_RADIX_CACHE,
        )
        return config
    log.info("SGLang launched with %s: async in_place cannot flush its radix cache", NO_RADIX_CACHE)
    return dataclasses.replace(config, sglang=sglang)


def check_module(python: str, module: str, hint: str = INSTALL_HINT) -> None:
    """Raises SGLangNotInstalledError (with `hint`) unless `python` can import the top-level package of
    `module`."""
    package = module.split(".")[0]
    probe = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec(sys.argv[1]) else 3)"
    try:
        done = subprocess.run([python, "-c", probe, package], capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise SGLangNotInstalledError(f"the interpreter {python!r} does not exist; {hint}") from None
    if done.returncode == 3:
        raise SGLangNotInstalledError(
            f"{package!r} is not installed for {python!r} (needed to run -m {module}); {hint}"
        )
    if done.returncode != 0:
        raise SGLangNotInstalledError(
            f"{python!r} failed to probe for {package!r}: {done.stderr.strip()[-500:]}"
        )


def _tail(path: pathlib.Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class ServerProcess:
    """One server subprocess in its own process group (module docstring)."""

    def __init__(self, argv: list[str], base_url: str, *, log_file: str | os.PathLike | None = None,
                 env: dict[str, str] | None = None):  # fmt: skip
        if not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError(f"argv must be a non-empty list of strings, got {argv!r}")
        self.argv, self.base_url = list(argv), base_url.rstrip("/")
        self.env = env
        self.log_path = (
            pathlib.Path(log_file)
            if log_file
            else pathlib.Path(tempfile.mkstemp(prefix="engine-", suffix=".log")[1])
        )
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        if self.process is not None:
            raise RuntimeError(f"the server is already started (pid {self.process.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=None if self.env is None else {**os.environ, **self.env},
            )

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    async def wait_healthy(self, timeout_s: float, poll_s: float = 0.5) -> None:
        """Returns once GET /health answers 200; EngineError on early exit or after `timeout_s`."""
        if self.process is None:
            raise RuntimeError("start() the server first")
        deadline = time.monotonic() + timeout_s
        async with aiohttp.ClientSession() as session:
            while True:
                code = self.process.poll()
                if code is not None:
                    raise EngineError(
                        f"the server exited with code {code} before it was healthy: {' '.join(self.argv)}\n"
                        f"last lines of {self.log_path}:\n{_tail(self.log_path)}"
                    )
                try:
                    async with session.get(
                        self.base_url + "/health", timeout=aiohttp.ClientTimeout(total=5)
                    ) as r:
                        if r.status == 200:
                            return
                except (aiohttp.ClientError, TimeoutError):
                    pass
                if time.monotonic() > deadline:
                    raise EngineError(
                        f"the server at {self.base_url} was not healthy after {timeout_s:.0f} s; "
                        f"last lines of {self.log_path}:\n{_tail(self.log_path)}"
                    )
                await asyncio.sleep(poll_s)

    def stop(self, grace_s: float = 30.0) -> int | None:
        """SIGTERM to the process group, SIGKILL after `grace_s`; returns the exit code (None: never
        started)."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.process.wait()
        # Children that outlived the leader (forked workers) get the same treatment.
        self._signal(signal.SIGKILL)
        return self.process.returncode

    def _signal(self, sig: int) -> None:
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


class SGLangLauncher:
    """Starts the server of `config` on `model_path`, waits for it, stops it (an async context manager)."""

    def __init__(
        self,
        config: SGLangConfig,
        model_path: str | os.PathLike,
        *,
        weight_version: str | None = None,
        env: dict[str, str] | None = None,
    ):
        self.config = config
        self.argv = sglang_argv(config, model_path, weight_version)
        self.base_url = f"http://{config.host}:{config.port}"
        if config.gpus is not None:  # the server's GPUs, apart from the trainer's (`mesh.devices`)
            env = {**(env or {}), "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in config.gpus)}
        self.server = ServerProcess(self.argv, self.base_url, log_file=config.log_file, env=env)

    async def start(self) -> str:
        """Checks the module is installed, starts the server, waits for /health; returns its base URL."""
        await asyncio.to_thread(check_module, self.argv[0], self.config.module)
        self.server.start()
        try:
            await self.server.wait_healthy(self.config.startup_timeout_s)
        except BaseException:
            await asyncio.to_thread(self.server.stop, self.config.stop_grace_s)
            raise
        return self.base_url

    async def stop(self) -> int | None:
        return await asyncio.to_thread(self.server.stop, self.config.stop_grace_s)

    async def __aenter__(self) -> str:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()
