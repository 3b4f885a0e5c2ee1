"""The ``ctfile`` PySpark Python DataSource (not yet implemented; see issue 4)."""
