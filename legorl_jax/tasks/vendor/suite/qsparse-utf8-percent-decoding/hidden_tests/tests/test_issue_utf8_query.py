from urllib.parse import parse_qsl

import pytest

from qsparse import build_query, parse_nested, parse_pairs, parse_query, percent_decode


def test_multibyte_escapes_decode_as_utf8():
    assert parse_query("name=J%C3%BCrgen+M")["name"] == "Jürgen M"
    assert percent_decode("%E2%82%AC%20%F0%9F%98%80") == "€ 😀"


def test_utf8_keys_and_nested_values():
    assert parse_pairs("caf%C3%A9=cr%C3%A8me") == [("café", "crème")]
    assert parse_nested("city[%C3%BC]=M%C3%BCnchen") == {"city": {"ü": "München"}}


@pytest.mark.parametrize(
    "pairs",
    [[("q", "café & co")], [("emoji", "👍🏽"), ("jp", "東京")], [("mixed", "a%b ü+€")]],
    ids=["latin", "astral-and-cjk", "mixed"],
)
def test_non_ascii_round_trip_through_build(pairs):
    assert parse_pairs(build_query(pairs)) == pairs


def test_matches_urllib_for_unencoded_and_invalid_bytes():
    query = "a=%C3%A9t%C3%A9&b=%FF&c=%C3&d=ok%zz&e=%e2%82%ac"
    assert parse_pairs(query) == parse_qsl(query)


def test_ascii_and_literal_unicode_unchanged():
    assert parse_pairs("q=%41%42c&r=ü") == [("q", "ABc"), ("r", "ü")]
