import pytest

from layercfg import ConfigError, Loader


def make_loader():
    defaults = {"server": {"host": "127.0.0.1", "port": 8000}, "plugins": ["core"], "debug": False}
    schema = {"server": {"host": str, "port": int}, "plugins": list, "debug": bool}
    return Loader(defaults, schema, env_prefix="APP")


def test_defaults_only():
    cfg = make_loader().load(environ={})
    assert cfg["server"] == {"host": "127.0.0.1", "port": 8000}
    assert cfg.explain("server.port") == "defaults"


def test_file_layer_toml_and_json(tmp_path):
    (tmp_path / "a.toml").write_text('[server]\nhost = "0.0.0.0"\n')
    (tmp_path / "b.json").write_text('{"debug": true}')
    cfg = make_loader().load(files=[tmp_path / "a.toml", tmp_path / "b.json"], environ={})
    assert (cfg["server"]["host"], cfg["server"]["port"], cfg["debug"]) == ("0.0.0.0", 8000, True)
    assert cfg.explain("server.host") == str(tmp_path / "a.toml")


def test_environment_then_overrides_win():
    cfg = make_loader().load(environ={"APP_SERVER__PORT": "9000", "OTHER": "x"}, overrides=["server.port=9100"])
    assert cfg["server"]["port"] == 9100
    assert cfg.explain("server.port") == "override"


def test_environment_values_are_converted():
    cfg = make_loader().load(environ={"APP_DEBUG": "yes", "APP_PLUGINS": "a, b"})
    assert cfg["debug"] is True
    assert cfg["plugins"] == ["a", "b"]
    assert cfg.explain("debug") == "env:APP_DEBUG"


def test_append_override():
    assert make_loader().load(environ={}, overrides=["plugins+=metrics"])["plugins"] == ["core", "metrics"]


def test_bad_values_are_reported():
    with pytest.raises(ConfigError, match="server.port: cannot convert 'high' to int"):
        make_loader().load(environ={}, overrides=["server.port=high"])
    with pytest.raises(ConfigError, match="unknown setting 'server.tls'"):
        make_loader().load(environ={}, overrides=["server.tls=1"])
    with pytest.raises(ConfigError, match="needs a list"):
        make_loader().load(environ={}, overrides=["debug+=1"])


def test_bad_file_is_reported(tmp_path):
    (tmp_path / "bad.toml").write_text("[server\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        make_loader().load(files=[tmp_path / "bad.toml"], environ={})
