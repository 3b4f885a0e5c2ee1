"""What the commands of the ``ctfile`` tool share: the ``URI``, ``--json`` and
``--storage-option`` parameters, storage-option parsing, opening a table and
turning errors into one line on stderr with an exit code."""

from __future__ import annotations

import enum
from contextlib import contextmanager
from typing import Annotated, Any, Iterator, Optional

import typer

import ctfile
from ctfile.tools import _output as out


class Information(str, enum.Enum):
    default = "default"
    append_only = "append_only"
    audit = "audit"


UriArg = Annotated[
    str, typer.Argument(metavar="URI", help="The table: a local path or a URL such as s3://bucket/prefix.", show_default=False)
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")]
StorageOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--storage-option",
        metavar="KEY=VALUE",
        help="A filesystem option for object-store URIs (repeatable), e.g. endpoint_url=http://localhost:9000.",
        show_default=False,
    ),
]


def parse_storage_options(items: list[str] | None) -> dict[str, Any] | None:
    """``["key=value", "client_kwargs.region_name=x", "anon=true"]`` ->
    ``{"key": "value", "client_kwargs": {"region_name": "x"}, "anon": True}``."""
    if not items:
        return None
    opts: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise typer.BadParameter(f"expected KEY=VALUE, found {item!r}", param_hint="'--storage-option'")
        val: Any = {"true": True, "false": False}.get(value.lower(), value)
        parts = key.split(".")
        if any(not p for p in parts):
            raise typer.BadParameter(f"bad key {key!r}", param_hint="'--storage-option'")
        target = opts
        for p in parts[:-1]:
            nxt = target.setdefault(p, {})
            if not isinstance(nxt, dict):
                raise typer.BadParameter(f"{key!r} conflicts with an earlier option", param_hint="'--storage-option'")
            target = nxt
        target[parts[-1]] = val
    return opts


@contextmanager
def handle_errors(json_mode: bool, *, code: int = 1) -> Iterator[None]:
    """Turn errors into one line on stderr and exit ``code``."""
    try:
        yield
    except (typer.Exit, typer.Abort, typer.TyperException):
        raise
    except ctfile.CtfileError as e:
        raise out.fail(str(e), code=code, json_mode=json_mode, kind=type(e).__name__) from None
    except BrokenPipeError:  # the reader went away (`ctfile changes ... | head`): stop quietly
        out.silence_stdout()
        raise typer.Exit(1) from None
    except FileNotFoundError as e:
        raise out.fail(f"not found: {e}", code=code, json_mode=json_mode, kind="FileNotFoundError") from None
    except PermissionError as e:
        raise out.fail(f"permission denied: {e}", code=code, json_mode=json_mode, kind="PermissionError") from None
    except OSError as e:
        raise out.fail(f"storage error: {e}", code=code, json_mode=json_mode, kind=type(e).__name__) from None
    except ImportError as e:
        raise out.fail(f"{e} (install the filesystem package for this URL scheme)", code=code, json_mode=json_mode, kind="ImportError") from None
    except Exception as e:  # anything else, e.g. a botocore credentials error
        raise out.fail(f"{type(e).__name__}: {e}", code=code, json_mode=json_mode, kind=type(e).__name__) from None


def open_uri(uri: str, storage_option: list[str] | None) -> ctfile.Table:
    return ctfile.open_table(uri, storage_options=parse_storage_options(storage_option))
