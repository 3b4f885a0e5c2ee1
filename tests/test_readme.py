"""Every ```python block of the README (its tour) and of the pages of docs/
runs (with its /tmp table paths redirected; one tmp dir per page)."""

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from doc_pages import ROOT, code_blocks, pages  # noqa: E402

PAGES = [p for p in pages() if code_blocks(p.read_text(), "python")]


def test_the_readme_and_the_pages_with_python_examples():
    names = [str(p.relative_to(ROOT)) for p in PAGES]
    assert names[0] == "README.md", "the README's tour has no python example"
    for page in ("python-api", "merge", "concurrency", "change-capture", "streams", "schema-evolution", "clustering"):
        assert f"docs/{page}.md" in names


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_run(path, tmp_path):
    for code in code_blocks(path.read_text(), "python"):
        code = re.sub(r'"/tmp/([A-Za-z0-9_]+)"', lambda m: repr(str(tmp_path / m.group(1))), code)
        exec(compile(code, str(path.relative_to(ROOT)), "exec"), {})
