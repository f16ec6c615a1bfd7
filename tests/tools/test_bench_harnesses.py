"""tools/bench_harnesses.py: the version column read from each adapter's install record."""

import pytest


@pytest.fixture(scope="module")
def bench(load_tool):
    return load_tool("bench_harnesses")


def test_the_version_comes_from_each_kind_of_install_record(bench):
    # The records as the adapters write them (npm, SWE-agent's vendored archive, pip pins).
    assert bench.version_in_record({"package": "@openai/codex", "version": "0.171.0"}) == "0.171.0"
    assert bench.version_in_record({"swe_agent": "1.1.0", "swe_rex": "swe-rex==1.4.0"}) == "1.1.0"
    assert (
        bench.version_in_record({"requirement": "terminal-bench==0.2.18", "tmux": "/usr/bin/tmux"})
        == "0.2.18"
    )
    pins = {"requirements": ["openhands-sdk==1.58.2", "openhands-tools==1.58.2"]}
    assert bench.version_in_record(pins) == "1.58.2"
    assert bench.version_in_record({"python": "/usr/bin/python3"}) == "?"
