import pytest

from semverkit import Version, max_satisfying, min_satisfying, satisfies


@pytest.mark.parametrize(
    "version, range_",
    [
        ("2.0.0-beta.1", "^1.2.0"),
        ("1.3.0-rc.1", "^1.2.0"),
        ("1.3.0-rc.1", ">=1.2.0 <2.0.0"),
        ("1.2.4-alpha", "~1.2.3"),
        ("1.3.1-rc.1", ">=1.3.0-rc.1"),
        ("1.5.0-beta", "1.x"),
        ("3.0.0-alpha", "*"),
    ],
    ids=["caret-next-major", "caret-minor", "explicit-bounds", "tilde", "other-tuple", "x-range", "star"],
)
def test_prereleases_do_not_match_ranges_without_a_prerelease_on_their_tuple(version, range_):
    assert not satisfies(version, range_)


@pytest.mark.parametrize(
    "version, range_",
    [
        ("1.3.0-rc.2", ">=1.3.0-rc.1"),
        ("1.2.3-beta.4", "~1.2.3-beta.2"),
        ("1.2.3-beta.4", "^1.2.3-beta.2"),
        ("2.0.0-rc.1", "^1.0.0 || >=2.0.0-rc.0"),
        ("1.0.0-rc.1", "1.0.0-rc.1"),
    ],
    ids=["same-tuple", "tilde-pre", "caret-pre", "or-alternative", "exact"],
)
def test_prereleases_match_when_a_comparator_names_their_tuple(version, range_):
    assert satisfies(version, range_)


def test_max_satisfying_ignores_unrequested_prereleases():
    assert max_satisfying(["1.2.0", "1.3.0-rc.1", "1.2.5", "2.0.0-beta.1"], "^1.2.0") == "1.2.5"
    assert max_satisfying(["1.3.0-rc.1", "1.3.0-rc.2", "1.2.0"], ">=1.3.0-rc.1") == "1.3.0-rc.2"


def test_alternative_without_prerelease_does_not_admit_one():
    assert not satisfies("1.2.4-rc.1", "1.2.3-rc.1 || ^1.2.0")


def test_release_versions_unchanged():
    assert satisfies("1.9.9", "^1.2.0")
    assert not satisfies("2.0.0", "^1.2.0")


def admitted(pick, versions, range_):
    return pick([Version.parse(v) for v in versions], range_)


def test_patch_after_the_newest_release_a_caret_range_admits():
    newest = admitted(max_satisfying, ["4.1.0", "4.2.0-rc.3", "4.1.7", "4.0.2"], "^4.1.0")
    assert str(newest.bump_patch()) == "4.1.8"


def test_patch_after_the_oldest_release_an_open_lower_bound_admits():
    oldest = admitted(min_satisfying, ["2.3.0-alpha.2", "2.3.1", "2.6.4"], ">=2.2.9")
    assert str(oldest.bump_patch()) == "2.3.2"


def test_minor_after_the_newest_release_an_x_range_admits():
    newest = admitted(max_satisfying, ["6.4.2", "6.12.0-beta", "6.9.1", "5.8.0"], "6.x")
    assert str(newest.bump_minor()) == "6.10.0"
