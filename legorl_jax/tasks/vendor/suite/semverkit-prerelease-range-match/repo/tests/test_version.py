import pytest

from semverkit import Version, VersionError, latest, sort_versions

SPEC_ORDER = [
    "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta",
    "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0",
]


def test_spec_precedence_example():
    versions = [Version.parse(v) for v in SPEC_ORDER]
    assert versions == sorted(versions)
    assert sort_versions(list(reversed(SPEC_ORDER))) == SPEC_ORDER


def test_build_metadata_is_ignored_for_precedence():
    assert Version.parse("1.0.0+a") == Version.parse("1.0.0+b")
    assert str(Version.parse("1.0.0-rc.1+sha.5114f85")) == "1.0.0-rc.1+sha.5114f85"


def test_invalid_versions():
    for bad in ("1.2", "01.2.3", "1.2.3-01", "1.2.3-", "a.b.c"):
        with pytest.raises(VersionError, match="invalid semantic version"):
            Version.parse(bad)


def test_bumps():
    v = Version.parse("1.2.3-rc.1")
    assert (str(v.bump_major()), str(v.bump_minor()), str(v.bump_patch())) == ("2.0.0", "1.3.0", "1.2.3")
    assert str(Version.parse("1.2.3").bump_patch()) == "1.2.4"


def test_latest_skips_prereleases_unless_asked():
    assert latest(["1.2.0", "1.3.0-rc.1"]) == "1.2.0"
    assert latest(["1.2.0", "1.3.0-rc.1"], include_prerelease=True) == "1.3.0-rc.1"
