"""What the commands of the ``ctfile`` tool share: the ``URI``, ``--json`` and
``--storage-option`` parameters, storage-option parsing, opening a table and
turning errors into one line on stderr with an exit code."""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Annotated, Any, Iterator, Optional

import typer

import ctfile
from ctfile.tools import _output as out


UriArg = Annotated[
    str, typer.Argument(metavar="URI", help="The table: a local path or a URL such as s3://bucket/prefix.", show_default=False)
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")]
StorageOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--storage-option",
        metavar="KEY=VALUE",
        help=(
            "A filesystem option for object-store URIs (repeatable), e.g. endpoint_url=http://localhost:9000. "
            "A VALUE that is a JSON object, array, number, true/false or null is passed parsed "
            "(client_kwargs='{\"region_name\": \"us-east-1\"}', max_concurrency=4); anything else, "
            "or a JSON string in quotes (secret='\"123\"'), is passed as a string. "
            "A dotted KEY sets a nested option: client_kwargs.region_name=us-east-1."
        ),
        show_default=False,
    ),
]


def _reject_constant(name: str) -> Any:
    raise ValueError(name)  # NaN, Infinity: not JSON numbers; keep the text


def parse_option_value(text: str) -> Any:
    """A ``--storage-option`` value: parsed JSON if the text is a JSON object,
    array, number, ``true``/``false`` (any case) or ``null``; the string
    itself otherwise. A JSON string (in double quotes) gives the string
    inside, so a value that looks like a number can still be passed as text.

    >>> parse_option_value('{"region_name": "us-east-1"}'), parse_option_value("4"), parse_option_value("True")
    ({'region_name': 'us-east-1'}, 4, True)
    >>> parse_option_value("http://localhost:9000"), parse_option_value('"123"'), parse_option_value("NaN")
    ('http://localhost:9000', '123', 'NaN')
    >>> parse_option_value("[" * 100000) == "[" * 100000  # too deep for the parser: the text itself
    True
    """
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return text


def _merge(target: dict[str, Any], key: str, value: Any) -> None:
    """``target[key] = value``, merging into an existing nested option."""
    old = target.get(key)
    if isinstance(old, dict) and isinstance(value, dict):
        for k, v in value.items():
            _merge(old, k, v)
    else:
        target[key] = value


def parse_storage_options(items: list[str] | None) -> dict[str, Any] | None:
    """``--storage-option`` items as fsspec storage options (values as
    :func:`parse_option_value` reads them; a dotted key sets a nested option).

    >>> parse_storage_options(["key=value", "client_kwargs.region_name=x", "anon=true"])
    {'key': 'value', 'client_kwargs': {'region_name': 'x'}, 'anon': True}
    >>> parse_storage_options(['client_kwargs={"region_name": "us-east-1"}', "config_kwargs.retries={}"])
    {'client_kwargs': {'region_name': 'us-east-1'}, 'config_kwargs': {'retries': {}}}
    """
    if not items:
        return None
    opts: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise typer.BadParameter(f"expected KEY=VALUE, found {item!r}", param_hint="'--storage-option'")
        parts = key.split(".")
        if any(not p for p in parts):
            raise typer.BadParameter(f"bad key {key!r}", param_hint="'--storage-option'")
        target = opts
        for p in parts[:-1]:
            nxt = target.setdefault(p, {})
            if not isinstance(nxt, dict):
                raise typer.BadParameter(f"{key!r} conflicts with an earlier option", param_hint="'--storage-option'")
            target = nxt
        _merge(target, parts[-1], parse_option_value(value))
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
