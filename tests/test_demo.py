"""The README's demo command runs and shows the worked example's results."""

import subprocess
import sys
from pathlib import Path

import ctfile

ROOT = Path(__file__).resolve().parent.parent


def test_demo_runs_and_leaves_the_worked_example(tmp_path):
    target = tmp_path / "people"
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py"), str(target)],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    assert "Jeffrey" in out and "plan shape MINIMIZE" in out
    t = ctfile.open_table(target)
    assert t.version == 5
    assert sorted(t.snapshot().to_arrow().column("name").to_pylist()) == ["Jeffrey", "Maude", "Walter"]
