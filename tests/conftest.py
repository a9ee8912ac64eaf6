"""Shared fixtures: paths to the repository and the real datasets beside it, and a check that a
figure is a reproducible PNG."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real datasets not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def reproducible_png(tmp_path) -> Callable[[Callable[[Path], None]], bytes]:
    """Draw a figure twice (`draw(path)`): a real PNG, and the same bytes both times."""
    def check(draw: Callable[[Path], None]) -> bytes:
        first, second = tmp_path / "first.png", tmp_path / "second.png"
        draw(first)
        draw(second)
        data = first.read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000
        assert data == second.read_bytes()
        return data
    return check
