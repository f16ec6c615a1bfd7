"""Fixtures of the tasks tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from scratch_git import init_repo


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """An empty git repository with one empty commit."""
    return init_repo(tmp_path / "repo")
