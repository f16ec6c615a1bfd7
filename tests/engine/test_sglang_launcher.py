"""The launcher: its SGLang command, the not-installed error (sglang is absent from this venv), and its
wait/stop logic on real processes, our own server among them (started through the same code path)."""

import pathlib
import sys
import time

import aiohttp
import pytest
from processes import free_port

from legorl_jax.config import EngineConfig, SGLangConfig
from legorl_jax.engine import EngineError, SamplingParams
from legorl_jax.engine.sglang_client import SGLangEngine
from legorl_jax.engine.sglang_launcher import (
    ServerProcess,
    SGLangLauncher,
    SGLangNotInstalledError,
    check_module,
    engine_for_loop,
    sglang_argv,
)


def test_the_command_is_sglangs_launch_server_with_routed_experts_on():
    cfg = SGLangConfig(
        python="/opt/py/bin/python", port=31000, tp=2, extra_args=["--mem-fraction-static", "0.8"]
    )
    assert sglang_argv(cfg, "/models/qwen3-30b-a3b") == [
        "/opt/py/bin/python", "-m", "sglang.launch_server", "--model-path", "/models/qwen3-30b-a3b",
        "--host", "127.0.0.1", "--port", "31000", "--tp", "2", "--enable-return-routed-experts",
        "--mem-fraction-static", "0.8",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="model_path"):
        sglang_argv(cfg, "")


def test_a_weight_version_other_than_default_is_passed_to_the_server():
    cfg = SGLangConfig(extra_args=["--mem-fraction-static", "0.8"])
    argv = sglang_argv(cfg, "/models/m", "step-12")
    assert argv[-4:] == ["--weight-version", "step-12", "--mem-fraction-static", "0.8"]
    assert "--weight-version" not in sglang_argv(cfg, "/models/m", "default")  # SGLang's own default
    assert "--weight-version" not in sglang_argv(cfg, "/models/m")
    with pytest.raises(ValueError, match="weight_version must be a non-empty string or None, got ''"):
        sglang_argv(cfg, "/models/m", "")


def test_async_in_place_launches_sglang_without_its_radix_cache_and_nothing_else_changes(caplog):
    launched = EngineConfig(backend="sglang", update_policy="in_place")
    argv = sglang_argv(engine_for_loop(launched, "async").sglang, "/models/m")
    assert argv[-1] == "--disable-radix-cache" and argv.count("--disable-radix-cache") == 1
    fleet = EngineConfig(backend="sglang", update_policy="in_place", launch=2)
    assert engine_for_loop(fleet, "async").sglang.extra_args == ["--disable-radix-cache"]
    # Asked already, another policy, the sync loop (its flush runs), our own server, the jax engine: as given.
    asked = EngineConfig(backend="sglang", sglang=SGLangConfig(extra_args=["--disable-radix-cache"]))
    for config, mode in [
        (asked, "async"),
        (EngineConfig(backend="sglang", update_policy="abort_resume"), "async"),
        (EngineConfig(backend="sglang", update_policy="drain"), "async"),
        (launched, "sync"),
        (EngineConfig(backend="sglang", sglang=SGLangConfig(module="legorl_jax.engine.serve")), "async"),
        (EngineConfig(backend="jax"), "async"),
    ]:
        assert engine_for_loop(config, mode) is config, (config, mode)
    # A server this run does not start is left alone, with a warning naming the flag.
    external = EngineConfig(backend="sglang", update_policy="in_place", url="http://127.0.0.1:30000")
    with caplog.at_level("WARNING"):
        assert engine_for_loop(external, "async") is external
    assert "--disable-radix-cache" in caplog.text and "stale K/V" in caplog.text


def test_a_missing_sglang_or_interpreter_fails_with_the_install_hint():
    with pytest.raises(SGLangNotInstalledError, match=r"'sglang' is not installed .*legorl_jax\[sglang\]"):
        check_module(sys.executable, "sglang.launch_server")
    with pytest.raises(SGLangNotInstalledError, match="does not exist"):
        check_module("/no/such/python", "sglang.launch_server")
    check_module(sys.executable, "legorl_jax.engine.serve")  # present: no error


async def test_start_refuses_before_spawning_when_sglang_is_missing(tmp_path):
    launcher = SGLangLauncher(SGLangConfig(python=sys.executable, port=free_port()), tmp_path)
    with pytest.raises(SGLangNotInstalledError, match=r"'sglang' is not installed for .*pip install"):
        await launcher.start()
    assert launcher.server.process is None


