from csvlet import Dialect, format_row, read_records, read_rows, write_records, write_rows
from csvlet.dialect import QUOTE_ALL


def test_value_with_embedded_quotes_round_trips():
    rows = [["id", "comment"], ["7", 'Use a 3/4" socket, not a 1/2"']]
    assert read_rows(write_rows(rows)) == rows


def test_embedded_quote_is_doubled_in_output():
    assert format_row(['say "hi"', "x"]) == '"say ""hi""",x'


def test_embedded_quote_doubled_with_custom_quotechar_and_quote_all():
    d = Dialect(quotechar="'", quoting=QUOTE_ALL)
    assert format_row(["it's", "plain"], d) == "'it''s','plain'"
    assert read_rows(write_rows([["it's"]], d), d) == [["it's"]]


def test_records_with_quotes_round_trip():
    records = [{"name": '5" floppy', "qty": "2"}]
    assert read_records(write_records(records, ["name", "qty"])) == records


def test_field_without_quotes_still_written_bare():
    assert format_row(["plain", "a,b"]) == 'plain,"a,b"'
