"""The ``ctfile`` command-line tool (not yet implemented; see issue 6)."""
