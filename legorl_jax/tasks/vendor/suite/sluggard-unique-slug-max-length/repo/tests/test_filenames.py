import pytest

from sluggard import safe_filename
from sluggard.filenames import split_extension


def test_stem_is_slugified_and_extension_kept():
    assert safe_filename("Q3 Report: Ümsatz/2024.PDF") == "q3-report-umsatz-2024.pdf"


def test_extension_rules():
    assert split_extension("archive.tar.gz") == ("archive.tar", ".gz")
    assert split_extension(".bashrc") == (".bashrc", "")
    assert split_extension("notes.") == ("notes.", "")


def test_windows_device_names_are_avoided():
    assert safe_filename("CON.txt") == "con-file.txt"


def test_length_limit_includes_extension():
    name = safe_filename("A very long title indeed.markdown", max_length=20)
    assert name == "a-very-long.markdown" and len(name) <= 20
    with pytest.raises(ValueError, match="no room"):
        safe_filename("x.markdown", max_length=5)
