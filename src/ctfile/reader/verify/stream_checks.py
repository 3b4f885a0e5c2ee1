"""``ctfile verify``'s checks of stream states (SPEC §Streams), check kind
**stream**.

Every state file under ``_ct_streams/`` must decode and name the stream and
sequence of its file name and the table's ``tableId``; a table with streams
must list the writer feature ``streams`` (a writer of the previous revision
would otherwise vacuum away what they hold). A live stream whose pending
changes need history the table no longer has, and that no vacuum marked
stale, is reported as a warning: its next read raises ``StaleStreamError``
(the history went by a vacuum that did not know streams, or by hand).
"""

from __future__ import annotations

from ctfile.format.actions import FEATURE_STREAMS
from ctfile.format.errors import CtfileError
from ctfile.format.streams import StreamState, state_path
from ctfile.log.replay import TableState
from ctfile.log.streams import StreamStore
from ctfile.reader.verify.report import Recorder, VerifyReport


class StreamChecker(Recorder):
    """Checks the streams of the table in ``store`` against its latest state."""

    def __init__(self, store: StreamStore, report: VerifyReport):
        super().__init__(report)
        self.store = store

    def check(self, latest: TableState, oldest_version: int) -> None:
        current: list[StreamState] = []
        for name, files in self.store.listing().items():
            states = {seq: self._read(name, seq) for seq in sorted(files.files)}
            state = states[files.current_sequence]
            if state is not None:
                current.append(state)
            for seq, s in states.items():
                if s is not None and s.table_id != latest.metadata.table_id:
                    self.problem("stream", f"stream {name} state {seq} names table {s.table_id}, not this table "
                                 f"({latest.metadata.table_id})", path=state_path(name, seq))
        if current and FEATURE_STREAMS not in latest.protocol.writer_features:
            self.problem("stream", f"the table has streams ({', '.join(s.name for s in current)}) but its protocol "
                         f"does not list the writer feature {FEATURE_STREAMS}", version=latest.version)
        for s in current:
            if s.is_live and s.needs_from() < oldest_version and s.offset < latest.version:
                self.warning("stream", f"stream {s.name} has not consumed the versions after {s.offset}, but the "
                             f"oldest version retained is {oldest_version}: it is stale, and no vacuum marked it",
                             path=state_path(s.name, s.sequence))

    def _read(self, name: str, sequence: int) -> StreamState | None:
        try:
            return self.store.read(name, sequence)
        except (CtfileError, OSError) as e:
            self.problem("stream", f"stream {name} state {sequence} is unreadable: {e}",
                         path=state_path(name, sequence))
            return None
