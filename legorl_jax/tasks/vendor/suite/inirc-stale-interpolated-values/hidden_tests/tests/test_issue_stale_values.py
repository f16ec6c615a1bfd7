import pytest

from inirc import Config, InterpolationError

TEXT = """
[DEFAULT]
root = /srv/app
scheme = http

[server]
host = localhost
port = 8080
url = ${scheme}://${host}:${port}/
health = ${url}health

[paths]
logs = ${root}/logs
archive = ${paths:logs}/archive
"""


def loaded():
    cfg = Config.from_string(TEXT)
    # Read everything once so every value is cached before the change.
    for section in cfg.sections():
        dict(cfg.items(section))
    return cfg


def test_changing_a_referenced_key_updates_the_referencing_value():
    cfg = loaded()
    cfg.set("server", "host", "example.org")
    assert cfg.get("server", "url") == "http://example.org:8080/"


def test_change_propagates_through_chains_and_sections():
    cfg = loaded()
    cfg.set("paths", "logs", "/var/log/app")
    assert cfg.get("paths", "archive") == "/var/log/app/archive"
    cfg.set("server", "port", "9000")
    assert cfg.get("server", "health") == "http://localhost:9000/health"


def test_changing_a_default_updates_every_section():
    cfg = loaded()
    cfg.set("DEFAULT", "root", "/opt/app")
    cfg.set("DEFAULT", "scheme", "https")
    assert cfg.get("paths", "logs") == "/opt/app/logs"
    assert cfg.get("paths", "root") == "/opt/app"
    assert cfg.get("server", "url") == "https://localhost:8080/"


def test_shadowing_a_default_in_a_section():
    cfg = loaded()
    cfg.set("server", "scheme", "https")
    assert cfg.get("server", "url") == "https://localhost:8080/"
    assert cfg.get("paths", "scheme") == "http"


def test_removing_a_referenced_key_is_reported():
    cfg = loaded()
    cfg.remove_option("server", "port")
    with pytest.raises(InterpolationError, match="port"):
        cfg.get("server", "url")


def test_unrelated_values_and_direct_set_unchanged():
    cfg = loaded()
    cfg.set("server", "host", "example.org")
    assert cfg.get("server", "host") == "example.org"
    assert cfg.get("paths", "archive") == "/srv/app/logs/archive"
