from logsift.parser import ParseStats, parse_lines

LOG = """\
2024-03-10T09:15:02.120+01:00 WARNING [billing.invoices] retrying payment 81723
    Traceback (most recent call last):
      File "pay.py", line 3
2024-03-10T09:15:03+01:00 warn [billing] second
garbage line
2024-03-10T09:15:04+01:00 NOTALEVEL [x] third
"""


def test_records_with_continuation_lines():
    records = list(parse_lines(LOG.splitlines()))
    assert [r.message for r in records] == ["retrying payment 81723", "second"]
    assert records[0].extra == ["    Traceback (most recent call last):", '      File "pay.py", line 3']
    assert records[0].text().splitlines()[0] == LOG.splitlines()[0]


def test_level_aliases_are_canonical():
    records = list(parse_lines(LOG.splitlines()))
    assert (records[1].level, records[1].levelno) == ("WARNING", 30)


def test_unparseable_lines_are_counted_with_line_numbers():
    stats = ParseStats()
    list(parse_lines(LOG.splitlines(), "app.log", stats))
    assert stats.skipped == [("app.log", 5), ("app.log", 6)]
    assert stats.records == 2
