"""The ``ctfile`` command-line tool (:mod:`ctfile.tools.cli`): history, show,
diff, changes, verify, vacuum and compact on local or object-store tables."""
