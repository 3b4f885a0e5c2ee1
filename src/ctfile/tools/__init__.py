"""The ``ctfile`` command-line tool (:mod:`ctfile.tools.cli`): history, show,
diff, changes, verify, vacuum, compact and checkpoint on local or
object-store tables."""
