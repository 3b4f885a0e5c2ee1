"""``ctfile``: offline inspection, verification and maintenance of ctfile tables.

No Spark or JVM: every command reads the manifest log (and, where it must,
data files) through ctfile's public Python API; the one exception,
``derived run`` (:mod:`~ctfile.tools.cmd_derived_run`), refreshes derived
tables on a SparkSession and imports PySpark only when it runs. URIs are local paths or
object-store URLs (``s3://bucket/prefix``) with ``--storage-option key=value``
for the filesystem (``endpoint_url``, ``key``, ``secret``, ``anon=true``;
``client_kwargs.region_name=...`` sets a nested option).

Exit codes: 0 success; 1 an error (missing table, bad version ...) or, for
``verify``, problems found; 2 a usage error (bad option) or, for ``verify``,
a check that could not run.

This module holds the typer app and its root options; the commands live in
:mod:`~ctfile.tools.cmd_inspect` (history, show, diff),
:mod:`~ctfile.tools.cmd_schema` (schema),
:mod:`~ctfile.tools.cmd_changes` (changes), :mod:`~ctfile.tools.cmd_streams`
(streams), :mod:`~ctfile.tools.cmd_derived` (derived show), :mod:`~ctfile.tools.cmd_derived_run`
(derived run) and :mod:`~ctfile.tools.cmd_maintain`
(verify, vacuum, compact, checkpoint, restore), the parameters and helpers they
share in :mod:`~ctfile.tools._common`.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from typer.core import TyperGroup

import ctfile
from ctfile.tools import _output as out
from ctfile.tools import (  # noqa: F401 - cmd_derived_run adds its command to cmd_derived's group
    cmd_changes,
    cmd_derived,
    cmd_derived_run,
    cmd_inspect,
    cmd_maintain,
    cmd_schema,
    cmd_streams,
)
from ctfile.tools._common import parse_storage_options

__all__ = ["app", "parse_storage_options"]


class _Group(TyperGroup):
    """Click errors (unknown option, bad value ...) as one line on stderr
    instead of click's usage block; exit code 2 as click's."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            rv = super().main(args, prog_name or "ctfile", complete_var, standalone_mode=False, **extra)
        except typer.TyperException as e:
            if type(e).__name__ != "NoArgsIsHelpError":  # else help was printed
                sys.stderr.write(f"ctfile: error: {out.one_line(_error_line(e))}\n")
            _exit_if(standalone_mode, getattr(e, "exit_code", 2))
            raise
        except typer.Abort:
            sys.stderr.write("ctfile: aborted\n")
            _exit_if(standalone_mode, 1)
            raise
        _exit_if(standalone_mode, rv if isinstance(rv, int) else 0)
        return rv


def _error_line(e: Exception) -> str:
    """Click's message of ``e``, pointing to the command's help where click knows the command."""
    format_message = getattr(e, "format_message", None)
    msg = format_message() if format_message else str(e)
    ctx = getattr(e, "ctx", None)
    return msg if ctx is None else f"{msg} (see '{ctx.command_path} --help')"


def _exit_if(standalone_mode: bool, code: int) -> None:
    """Exit with ``code`` when running as the program (standalone mode);
    otherwise return, for the caller to raise or return."""
    if standalone_mode:
        sys.exit(code)


app = typer.Typer(
    cls=_Group,
    name="ctfile",
    help=__doc__.split("\n\n")[0].replace("``", "") + "\n\nRun 'ctfile COMMAND --help' for a command's options.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"ctfile {ctfile.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the ctfile version and exit.")
    ] = False,
) -> None:
    """Offline inspection, verification and maintenance of ctfile tables."""


for _command in (
    *cmd_inspect.COMMANDS, *cmd_schema.COMMANDS, *cmd_changes.COMMANDS, *cmd_streams.COMMANDS, *cmd_maintain.COMMANDS,
):
    app.command()(_command)
for _group, _name in cmd_derived.GROUPS:
    app.add_typer(_group, name=_name)
