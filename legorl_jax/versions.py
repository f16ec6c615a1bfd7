"""Weights version names and their numbers, a leaf module (of the package it imports only validate.py).

    version_of(42)                      # "step-000042": what the loop publishes after 42 optimiser steps
    version_number("step-000042")       # 42; the engine's initial version ("default") is 0
    version_numbers(["step-000003", None])  # int32[T] per token, -1 where nothing was sampled

The number is what staleness is counted in (trainer version − the version a token was sampled under); the
trajectory record (types.py), the capture proxy's recorder, the batch packer, the publisher and both loops
read it from here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from legorl_jax.validate import is_int

_VERSION = re.compile(r"step-(\d{6,})")


def version_of(step: int) -> str:
    """The weights version published after `step` optimiser steps."""
    if not is_int(step) or step < 0:
        raise ValueError(f"step must be a non-negative int, got {step!r}")
    return f"step-{step:06d}"


def version_number(version: str, *, initial: str = "default") -> int:
    """The optimiser-step count of a weights version: `version_of(n)` gives n, the engine's `initial`
    version (the weights it started with, `engine.weight_version`) gives 0; anything else is a ValueError
    naming it."""
    if not isinstance(version, str):
        raise ValueError(f"weights version must be a string, got {version!r}")
    found = _VERSION.fullmatch(version)
    if found is not None:
        return int(found.group(1))
    if version == initial:
        return 0
    raise ValueError(
        f"weights version {version!r} is neither a published version (step-NNNNNN, versions.version_of) "
        f"nor the engine's initial version {initial!r}"
    )


def version_numbers(per_token: Sequence[str | None], *, initial: str = "default") -> np.ndarray | None:
    """int32[T]: `version_number` of each token's version, -1 where it is None (a token nobody sampled); None
    when some version is not a number of this run (a server started under another name): the record then
    keeps the version strings only, and staleness cannot be counted for it."""
    table: dict[str | None, int] = {None: -1}
    for version in dict.fromkeys(per_token):
        if version is None or version in table:
            continue
        try:
            table[version] = version_number(version, initial=initial)
        except ValueError:
            return None
    return np.fromiter((table[v] for v in per_token), np.int32, count=len(per_token))
