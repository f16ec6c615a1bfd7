import pytest

from flagparse import Parser, UsageError


def make_parser():
    p = Parser("deploy")
    p.option("--set", action="append")
    p.option("--filter")
    p.flag("--verbose", "-v", action="count")
    p.flag("--color")
    return p


def test_value_containing_equals_after_inline_equals():
    args = make_parser().parse(["--set=image=web:2", "--set=DEBUG=1"])
    assert args.set == ["image=web:2", "DEBUG=1"]


def test_inline_value_keeps_every_equals_sign():
    assert make_parser().parse(["--filter=a==b=c"]).filter == "a==b=c"
    assert make_parser().parse(["--filter=="]).filter == "="


def test_empty_inline_value_is_allowed():
    assert make_parser().parse(["--filter="]).filter == ""


def test_boolean_flag_inline_value_with_equals_is_a_usage_error():
    with pytest.raises(UsageError, match="--color"):
        make_parser().parse(["--color=yes=no"])


def test_space_separated_value_with_equals_still_works():
    assert make_parser().parse(["--filter", "status=open"]).filter == "status=open"
