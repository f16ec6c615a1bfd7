"""tools/bench_rollout.py's per-harness accounting: which sandbox time is the harness's and which is not."""

import asyncio
import importlib.util
import pathlib

import pytest


@pytest.fixture(scope="module")
def bench():
    path = pathlib.Path(__file__).parents[2] / "tools" / "bench_rollout.py"
    spec = importlib.util.spec_from_file_location("bench_rollout", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sandbox_seconds_count_only_sandbox_calls_that_no_model_call_started_during(bench):
    turns = [{"started_at": 10.0}, {"started_at": 20.0}]
    # A 1 s command from the host counts; a call spanning model calls is the harness itself running there.
    assert bench.sandbox_seconds([(11.0, 12.0), (5.0, 30.0), (21.0, 21.5)], turns) == 1.5


def test_the_timed_harness_times_every_exec_and_write_and_passes_the_rest_through(bench):

    class Sandbox:
        proxy_url_base = "http://gateway:1"

        async def exec(self, argv, **kwargs):
            return ("ran", argv)

        async def write_file(self, path, data):
            return ("wrote", path)

    class Harness:
        name, network, mounts, sandbox_user = "h", "proxy_only", {"/opt/h": "/host/h"}, None

        async def run(self, task, sandbox, llm):
            return [await sandbox.exec(["ls"]), await sandbox.write_file("/f", b""), sandbox.proxy_url_base]

    timed = bench.TimedHarness(Harness())
    assert (timed.name, timed.network, timed.mounts, timed.sandbox_user) == (
        "h",
        "proxy_only",
        {"/opt/h": "/host/h"},
        None,
    )
    result = asyncio.run(timed.run(None, Sandbox(), None))
    assert result == [("ran", ["ls"]), ("wrote", "/f"), "http://gateway:1"]
    assert len(timed.intervals) == 2 and all(a <= b for a, b in timed.intervals) and timed.started > 0


def test_second_daemon_without_a_second_ray_node_is_refused_naming_the_value(bench, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--second-daemon", "--ray-nodes", "1"])
    assert "--second-daemon needs --ray-nodes 2 or more, got --ray-nodes 1" in capsys.readouterr().err
