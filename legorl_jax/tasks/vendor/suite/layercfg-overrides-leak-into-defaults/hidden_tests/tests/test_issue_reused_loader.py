import copy

from layercfg import Loader

DEFAULTS = {"server": {"host": "127.0.0.1", "port": 8000}, "plugins": ["core"], "log": {"level": "info"}}
SCHEMA = {"server": {"host": str, "port": int}, "plugins": list, "log": {"level": str}}


def fresh_defaults():
    return copy.deepcopy(DEFAULTS)


def test_env_override_does_not_stick_to_the_next_load():
    loader = Loader(fresh_defaults(), SCHEMA)
    assert loader.load(environ={"APP_SERVER__PORT": "9000"})["server"]["port"] == 9000
    assert loader.load(environ={})["server"]["port"] == 8000


def test_append_override_does_not_accumulate():
    loader = Loader(fresh_defaults(), SCHEMA)
    for _ in range(3):
        assert loader.load(environ={}, overrides=["plugins+=metrics"])["plugins"] == ["core", "metrics"]
    assert loader.load(environ={})["plugins"] == ["core"]


def test_defaults_passed_in_are_not_modified(tmp_path):
    defaults = fresh_defaults()
    (tmp_path / "app.toml").write_text('[server]\nhost = "0.0.0.0"\n')
    Loader(defaults, SCHEMA).load(
        files=[tmp_path / "app.toml"],
        environ={"APP_LOG__LEVEL": "debug"},
        overrides=["server.port=1", "plugins+=x"],
    )
    assert defaults == DEFAULTS


def test_mutating_a_loaded_config_leaves_later_loads_alone():
    loader = Loader(fresh_defaults(), SCHEMA)
    cfg = loader.load(environ={})
    cfg["log"]["level"] = "trace"
    cfg["plugins"].append("oops")
    again = loader.load(environ={})
    assert again["log"]["level"] == "info"
    assert again["plugins"] == ["core"]


def test_two_loaders_sharing_defaults_stay_independent():
    shared = fresh_defaults()
    a, b = Loader(shared, SCHEMA, env_prefix="A"), Loader(shared, SCHEMA, env_prefix="B")
    assert a.load(environ={"A_LOG__LEVEL": "debug"})["log"]["level"] == "debug"
    assert b.load(environ={})["log"]["level"] == "info"


def test_single_load_with_overrides_unchanged():
    cfg = Loader(fresh_defaults(), SCHEMA).load(environ={"APP_SERVER__PORT": "9000"}, overrides=["plugins+=m"])
    assert cfg["server"]["port"] == 9000 and cfg["plugins"] == ["core", "m"]
