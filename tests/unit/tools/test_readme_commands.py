"""The ``ctfile`` commands the README's tour and docs/cli.md show run on the demo's table."""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path

from typer.testing import CliRunner

from ctfile.tools.cli import app

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from doc_pages import ROOT, code_blocks, pages  # noqa: E402


def _readme_commands() -> list[list[str]]:
    """The ``.venv/bin/ctfile`` lines of the README, then of the pages of docs/."""
    cmds = []
    for block in (b for p in pages() for b in code_blocks(p.read_text(), "sh")):
        for line in block.splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith(".venv/bin/ctfile "):
                cmds.append(shlex.split(line)[1:])
    return cmds


def test_readme_ctfile_commands_run_on_the_demo_table(tmp_path, monkeypatch, capsys):
    cmds = _readme_commands()
    assert cmds[:2] == [["history", "demo-table"], ["changes", "demo-table", "--start", "2", "--end", "5"]]
    spec = importlib.util.spec_from_file_location("ctfile_demo", ROOT / "examples" / "demo.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    demo.main(tmp_path / "demo-table")
    capsys.readouterr()
    monkeypatch.chdir(tmp_path)  # the README runs from the repository root, where the demo leaves demo-table/
    runner = CliRunner()
    ran = 0
    for args in cmds:
        if any(a.startswith("s3://") for a in args):
            continue  # needs a server; tests/unit/tools/test_cli_process.py covers s3://
        r = runner.invoke(app, args)
        assert r.exit_code == 0, (args, r.stdout, r.stderr)
        ran += 1
    assert ran >= 7
    out = runner.invoke(app, ["changes", "demo-table", "--start", "2", "--end", "5"]).stdout
    assert "MINIMIZE" in out and "Jeffrey" in out
