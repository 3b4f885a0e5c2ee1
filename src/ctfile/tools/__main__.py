"""``python -m ctfile.tools``: the ``ctfile`` command."""

from ctfile.tools.cli import app

if __name__ == "__main__":  # pragma: no cover
    app(prog_name="ctfile")
