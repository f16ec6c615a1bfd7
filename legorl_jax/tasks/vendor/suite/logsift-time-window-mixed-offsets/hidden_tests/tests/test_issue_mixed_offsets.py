import io

from logsift import main

# The same four events, logged by hosts in Berlin (+01:00), New York (-05:00) and UTC.
MERGED = """\
2024-03-10T10:30:00+01:00 INFO [eu.api] request a
2024-03-10T04:45:00-05:00 ERROR [us.api] request b failed
2024-03-10T09:40:00Z WARNING [edge] request c slow
2024-03-10T11:00:00+01:00 INFO [eu.api] request d
"""


def run(*argv, text=MERGED):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdin=io.StringIO(text), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def messages(out):
    return [line.split("] ", 1)[1] for line in out.splitlines()]


def test_since_compares_instants_across_offsets():
    code, out, _ = run("--since", "2024-03-10T09:35:00Z")
    assert code == 0
    assert messages(out) == ["request b failed", "request c slow", "request d"]


def test_until_is_exclusive_and_the_window_may_use_another_offset():
    _, out, _ = run("--until", "2024-03-10T09:45:00Z")
    assert messages(out) == ["request a", "request c slow"]
    _, out, _ = run("--since", "2024-03-10T04:40:00-05:00", "--until", "2024-03-10T05:00:00-05:00")
    assert messages(out) == ["request b failed", "request c slow"]


def test_z_and_zero_offset_and_fractions_are_the_same_instant():
    log = "2024-03-10T10:00:00+00:00 INFO [a] zero offset\n2024-03-10T10:00:00.500Z INFO [a] half second\n"
    _, out, _ = run("--since", "2024-03-10T10:00:00Z", text=log)
    assert messages(out) == ["zero offset", "half second"]
    _, out, _ = run("--until", "2024-03-10T10:00:00.250+00:00", text=log)
    assert messages(out) == ["zero offset"]


def test_sort_orders_by_instant_and_keeps_original_text():
    _, out, _ = run("--sort")
    assert out.splitlines() == [
        "2024-03-10T10:30:00+01:00 INFO [eu.api] request a",
        "2024-03-10T09:40:00Z WARNING [edge] request c slow",
        "2024-03-10T04:45:00-05:00 ERROR [us.api] request b failed",
        "2024-03-10T11:00:00+01:00 INFO [eu.api] request d",
    ]


def test_until_is_checked_against_since_as_instants():
    # 08:30Z is before 09:00Z, although "09:30" sorts after "04:00" as text.
    code, _, err = run("--since", "2024-03-10T04:00:00-05:00", "--until", "2024-03-10T09:30:00+01:00")
    assert code == 2 and "is not after" in err
    # 09:00Z to 09:30Z: request a (09:30Z) is excluded by the exclusive end, nothing else is inside.
    code, out, err = run("--since", "2024-03-10T10:00:00+01:00", "--until", "2024-03-10T04:30:00-05:00")
    assert "is not after" not in err
    assert code == 1 and out == ""
    code, out, _ = run("--since", "2024-03-10T10:00:00+01:00", "--until", "2024-03-10T04:31:00-05:00")
    assert messages(out) == ["request a"]


def test_same_offset_window_unchanged():
    _, out, _ = run("--since", "2024-03-10T10:30:00+01:00", "--until", "2024-03-10T11:00:00+01:00", "--logger", "eu")
    assert messages(out) == ["request a"]
