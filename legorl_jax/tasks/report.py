"""What grading one diff produced: `VerifierReport`, and the two ways grading can end without one.

A `VerifierReport` is the verdict on a diff the policy produced: `reward` (1.0 exactly when every
FAIL_TO_PASS and PASS_TO_PASS test passed and nothing was tampered with; for Harbor tasks the number its
verifier wrote), per-test statuses, how the diff applied, which of its file changes were dropped as
protected, any evidence of tampering, the exit code and the (capped) raw test output, and how long each
phase took. `to_dict()` is plain JSON data: it is stored with the trajectory and printed by the CLI.

A diff that does not apply, breaks the tests or tampers with the results is a policy failure: a report with
reward 0. `VerifierError` is the other ending: the infrastructure failed (the image is missing, the
container did not start, the test run timed out, the hidden tests did not apply, the run left no result at
all), so the trial says nothing about the policy and is dropped, never scored 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from legorl_jax.tasks.protection import RemovedChange

APPLY_STATUSES = ("applied", "empty", "failed", "malformed")


DROP_REASONS = ("sandbox", "task", "hidden_tests", "timeout", "memory", "no_result", "internal")


class VerifierError(RuntimeError):
    """Grading could not produce a verdict because the infrastructure failed (not the policy).

    `reason` is one of `DROP_REASONS`: the sandbox failed to start or run a command, the task cannot be graded
    (its workdir holds no git repository), the hidden tests did not
    apply, the tests ran past the timeout or the memory limit, they left no result, or the verifier itself
    broke (`internal`). The last four are raised only when the empty diff fails the same way; otherwise the
    diff caused them and the grade is a reward of 0.
    """

    def __init__(self, message: str, reason: str = "sandbox") -> None:
        if reason not in DROP_REASONS:
            raise ValueError(f"reason must be one of {DROP_REASONS}, got {reason!r}")
        super().__init__(message)
        self.reason = reason


def drop_rates(results: list[VerifierReport | VerifierError]) -> dict[str, float]:
    """The fraction of `results` dropped for each reason (`VerifierError.reason`), every reason listed."""
    if not results:
        return dict.fromkeys(DROP_REASONS, 0.0)
    counts = dict.fromkeys(DROP_REASONS, 0)
    for result in results:
        if isinstance(result, VerifierError):
            counts[result.reason] += 1
    return {reason: count / len(results) for reason, count in counts.items()}


@dataclasses.dataclass(frozen=True)
class ApplyResult:
    """How the filtered diff reached the grading checkout."""

    status: str
    """applied | empty (nothing left to apply) | failed (no method applied it) | malformed (unreadable diff).
    """
    method: str | None = None
    """The command that applied it: 'git apply', 'git apply --3way' or 'patch --fuzz=5'."""
    log: str = ""
    """What the apply attempts printed (capped)."""

    def __post_init__(self) -> None:
        if self.status not in APPLY_STATUSES:
            raise ValueError(f"apply status must be one of {APPLY_STATUSES}, got {self.status!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class VerifierReport:
    """The verdict on one diff for one task."""

    task_id: str
    kind: str
    reward: float
    resolved: bool
    apply: ApplyResult
    tests: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Status of every FAIL_TO_PASS and PASS_TO_PASS test (passed, failed, error, skipped, xfailed, xpassed,
    missing)."""
    failed_tests: tuple[str, ...] = ()
    """Listed tests that did not meet their requirement."""
    removed_changes: tuple[RemovedChange, ...] = ()
    tampering: tuple[str, ...] = ()
    """Every inconsistency between the result sources; non-empty means reward 0."""
    leftover_processes: tuple[str, ...] = ()
    """Processes still alive after the test command ended (killed before the results were read)."""
    exit_code: int | None = None
    output: str = ""
    output_truncated: bool = False
    durations: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """Seconds per phase: start, apply, hidden_tests, tests, total."""
    canary_survival: float | None = None
    """For built-in tasks: the probability that a forger who reads the planted file and guesses which test
    of each FAIL_TO_PASS group is the original survives this grade (`canary.CanaryPlan.survival`)."""
    canary_shortfall: str | None = None
    """Why `canary_survival` is above the 1e-3 target, when it is (`canary.CanaryPlan.shortfall`)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "kind": self.kind,
            "reward": self.reward,
            "resolved": self.resolved,
            "apply": self.apply.to_dict(),
            "tests": dict(self.tests),
            "failed_tests": list(self.failed_tests),
            "removed_changes": [c.to_dict() for c in self.removed_changes],
            "tampering": list(self.tampering),
            "leftover_processes": list(self.leftover_processes),
            "exit_code": self.exit_code,
            "output": self.output,
            "output_truncated": self.output_truncated,
            "durations": {k: round(v, 3) for k, v in self.durations.items()},
            "canary_survival": self.canary_survival,
            "canary_shortfall": self.canary_shortfall,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VerifierReport:
        """The report `to_dict` wrote (the durations as rounded there); a missing field is a ValueError."""
        try:
            return cls(
                task_id=str(data["task_id"]),
                kind=str(data["kind"]),
                reward=float(data["reward"]),
                resolved=bool(data["resolved"]),
                apply=ApplyResult(**data["apply"]),
                tests=dict(data.get("tests", {})),
                failed_tests=tuple(data.get("failed_tests", ())),
                removed_changes=tuple(RemovedChange(**c) for c in data.get("removed_changes", ())),
                tampering=tuple(data.get("tampering", ())),
                leftover_processes=tuple(data.get("leftover_processes", ())),
                exit_code=data.get("exit_code"),
                output=str(data.get("output", "")),
                output_truncated=bool(data.get("output_truncated", False)),
                durations=dict(data.get("durations", {})),
                canary_survival=data.get("canary_survival"),
                canary_shortfall=data.get("canary_shortfall"),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a verifier report ({exc!r}): {dict(data)!r:.300}") from None


def cap_text(text: str, limit: int) -> tuple[str, bool]:
    """`text` cut to about `limit` characters, keeping its head and (mostly) its tail, where pytest's
    summary is; and whether anything was cut."""
    if len(text) <= limit:
        return text, False
    head = limit // 4
    tail = limit - head
    return f"{text[:head]}\n... [{len(text) - limit} characters cut] ...\n{text[-tail:]}", True
