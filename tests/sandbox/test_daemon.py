"""The Docker daemon connection (legorl_jax.sandbox.daemon): whether a daemon answers, and removing a
sandbox's container that exits under the daemon's kill.

The daemon's API is the outside boundary here: stand-ins answer pings, or answer `remove_container` as
dockerd did in a full-suite run ("Could not kill running container ..., cannot remove - Container ... is not
running") when the container's main process ended while the forced removal was killing it."""

import time

import docker
import pytest

from legorl_jax.sandbox import daemon, resolve_backend
from legorl_jax.sandbox.daemon import remove_container

RACE = "Could not kill running container f734, cannot remove - Container f734 is not running"


class DaemonAPI:
    """Answers `remove_container` with the given errors in turn, then succeeds; records the calls."""

    def __init__(self, *errors: Exception):
        self.errors, self.calls = list(errors), []

    def remove_container(self, ref, force, v):
        self.calls.append((ref, force, v))
        if self.errors:
            raise self.errors.pop(0)


def api_error(message: str) -> docker.errors.APIError:
    return docker.errors.APIError("500 Server Error", explanation=message)


def test_a_container_that_exits_while_being_killed_is_removed_on_the_next_try():
    api = DaemonAPI(api_error(RACE))
    remove_container(api, "legorl-1")
    assert api.calls == [("legorl-1", True, True)] * 2


def test_the_race_that_persists_past_the_attempts_is_raised():
    api = DaemonAPI(*(api_error(RACE) for _ in range(3)))
    with pytest.raises(docker.errors.APIError, match="is not running"):
        remove_container(api, "legorl-1", attempts=3)
    assert len(api.calls) == 3


def test_other_daemon_errors_are_raised_at_once():
    api = DaemonAPI(api_error("driver failed removing the root filesystem"))
    with pytest.raises(docker.errors.APIError, match="driver failed"):
        remove_container(api, "legorl-1")
    assert len(api.calls) == 1


class Pings:
    """`docker.from_env` for `available()`: each client's ping gives the next answer (an exception is
    raised, as a ping past its timeout raises); counts the clients made."""

    def __init__(self, *answers):
        self.answers, self.made = list(answers), 0

    def __call__(self, timeout):
        self.made += 1
        return _Client(self.answers.pop(0))


class _Client:
    def __init__(self, answer):
        self.answer = answer

    def ping(self):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def close(self):
        pass


def requests_timeout() -> Exception:
    import requests

    return requests.exceptions.ReadTimeout("UnixHTTPConnectionPool(host='localhost'): Read timed out.")


@pytest.fixture
def pings(monkeypatch, tmp_path):
    """A DOCKER_HOST of this test's own (so no earlier answer is remembered) and scripted pings."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/docker.sock")

    def script(*answers):
        fake = Pings(*answers)
        monkeypatch.setattr(docker, "from_env", fake)
        return fake

    return script


def test_a_daemon_that_answered_once_stays_docker_when_a_later_ping_would_time_out(pings):
    # Under load a ping can miss its timeout; `auto` must not move the rest of the run to bubblewrap.
    fake = pings(True, requests_timeout())
    assert daemon.available()
    later = time.monotonic() + 3600.0
    with pytest.MonkeyPatch.context() as clock:  # an hour on: no expiry sends it back to the ping
        clock.setattr(time, "monotonic", lambda: later)
        assert resolve_backend("auto") == "docker" and daemon.available()
    assert fake.made == 1


def test_a_daemon_that_did_not_answer_is_asked_again(pings):
    fake = pings(requests_timeout(), True)
    assert resolve_backend("auto") == "bwrap"
    assert resolve_backend("auto") == "docker"
    assert fake.made == 2
