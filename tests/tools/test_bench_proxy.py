"""tools/bench_proxy.py's start-up check of its bench extra (LiteLLM's proxy server)."""

import importlib.metadata
import importlib.util
import pathlib

import pytest


@pytest.fixture(scope="module")
def bench():
    path = pathlib.Path(__file__).parents[2] / "tools" / "bench_proxy.py"
    spec = importlib.util.spec_from_file_location("bench_proxy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def installed(monkeypatch):
    """The installed distributions, as the outside boundary: every one present but the names put in the
    returned set. LiteLLM's own requirement list is the real one."""
    absent = set()
    real = importlib.metadata.distribution

    def distribution(name):
        if name in absent:
            raise importlib.metadata.PackageNotFoundError(name)
        try:
            return real(name)
        except importlib.metadata.PackageNotFoundError:
            return object()

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    return absent


def test_the_proxy_bench_stops_at_start_naming_the_missing_package_and_the_install_command(bench, installed):
    pytest.importorskip("litellm")  # its metadata holds the proxy extra's requirements
    installed.add("backoff")  # what a plain `pip install -e .` lacks (issue 32's newcomer run)
    with pytest.raises(SystemExit) as stop:
        bench.main(["--sessions", "1", "--turns", "1", "--rounds", "1"])
    message = str(stop.value.code)
    assert "backoff" in message and "pip install -e '.[bench]'" in message


def test_only_the_proxy_extras_requirements_are_checked(bench, installed):
    pytest.importorskip("litellm")
    assert bench.missing_from_bench_extra() == []
    # A base requirement of LiteLLM (not of its proxy extra) is not the bench extra's to name.
    installed.update({"httpx", "backoff"})
    assert bench.missing_from_bench_extra() == ["backoff"]
