import pytest

from flagparse import Parser, UsageError


def make_parser():
    p = Parser("deploy", "Deploy a build")
    p.option("--env", "-e", choices=["dev", "prod"], default="dev", help="target")
    p.option("--replicas", "-r", type=int, default=1)
    p.option("--set", action="append")
    p.flag("--verbose", "-v", action="count")
    p.flag("--dry-run", "-n")
    p.positional("build")
    return p


def test_defaults_when_only_positional_given():
    args = make_parser().parse(["b-1"])
    assert args == {"env": "dev", "replicas": 1, "set": None, "verbose": 0, "dry_run": False, "build": "b-1"}


def test_long_options_with_space_and_equals():
    args = make_parser().parse(["--env", "prod", "--replicas=3", "b-2"])
    assert (args.env, args.replicas) == ("prod", 3)


def test_clustered_short_flags_and_attached_value():
    args = make_parser().parse(["-vvn", "-r4", "b-3"])
    assert (args.verbose, args.dry_run, args.replicas) == (2, True, 4)


def test_append_collects_each_occurrence():
    args = make_parser().parse(["--set", "a", "b-4", "--set", "b"])
    assert args.set == ["a", "b"]


def test_no_prefix_turns_boolean_flag_off():
    assert make_parser().parse(["-n", "--no-dry-run", "b"]).dry_run is False


def test_double_dash_ends_options():
    assert make_parser().parse(["--", "-not-an-option"]).build == "-not-an-option"


def test_negative_number_is_a_positional():
    p = Parser("calc")
    p.positional("x", type=int)
    assert p.parse(["-5"]).x == -5


def test_invalid_choice_is_reported_with_value():
    with pytest.raises(UsageError, match=r"--env/-e: invalid choice: 'staging'"):
        make_parser().parse(["--env", "staging", "b"])


def test_bad_int_names_option_and_value():
    with pytest.raises(UsageError, match=r"invalid int value: 'many'"):
        make_parser().parse(["-r", "many", "b"])


def test_unknown_option_and_missing_positional():
    with pytest.raises(UsageError, match="unrecognized option: --colour"):
        make_parser().parse(["--colour", "b"])
    with pytest.raises(UsageError, match="missing positional argument"):
        make_parser().parse([])
