"""Every command of the ``ctfile`` tool, fuzzed (issue 26).

Hypothesis builds command lines: the table (a fresh copy of a small table
with some history, or a path that holds none), the command's positional
arguments and any of its options, with values drawn from extremes
(numbers at and beyond the long range, durations too long for a
timedelta, dates out of range, empty, huge, non-ASCII and dotted strings,
JSON nested deeper than any parser goes). The property: the command exits
0, 1 or 2 without a traceback, an error is one line on stderr whose type
(``--json``) is a ``CtfileError``, a usage error or an operating-system
error the tool reports as such -- never a raw ``TypeError``,
``OverflowError`` ... -- and a command that fails leaves the table
directory byte-identical.

The commands and their options are read from the typer app, so a new
command or option is fuzzed without a change here.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
import typer.main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import ctfile
from ctfile.tools.cli import app

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "table"))
from fuzz_support import Copies, changed_files, fingerprint, long_run, make_template  # noqa: E402

runner = CliRunner()


def _commands(group, prefix: str = "") -> dict:
    """Every command of the app by its command line (``derived show`` for a
    command of a group), so that a group's commands are fuzzed too."""
    out = {}
    for name, cmd in group.commands.items():
        sub = getattr(cmd, "commands", None)
        out.update(_commands(cmd, f"{prefix}{name} ") if sub is not None else {f"{prefix}{name}": cmd})
    return out


COMMANDS = _commands(typer.main.get_command(app))

#: Option values: strings a shell passes.
TEXT = st.one_of(
    st.sampled_from([
        "", "-1", "0", "1", "2", "3", "9" * 25, "-" + "9" * 25, "1e300", "inf", "nan", "1.5", "abc", "é✓𝄞", "a.b",
        "`s.a`", "st.a", "99999999999999d", "1e300d", "0s", "1w2d", "7d", "0.5ms", "2000-01-01", "9999-12-31T23:59:59",
        "0001-01-01", "1970-01-01T00:00:00Z", "+999999-01-01", "id", "s", "default", "audit", "append_only", "csv",
        "json", "parquet", "key=value", "anon=true", "client_kwargs.region_name=x", "=", "a..b=1", "x=" + "[" * 5000,
        "x=" + "[" * 50 + "]" * 50, "x=1e999", "out.svg", "out.csv", "sub/dir/out.parquet", ".", "..",
    ]),
    st.text(max_size=8),
)
#: The names ctfile's own errors have: what ``--json`` may report as the type.
CTFILE_ERRORS = {n for n in ctfile.__all__ if isinstance(getattr(ctfile, n), type)
                 and issubclass(getattr(ctfile, n), ctfile.CtfileError)}
_RAW = re.compile(r"^ctfile: error: (?P<kind>[A-Z]\w*(Error|Exception|Warning)): ")


def _allowed_kind(kind: str) -> bool:
    """``--json``'s error type: ctfile's, or an operating-system error the
    tool reports as such (a path that is a directory, say)."""
    builtin = getattr(__builtins__, kind, None) if not isinstance(__builtins__, dict) else __builtins__.get(kind)
    return kind in CTFILE_ERRORS or kind in ("error", "ImportError") or (
        isinstance(builtin, type) and issubclass(builtin, OSError)
    )


def _option_args(param, draw) -> list[str]:
    if param.is_flag:
        return [param.opts[0]]
    values = draw(st.lists(TEXT, min_size=1, max_size=2 if param.multiple else 1))
    return [a for v in values for a in (param.opts[0], v)]


@st.composite
def command_lines(draw, name: str) -> list[str]:
    """``name``, the table (a placeholder: mostly the copy, see
    :func:`check_command_line`), the positional arguments, and some options."""
    cmd = COMMANDS[name]
    args = [*name.split(), draw(st.sampled_from(["table"] * 4 + ["missing", "file", "empty"]))]
    for param in cmd.params:  # typer's click parameters (typer vendors click): told apart by their kind
        if param.param_type_name == "argument" and param.name != "uri":
            args.append(draw(TEXT))
    for param in cmd.params:
        if param.param_type_name == "option" and draw(st.booleans()):
            args += _option_args(param, draw)
    return args


@pytest.fixture(scope="module")
def copies(tmp_path_factory) -> Copies:
    base = tmp_path_factory.mktemp("fuzz_cli")
    return Copies(make_template(base / "template"), base)


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    """Relative paths an option names (``--output x``) land in a scratch directory."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def check_command_line(copies: Copies, args: list[str]) -> None:
    root = copies.fresh()
    a_file = copies.base / "a-file"
    a_file.write_text("not a table")
    uris = {"table": str(root), "missing": str(copies.base / "missing"), "file": str(a_file), "empty": ""}
    at = args.index(next(a for a in args if a in uris))  # the table follows the command's words
    argv = [uris.get(a, a) if i == at else a for i, a in enumerate(args)]
    before = fingerprint(root)
    r = runner.invoke(app, argv)
    where = f"ctfile {' '.join(argv)!r:.300}"
    assert r.exception is None or isinstance(r.exception, SystemExit), f"{where}: raised {r.exception!r}"
    assert r.exit_code in (0, 1, 2), f"{where}: exit {r.exit_code}"
    assert "Traceback" not in r.stdout + r.stderr, f"{where}: {r.stderr[-2000:]}"
    err = r.stderr.strip()
    if r.exit_code == 0 or not err:
        return
    lines = err.splitlines()
    assert len(lines) == 1, f"{where}: the error is more than one line: {err[:2000]}"
    if err.startswith("{"):
        kind = json.loads(err)["type"]
        assert _allowed_kind(kind), f"{where}: a raw {kind}: {err[:500]}"
    else:
        raw = _RAW.match(err)
        assert raw is None or _allowed_kind(raw["kind"]), f"{where}: a raw error: {err[:500]}"
    changed = changed_files(before, fingerprint(root))
    assert not changed, f"{where} failed ({err[:300]}) but changed {changed}"


CASES = sorted(COMMANDS)


@pytest.mark.parametrize("name", CASES)
@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_command_exits_cleanly_and_refuses_without_a_trace(copies, in_tmp, name, data):
    check_command_line(copies, data.draw(command_lines(name), label="argv"))


@pytest.mark.long
@pytest.mark.parametrize("name", CASES)
def test_command_exits_cleanly_and_refuses_without_a_trace_long(copies, in_tmp, name):
    """The long run: ``-m long`` selects it."""
    long_run(lambda data: check_command_line(copies, data.draw(command_lines(name))), max_examples=200)
