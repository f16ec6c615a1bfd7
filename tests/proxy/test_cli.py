"""`python -m legorl_jax.proxy` in front of `python -m legorl_jax.engine.serve`, both as the user starts
them."""

import sys

import aiohttp
import openai
import pytest
from processes import free_port

from legorl_jax.engine.sglang_launcher import ServerProcess
from legorl_jax.proxy.archive import read_archive

ENV = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}


async def test_the_proxy_command_serves_sessions_over_an_engine_server(proxy_model_dir, tmp_path):
    engine_port, proxy_port = free_port(), free_port()
    engine = ServerProcess(
        [
            sys.executable,
            "-m",
            "legorl_jax.engine.serve",
            "--model",
            str(proxy_model_dir),
            "--port",
            str(engine_port),
            "--max-len",
            "256",
            "--max-running",
            "2",
            "--min-bucket",
            "64",
        ],
        f"http://127.0.0.1:{engine_port}",
        log_file=tmp_path / "engine.log",
        env=ENV,
    )
    proxy = ServerProcess(
        [
            sys.executable,
            "-m",
            "legorl_jax.proxy",
            "--engine-url",
            f"http://127.0.0.1:{engine_port}",
            "--model",
            str(proxy_model_dir),
            "--port",
            str(proxy_port),
            "--admin-token",
            "cli-admin-token",
            "--max-response-tokens",
            "6",
            "--context-length",
            "256",
            "--archive-dir",
            str(tmp_path / "archive"),
        ],
        f"http://127.0.0.1:{proxy_port}",
        log_file=tmp_path / "proxy.log",
        env=ENV,
    )
    engine.start()
    try:
        await engine.wait_healthy(300)
        proxy.start()
        await proxy.wait_healthy(120)
        base = f"http://127.0.0.1:{proxy_port}"
        async with aiohttp.ClientSession(headers={"Authorization": "Bearer cli-admin-token"}) as http:
            async with http.post(base + "/admin/sessions", json={"task_id": "t"}) as resp:
                info = await resp.json()
            async with openai.AsyncOpenAI(base_url=info["openai_base_url"], api_key="x") as client:
                r = await client.chat.completions.create(
                    model="p", messages=[{"role": "user", "content": "hi"}]
                )
            assert r.usage.completion_tokens == 6 and r.choices[0].finish_reason == "length"
            async with http.delete(f"{base}/admin/sessions/{info['session_id']}") as resp:
                closed = await resp.json()
        trajectory, arrays = read_archive(closed["trial_dir"])
        assert closed["trial_dir"] == str(tmp_path / "archive" / info["session_id"])
        assert trajectory["turns"][0]["output_tokens"] == 6 and arrays[0]["loss_mask"].sum() == 6
        # Routing came over the wire from the engine server (base64 rows), every input position but the last.
        assert (arrays[0]["routed_experts"][:-1] >= 0).all()
    finally:
        proxy.stop(10)
        engine.stop(10)
    assert proxy.process.returncode == 0


def test_the_proxy_command_refuses_to_start_without_an_admin_token(proxy_model_dir):
    import subprocess

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "legorl_jax.proxy",
            "--engine-url",
            "http://127.0.0.1:9",
            "--model",
            str(proxy_model_dir),
        ],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "LEGORL_PROXY_ADMIN_TOKEN": ""},
    )
    assert out.returncode == 2 and "--admin-token" in out.stderr


@pytest.mark.parametrize("argv_tail", [["--tool-parser", "mistral"], ["--mode", "greedy"]])
def test_the_proxy_command_rejects_bad_options_naming_the_value(proxy_model_dir, argv_tail):
    import subprocess

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "legorl_jax.proxy",
            "--engine-url",
            "http://127.0.0.1:9",
            "--model",
            str(proxy_model_dir),
            "--admin-token",
            "xxxxxxxxxx",
            *argv_tail,
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and argv_tail[1] in out.stderr
