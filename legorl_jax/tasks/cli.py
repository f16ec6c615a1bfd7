"""`python -m legorl_jax.tasks`: list, show, grade and validate tasks from the command line.

    python -m legorl_jax.tasks list --suite builtin [--split train] [--json]
    python -m legorl_jax.tasks show --suite builtin --task ID [--json]         # the whole task, gold included
    python -m legorl_jax.tasks grade --suite builtin --task ID --patch FILE|- [--json]
    python -m legorl_jax.tasks grade --suite builtin --task ID --gold --json
    python -m legorl_jax.tasks validate --suite builtin [--split S] [--task ID ...] [--concurrency N]

`--suite` is `builtin`, a SWE-bench `.jsonl`/`.json` file, or a Harbor task directory (or a directory of
them). `grade` builds the task's image when needed (`--no-build` skips that), grades the diff in a fresh
sandbox and prints the verifier report (`--json`: the report as JSON, `reward` among its fields).
`validate` checks that the gold patch gets reward 1 and an empty diff gets 0 for every chosen task, several
at a time, and prints one line per task.

Exit codes: 0 graded (or every task valid), 1 `validate` found a task whose gold/empty verdict is wrong,
2 bad input (unknown task, unreadable task file, missing patch file, bad arguments), 3 infrastructure
failure (image, sandbox or verifier failed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from legorl_jax.sandbox.base import SandboxError
from legorl_jax.tasks.agent_sandbox import oracle_diff
from legorl_jax.tasks.registry import find_task, load_suite
from legorl_jax.tasks.report import VerifierError, VerifierReport
from legorl_jax.tasks.schema import Task
from legorl_jax.tasks.task_image import ensure_task_image
from legorl_jax.tasks.verifier import SandboxFactory, grade

EXIT_OK, EXIT_INVALID, EXIT_BAD_INPUT, EXIT_INFRA = 0, 1, 2, 3


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m legorl_jax.tasks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def suite_args(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--suite",
            default="builtin",
            help="builtin, a .jsonl/.json/.parquet file of SWE-bench-style rows, or a task directory",
        )
        p.add_argument("--split", default=None, help="keep only tasks of this split")
        p.add_argument(
            "--image-template",
            default=None,
            help="image name template with {instance_id} (swebench's spelling) or {swegym_instance_id} "
            "(SWE-Gym's), for rows that name no image",
        )
        p.add_argument(
            "--test-cmd",
            default=None,
            help="test command (followed by the test files) for rows of repositories no spec knows, e.g. "
            "SWE-Gym's: 'pytest -rA'",
        )
        p.add_argument(
            "--log-parser",
            default=None,
            help="log parser for rows of repositories no spec knows, e.g. SWE-Gym's: parse_log_pytest",
        )

    def sandbox_args(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--backend",
            default="auto",
            choices=("auto", "docker", "bwrap"),
            help="sandbox backend (auto: Docker when a daemon answers, else bubblewrap)",
        )
        p.add_argument("--no-build", action="store_true", help="do not build missing task images")

    p = sub.add_parser("list", help="one line per task")
    suite_args(p)
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("show", help="one task in full")
    suite_args(p)
    p.add_argument("--task", required=True)
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("grade", help="grade a diff for one task")
    suite_args(p)
    sandbox_args(p)
    p.add_argument("--task", required=True)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--patch", help="diff file, or - for stdin")
    source.add_argument("--gold", action="store_true", help="grade the task's gold patch")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("validate", help="gold -> 1 and empty -> 0 for every task")
    suite_args(p)
    sandbox_args(p)
    p.add_argument("--task", action="append", default=None, help="only these tasks (repeatable)")
    p.add_argument("--concurrency", type=int, default=4)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        tasks = load_suite(
            args.suite,
            args.split,
            image_template=args.image_template,
            test_cmd=args.test_cmd,
            log_parser=args.log_parser,
        )
        if args.command == "list":
            return _list(tasks, args.json)
        if args.command == "show":
            return _show(find_task(tasks, args.task), args.json)
        factory = _factory(args.backend)
        if args.command == "grade":
            task = find_task(tasks, args.task)
            diff = None if args.gold else _read_patch(args.patch)
            return asyncio.run(_grade(task, diff, factory, build=not args.no_build, as_json=args.json))
        chosen = [find_task(tasks, t) for t in args.task] if args.task else tasks
        if args.concurrency < 1:
            raise ValueError(f"--concurrency must be positive, got {args.concurrency}")
        return asyncio.run(_validate(chosen, factory, build=not args.no_build, concurrency=args.concurrency))
    except (VerifierError, SandboxError) as err:
        print(f"infrastructure failure: {err}", file=sys.stderr)
        return EXIT_INFRA
    except (ValueError, TypeError, OSError) as err:
        print(f"bad input: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _factory(backend: str) -> SandboxFactory:
    from legorl_jax.sandbox import make_sandbox

    return lambda spec: make_sandbox(spec, backend=backend)


def _read_patch(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"--patch {path!r} is not a file")
    return file.read_text(encoding="utf-8", errors="surrogateescape")


def _list(tasks: list[Task], as_json: bool) -> int:
    rows = [
        {
            "id": t.instance_id,
            "split": t.split,
            "difficulty": t.difficulty,
            "domain": t.domain,
            "kind": t.kind,
            "title": t.title,
        }
        for t in tasks
    ]
    if as_json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    width = max((len(r["id"]) for r in rows), default=2)
    for r in rows:
        print(
            f"{r['id']:<{width}}  {r['split']:<10}  {r['difficulty'] or '-':<6}  {r['domain'] or '-':<16}  "
            f"{r['title']}"
        )
    return EXIT_OK


def _show(task: Task, as_json: bool) -> int:
    data = task.to_dict()
    if as_json:
        print(json.dumps(data, indent=2))
        return EXIT_OK
    for key, value in data.items():
        text = value if isinstance(value, str) else json.dumps(value)
        print(f"{key}:\n  " + "\n  ".join(str(text).splitlines() or [""]))
    return EXIT_OK


async def _prepare_image(task: Task, build: bool) -> None:
    if build:
        await asyncio.to_thread(ensure_task_image, task)


async def _grade(task: Task, diff: str | None, factory: SandboxFactory, *, build: bool, as_json: bool) -> int:
    await _prepare_image(task, build)
    if diff is None:
        diff = await oracle_diff(task, sandbox_factory=factory)
    report = await grade(task, diff, sandbox_factory=factory)
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(_summary(report))
    return EXIT_OK


def _summary(report: VerifierReport) -> str:
    lines = [
        f"{report.task_id}: reward {report.reward:g} (apply {report.apply.status}"
        + (f" via {report.apply.method}" if report.apply.method else "")
        + ")"
    ]
    lines += [f"  dropped {c.path}: {c.reason}" for c in report.removed_changes]
    lines += [f"  tampering: {t}" for t in report.tampering]
    lines += [f"  not passing: {t} ({report.tests.get(t, 'missing')})" for t in report.failed_tests]
    return "\n".join(lines)


async def _validate(tasks: list[Task], factory: SandboxFactory, *, build: bool, concurrency: int) -> int:
    gate = asyncio.Semaphore(concurrency)

    async def one(task: Task) -> tuple[Task, dict[str, Any]]:
        async with gate:
            try:
                await _prepare_image(task, build)
                gold = await grade(
                    task, await oracle_diff(task, sandbox_factory=factory), sandbox_factory=factory
                )
                empty = await grade(task, "", sandbox_factory=factory)
                return task, {
                    "gold": gold.reward,
                    "empty": empty.reward,
                    "why": gold.failed_tests + gold.tampering,
                }
            except (VerifierError, SandboxError) as err:
                return task, {"error": str(err), "reason": getattr(err, "reason", "sandbox")}

    results = await asyncio.gather(*(one(t) for t in tasks))
    reasons = Counter(r["reason"] for _, r in results if "error" in r)
    worst = EXIT_OK
    for task, r in results:
        if "error" in r:
            print(f"INFRA  {task.instance_id}: {r['error']}")
            worst = EXIT_INFRA
        elif r["gold"] == 1.0 and r["empty"] == 0.0:
            print(f"ok     {task.instance_id}")
        else:
            print(f"FAIL   {task.instance_id}: gold {r['gold']:g}, empty {r['empty']:g} {list(r['why'])[:5]}")
            worst = max(worst, EXIT_INVALID) if worst != EXIT_INFRA else worst
    print(
        f"{sum(1 for _, r in results if r.get('gold') == 1.0 and r.get('empty') == 0.0)}/{len(results)} "
        "tasks valid"
    )
    if reasons:
        print(
            "dropped by reason: "
            + ", ".join(f"{reason} {n / len(results):.0%}" for reason, n in sorted(reasons.items()))
        )
    return worst


if __name__ == "__main__":
    sys.exit(main())
