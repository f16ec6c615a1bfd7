"""Removing a Docker sandbox's container that exits under the daemon's kill (daemon.remove_container).

The daemon's API is the outside boundary here: a stand-in answers as dockerd did in a full-suite run
("Could not kill running container ..., cannot remove - Container ... is not running") when the container's
main process ended while the forced removal was killing it."""

import docker
import pytest

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