async def test_the_launcher_starts_waits_for_and_stops_our_own_server(engine_model_dir, tmp_path):
    port = free_port()
    cfg = SGLangConfig(
        python=sys.executable,
        module="legorl_jax.engine.serve",
        port=port,
        startup_timeout_s=600,
        stop_grace_s=30,
        extra_args=["--max-len", "32", "--max-running", "2", "--min-bucket", "16", "--no-background-compile"],
        log_file=str(tmp_path / "server.log"),
    )
    launcher = SGLangLauncher(
        cfg, engine_model_dir, weight_version="w-0", env={"JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}
    )
    async with launcher as url:
        assert url == f"http://127.0.0.1:{port}"
        async with SGLangEngine(url) as client:
            gen = await client.generate(
                [1, 2, 3], SamplingParams(max_new_tokens=3, seed=0), return_routed_experts=True
            )
        assert len(gen.output_ids) == 3 and gen.routed_experts.shape == (5, 2, 2)
        assert gen.weight_version == "w-0"  # --weight-version reached the server
        async with aiohttp.ClientSession() as http, http.get(url + "/get_server_info") as resp:
            info = await resp.json()
        # The warm-up and the request met one prefill and one decode key, each compiled in the engine
        # thread; with --no-background-compile nothing compiles in the background or runs on a cover.
        assert (info["compile_stalls"], info["covered_calls"], info["compiling"]) == (2, 0, 0)
    assert launcher.server.process.returncode == 0  # SIGTERM: a clean exit, no SIGKILL needed
    assert "ready on" in (tmp_path / "server.log").read_text()


async def test_a_server_that_exits_early_fails_the_wait_with_its_log(tmp_path):
    argv = [sys.executable, "-c", "import sys; print('cannot load the model'); sys.exit(3)"]
    server = ServerProcess(argv, f"http://127.0.0.1:{free_port()}", log_file=tmp_path / "log")
    server.start()
    with pytest.raises(EngineError, match=r"(?s)exited with code 3.*cannot load the model"):
        await server.wait_healthy(60, poll_s=0.05)


async def test_a_server_that_never_gets_healthy_times_out(tmp_path):
    server = ServerProcess([sys.executable, "-c", "import time; time.sleep(60)"], f"http://127.0.0.1:{free_port()}",
                           log_file=tmp_path / "log")  # fmt: skip
    server.start()
    try:
        with pytest.raises(EngineError, match="not healthy after 1 s"):
            await server.wait_healthy(1.0, poll_s=0.1)
    finally:
        assert server.stop(grace_s=5) == -15  # SIGTERM ends it


def test_stop_kills_the_process_group_when_sigterm_is_ignored(tmp_path):
    child = tmp_path / "child.pid"
    code = (
        "import os, signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "p = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)']); "
        f"open({str(child)!r}, 'w').write(str(p.pid)); time.sleep(60)"
    )
    server = ServerProcess([sys.executable, "-c", code], "http://127.0.0.1:1", log_file=tmp_path / "log")
    server.start()
    while not child.exists() or not child.read_text():
        time.sleep(0.05)
    grandchild = int(child.read_text())
    assert server.stop(grace_s=0.5) == -9
    time.sleep(0.2)
    assert not alive(grandchild)  # the forked worker went with the group


def alive(pid):
    """True when `pid` runs (a zombie waiting for its reaper counts as dead)."""
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


async def test_engine_sglang_gpus_become_the_servers_cuda_visible_devices(tmp_path):
    launcher = SGLangLauncher(SGLangConfig(python=sys.executable, port=free_port(), gpus=[4, 5]), tmp_path)
    assert launcher.server.env == {"CUDA_VISIBLE_DEVICES": "4,5"}
    probe = [
        sys.executable,
        "-c",
        "import os, sys; print('sees', os.environ['CUDA_VISIBLE_DEVICES']); sys.exit(3)",
    ]
    server = ServerProcess(probe, launcher.base_url, log_file=tmp_path / "log", env=launcher.server.env)
    server.start()
    with pytest.raises(EngineError, match=r"(?s)exited with code 3.*sees 4,5"):
        await server.wait_healthy(60, poll_s=0.05)
    with pytest.raises(ValueError, match=r"engine.sglang.gpus must be .* got \[\]"):
        SGLangConfig(gpus=[])
