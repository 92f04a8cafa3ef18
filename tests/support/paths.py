"""Where things are for the tests: the checkout, its fixtures, and the licensed data beside it."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
LOCOMO = REPO.parent / "shared" / "data" / "locomo" / "locomo2.json"  # CC BY-NC: read, never copied
