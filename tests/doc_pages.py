"""Where the documentation's examples are: ``README.md`` (the front door and
its tour) and the pages of ``docs/``. The tests that run the examples look a
page, one section of it and its code blocks up here: tests/test_readme.py,
tests/unit/tools/test_readme_commands.py and the Spark ones (through
tests/spark/readme_examples.py). Test modules import it as a plain module
(pytest runs with --import-mode=importlib, which does not put test
directories on sys.path: each puts ``tests/`` there)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def pages() -> list[Path]:
    """The README, then every page of ``docs/``."""
    return [README, *sorted(DOCS.glob("*.md"))]


def page(name: str) -> Path:
    """``"README.md"`` or a page of ``docs/`` by file name (``"merge.md"``)."""
    path = README if name == README.name else DOCS / name
    if not path.is_file():
        raise FileNotFoundError(f"no documentation page {name!r} (looked for {path})")
    return path


def section(name: str, heading: str | None = None, stop_at: str | None = None) -> str:
    """The text of page ``name`` from ``heading`` (exact text, e.g.
    ``"\\n## MERGE\\n"``) to the next ``## `` heading or the page's end, cut
    before ``stop_at`` when that occurs in it after the heading's start; the
    whole page without a heading."""
    text = page(name).read_text()
    if heading is None:
        return text
    start = text.index(heading)
    end = text.find("\n## ", start + 1)
    end = len(text) if end < 0 else end
    if stop_at is not None:
        cut = text.find(stop_at, start + 1, end)
        end = end if cut < 0 else cut
    return text[start:end]


def code_blocks(text: str, lang: str) -> list[str]:
    """The fenced code blocks of ``text`` in language ``lang`` (``python``,
    ``py``: the Spark examples, ``sh``)."""
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)
