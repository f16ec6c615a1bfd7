import io
import json

from logsift import main

LOG = """\
2024-03-10T08:00:00+01:00 DEBUG [app] booting
2024-03-10T08:05:00+01:00 INFO [billing.invoices] invoice 1 sent
2024-03-10T08:10:00+01:00 ERROR [billing] payment refused
    detail: card expired
2024-03-10T08:15:00+01:00 WARNING [db.pool] slow query
2024-03-10T08:20:00+01:00 CRITICAL [dbx] disk full
"""


def run(*argv, text=LOG):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdin=io.StringIO(text), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_level_threshold():
    code, out, _ = run("--level", "warn")
    assert code == 0
    assert [line.split()[1] for line in out.splitlines() if not line.startswith(" ")] == ["ERROR", "WARNING", "CRITICAL"]


def test_logger_prefix_matches_children_only():
    _, out, _ = run("--logger", "db", "--count")
    assert out == "1\n"
    _, out, _ = run("--logger", "billing", "--count")
    assert out == "2\n"


def test_grep_searches_continuation_lines():
    _, out, _ = run("--grep", "expired")
    assert out == "2024-03-10T08:10:00+01:00 ERROR [billing] payment refused\n    detail: card expired\n"


def test_time_window_same_offset():
    _, out, _ = run("--since", "2024-03-10T08:05:00+01:00", "--until", "2024-03-10T08:15:00+01:00", "--count")
    assert out == "2\n"


def test_json_output():
    _, out, _ = run("--level", "critical", "--json")
    assert json.loads(out) == {
        "time": "2024-03-10T08:20:00+01:00", "level": "CRITICAL", "logger": "dbx", "message": "disk full",
        "extra": [], "source": "-", "line": 6,
    }


def test_no_match_and_bad_usage_exit_codes():
    assert run("--grep", "nothing-like-this")[0] == 1
    assert run("--level", "loud")[0] == 2
    assert run("--since", "yesterday")[0] == 2
    code, _, err = run("--since", "2024-03-10T09:00:00+01:00", "--until", "2024-03-10T08:00:00+01:00")
    assert code == 2 and "is not after" in err


def test_files_are_read_in_order(tmp_path):
    (tmp_path / "a.log").write_text(LOG)
    out = io.StringIO()
    assert main([str(tmp_path / "a.log"), "--count"], stdout=out, stderr=io.StringIO()) == 0
    assert out.getvalue() == "5\n"
