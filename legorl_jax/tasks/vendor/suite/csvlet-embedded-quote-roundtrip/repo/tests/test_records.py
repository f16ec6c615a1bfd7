import pytest

from csvlet import read_records, write_records


def test_records_use_header_and_converters():
    text = "name,qty\nbolt,3\nnut,10\n"
    assert read_records(text, converters={"qty": int}) == [
        {"name": "bolt", "qty": 3},
        {"name": "nut", "qty": 10},
    ]


def test_short_rows_are_padded_with_restval():
    assert read_records("a,b\n1\n", restval="-") == [{"a": "1", "b": "-"}]


def test_conversion_error_names_row_and_column():
    with pytest.raises(ValueError, match="row 2, column 'qty'"):
        read_records("qty\nmany\n", converters={"qty": int})


def test_written_records_read_back():
    records = [{"name": "a, b", "qty": 1}, {"name": "c"}]
    text = write_records(records, ["name", "qty"])
    assert read_records(text) == [{"name": "a, b", "qty": "1"}, {"name": "c", "qty": ""}]
