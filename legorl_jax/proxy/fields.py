"""Body-field readers the three request surfaces share (chat completions, Anthropic messages, Responses).

Each returns the field's value, or None (False for a boolean) when it is missing or null, and raises the
proxy's 400 naming the field and the received value when it has the wrong type or is out of range.
"""

from __future__ import annotations

import json
from typing import Any

from legorl_jax.proxy.chat import bad_request, preview


def number(body: dict[str, Any], key: str, lo: float, hi: float) -> float | None:
    """`body[key]` as a float in [lo, hi]; a bool, a non-number or one out of range is a 400."""
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise bad_request(f"{key} must be a number in [{lo}, {hi}], got {preview(value)}", key)
    return float(value)


def integer(body: dict[str, Any], key: str, lo: int) -> int | None:
    """`body[key]` as an int >= lo; a bool, a non-int or one below lo is a 400."""
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise bad_request(f"{key} must be an int >= {lo}, got {preview(value)}", key)
    return value


def boolean(body: dict[str, Any], key: str) -> bool:
    """`body[key]` as a bool (missing or null is False); anything else is a 400."""
    value = body.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad_request(f"{key} must be a boolean, got {preview(value)}", key)
    return value


def arguments_object(arguments: str | dict[str, Any]) -> str | dict[str, Any]:
    """Tool-call arguments as an object when they are a JSON object (templates such as Qwen3-Coder's
    iterate over them), else unchanged."""
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
        return value if isinstance(value, dict) else arguments
    return arguments
