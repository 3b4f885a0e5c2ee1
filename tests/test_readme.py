"""Every ```python block of the README runs (with its /tmp table paths redirected)."""

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_blocks_run(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python example"
    for code in blocks:
        code = re.sub(r'"/tmp/([A-Za-z0-9_]+)"', lambda m: repr(str(tmp_path / m.group(1))), code)
        exec(compile(code, "README.md", "exec"), {})
