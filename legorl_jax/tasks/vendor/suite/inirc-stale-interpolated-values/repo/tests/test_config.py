import pytest

from inirc import Config, InterpolationError

TEXT = """
[DEFAULT]
root = /srv/app

[server]
host = localhost
port = 8080
url = http://${host}:${port}/
debug = yes

[paths]
logs = ${root}/logs
cache = ${paths:logs}/../cache
price = $$5
"""


def test_readme_example():
    cfg = Config.from_string(TEXT)
    assert cfg.get("server", "url") == "http://localhost:8080/"
    assert cfg.getint("server", "port") == 8080
    assert cfg.getboolean("server", "debug") is True


def test_default_section_and_cross_section_references():
    cfg = Config.from_string(TEXT)
    assert cfg.get("paths", "cache") == "/srv/app/logs/../cache"
    assert cfg.get("server", "root") == "/srv/app"
    assert cfg.get("paths", "price") == "$5"


def test_set_then_get_same_key():
    cfg = Config.from_string(TEXT)
    assert cfg.get("server", "host") == "localhost"
    cfg.set("server", "host", "example.org")
    assert cfg.get("server", "host") == "example.org"


def test_missing_reference_and_cycle():
    cfg = Config.from_string("[a]\nx = ${y}\np = ${q}\nq = ${p}\n")
    with pytest.raises(InterpolationError, match="no option 'y'"):
        cfg.get("a", "x")
    with pytest.raises(InterpolationError, match="cycle"):
        cfg.get("a", "p")


def test_read_string_merges_and_refreshes():
    cfg = Config.from_string(TEXT)
    assert cfg.get("server", "url") == "http://localhost:8080/"
    cfg.read_string("[server]\nport = 9090\n")
    assert cfg.get("server", "url") == "http://localhost:9090/"


def test_fallback_and_missing_option():
    cfg = Config.from_string(TEXT)
    assert cfg.get("server", "tls", fallback="off") == "off"
    with pytest.raises(KeyError, match="no option 'tls'"):
        cfg.get("server", "tls")


def test_getlist_splits_commas_and_lines():
    cfg = Config.from_string("[s]\nhosts = a, b\n    c\n")
    assert cfg.getlist("s", "hosts") == ["a", "b", "c"]


def test_to_string_keeps_references():
    cfg = Config.from_string(TEXT)
    out = cfg.to_string()
    assert out.startswith("[DEFAULT]\nroot = /srv/app\n\n[server]\n")
    assert "url = http://${host}:${port}/" in out
    assert Config.from_string(out).get("paths", "cache") == "/srv/app/logs/../cache"
