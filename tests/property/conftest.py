"""The property tests import their shared checks (``change_checks.py``) as a
plain module: pytest runs with --import-mode=importlib, which does not put
test directories on sys.path."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
