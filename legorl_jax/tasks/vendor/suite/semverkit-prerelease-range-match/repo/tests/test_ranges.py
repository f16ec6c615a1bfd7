import pytest

from semverkit import VersionError, max_satisfying, min_satisfying, parse_range, satisfies


@pytest.mark.parametrize(
    "text, desugared",
    [
        ("^1.2.3", ">=1.2.3 <2.0.0"),
        ("^0.2.3", ">=0.2.3 <0.3.0"),
        ("^0.0.3", ">=0.0.3 <0.0.4"),
        ("~1.2", ">=1.2.0 <1.3.0"),
        ("1.x", ">=1.0.0 <2.0.0"),
        ("*", "*"),
        ("1.2.3 - 2.3", ">=1.2.3 <2.4.0"),
        (">1.2 <=2", ">=1.3.0 <3.0.0"),
        ("1.2.7 || >=1.2.9 <2.0.0", "1.2.7 || >=1.2.9 <2.0.0"),
    ],
    ids=["caret", "caret-zero-minor", "caret-zero-patch", "tilde", "x-range", "star", "hyphen", "partials", "or"],
)
def test_desugaring(text, desugared):
    assert str(parse_range(text)) == desugared


def test_release_versions_against_ranges():
    assert satisfies("1.4.2", "^1.2.0")
    assert not satisfies("2.0.0", "^1.2.0")
    assert satisfies("1.2.8", "1.2.7 || >=1.2.9 <2.0.0") is False
    assert satisfies("1.3.0", "1.2.7 || >=1.2.9 <2.0.0")
    assert satisfies("0.0.0", "*")


def test_prerelease_matches_its_own_exact_comparator():
    assert satisfies("1.0.0-rc.1", "1.0.0-rc.1")


def test_max_and_min_satisfying_keep_input_objects():
    versions = ["1.2.0", "1.2.9", "2.0.0", "1.3.0"]
    assert max_satisfying(versions, "1.2.x") == "1.2.9"
    assert min_satisfying(versions, "^1.2.5") == "1.2.9"
    assert max_satisfying(versions, ">=3") is None


def test_invalid_ranges():
    with pytest.raises(VersionError, match="invalid version in range"):
        parse_range("^1.2.3.4")
    with pytest.raises(VersionError, match="empty alternative"):
        parse_range("1.2.3 ||")
