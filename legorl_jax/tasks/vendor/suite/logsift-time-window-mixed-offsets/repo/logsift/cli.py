"""The command line: options -> filter -> output. main() returns the exit status."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TextIO

from logsift.filters import build_filter
from logsift.levels import canonical_level
from logsift.parser import TIMESTAMP_RE, ParseStats, parse_lines


def _timestamp(text: str) -> str:
    if not TIMESTAMP_RE.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"expected an ISO 8601 timestamp with an offset, got {text!r}")
    return text.strip()


def _level(text: str) -> str:
    try:
        return canonical_level(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="logsift", description="Filter structured log records.")
    p.add_argument("files", nargs="*", help="log files (default: standard input)")
    p.add_argument("--level", type=_level, help="minimum level")
    p.add_argument("--logger", action="append", default=[], help="logger name or parent; repeatable")
    p.add_argument("--grep", help="regular expression searched in messages")
    p.add_argument("-i", "--ignore-case", action="store_true", help="case-insensitive --grep")
    p.add_argument("--since", type=_timestamp, help="keep records at or after this time")
    p.add_argument("--until", type=_timestamp, help="keep records before this time")
    p.add_argument("--sort", action="store_true", help="order output by time")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--count", action="store_true", help="print the number of matching records")
    out.add_argument("--json", action="store_true", help="print one JSON object per record")
    return p


def main(argv: Sequence[str], stdin: TextIO | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    stdin, stdout, stderr = stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr
    try:
        args = build_parser().parse_args(list(argv))
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.since and args.until and args.until <= args.since:
        print(f"logsift: error: --until {args.until} is not after --since {args.since}", file=stderr)
        return 2
    try:
        keep = build_filter(args.level, args.logger, args.grep, args.ignore_case, args.since, args.until)
    except ValueError as exc:
        print(f"logsift: error: {exc}", file=stderr)
        return 2

    stats = ParseStats()
    records = []
    sources = [(name, None) for name in args.files] or [("-", stdin)]
    for name, stream in sources:
        if stream is None:
            try:
                with open(name, encoding="utf-8", errors="replace") as fh:
                    records += [r for r in parse_lines(fh, name, stats) if keep(r)]
            except OSError as exc:
                print(f"logsift: cannot read {name}: {exc.strerror}", file=stderr)
                return 2
        else:
            records += [r for r in parse_lines(stream, name, stats) if keep(r)]
    if args.sort:
        records.sort(key=lambda r: r.timestamp)

    if args.count:
        print(len(records), file=stdout)
    elif args.json:
        for r in records:
            print(json.dumps(r.as_json(), ensure_ascii=False), file=stdout)
    else:
        for r in records:
            print(r.text(), file=stdout)
    if stats.skipped:
        print(f"logsift: skipped {len(stats.skipped)} unparseable line(s)", file=stderr)
    return 0 if records else 1
