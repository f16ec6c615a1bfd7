import pytest

from flagparse import Parser, UsageError


def test_help_lists_options_with_defaults():
    p = Parser("tool", "Does things")
    p.option("--level", "-l", type=int, default=3, help="how much")
    p.positional("path", help="where")
    text = p.help()
    assert text.startswith("usage: tool [--level LEVEL] path\n")
    assert "  --level, -l LEVEL     how much (default: 3)" in text
    assert "  path                  where" in text


def test_usage_error_format_has_program_prefix():
    p = Parser("tool")
    with pytest.raises(UsageError) as info:
        p.parse(["--what"])
    assert info.value.format() == "tool: error: unrecognized option: --what"


def test_bad_declarations_are_rejected():
    p = Parser("tool")
    with pytest.raises(ValueError, match="must look like"):
        p.option("level")
    p.option("--x")
    with pytest.raises(ValueError, match="declared twice"):
        p.option("--x")
