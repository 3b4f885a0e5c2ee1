"""Property test: vacuum keeps what live streams need, and a stale stream
never returns partial changes (SPEC §Streams, retention; SPEC §Vacuum).

Hypothesis draws a random history on a real source table with two streams
(``default`` with initial rows, ``append_only``): DML statements,
consumptions of a stream into its own target table (a log of the consumed
change rows, ``stream_log.consume``), and vacuums. A vacuum runs with a
retention window and grace period of zero and its clock placed just after a
drawn version's commit, so that the vacuum's own base is that version; the
table's ``ctfile.maxRetentionExtension`` is drawn too: ``1d`` (every stream
holds its history), or ``0s`` (a stream holds only history it needs from
after the cutoff, and one that needs older history goes stale).

After every vacuum, for every stream that was live before it:

* if the vacuum did not mark it stale, its pending changes are exactly
  those it had before the vacuum, pinned at the same end (nothing lost);
* if it marked it stale, the stream was not entitled to hold (its first
  pending commit is older than the cutoff minus the extension), and
  ``pending()`` and a consumption raise :class:`~ctfile.StaleStreamError`
  naming when it went stale and the oldest version left, writing nothing to
  the target; it stays stale.

And after every consumption, a live stream's consumed changes, applied to
the model's snapshot by row id (``default``) or collected (``append_only``),
give the source's latest snapshot (every row inserted, once): the changes
are complete across vacuums, which the model, unlike a change scan of old
intervals, can still check after the history is gone.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import ctfile
from ctfile.log.vacuum import vacuum

from stream_log import SOURCE_SCHEMA, TARGET_SCHEMA, apply_changes, as_tuples, change_rows, consume, snapshot_by_rid

ACTION_INDEX, RID_INDEX = 2, 4


@dataclass
class Model:
    name: str
    information: str
    target_uri: str
    rows: dict = field(default_factory=dict)  # default: the snapshot the consumed changes give, by row id
    inserted: set = field(default_factory=set)  # append_only: the row ids consumed
    stale: bool = False


class World:
    def __init__(self):
        self.uri = tempfile.mkdtemp(prefix="vsrc-")
        self.source = ctfile.create_table(self.uri, SOURCE_SCHEMA, partition_rows=2)
        self.source.insert(pa.table({"uid": [0, 1, 2], "v": ["a", "b", "c"]}, schema=SOURCE_SCHEMA))
        self.next_uid = 3
        self.models = {}
        for name, information in (("all", "default"), ("new", "append_only")):
            self.source.create_stream(name, information=information, initial_rows=information == "default")
            target = tempfile.mkdtemp(prefix=f"vtgt-{name}-")
            ctfile.create_table(target, TARGET_SCHEMA)
            self.models[name] = Model(name, information, target)
        # append_only: the rows inserted before the stream started are not its to hand out
        self.models["new"].inserted = set(snapshot_by_rid(self.source, self.source.version))
        self.appended_before = set(self.models["new"].inserted)

    def dml(self, kind: str, uids: list[int]) -> None:
        if kind == "insert":
            n = len(uids)
            self.source.insert(pa.table({"uid": range(self.next_uid, self.next_uid + n), "v": ["i"] * n},
                                        schema=SOURCE_SCHEMA))
            self.next_uid += n
        elif kind == "update":
            self.source.update(pc.field("uid").isin(uids), {"v": pc.binary_join_element_wise(pc.field("v"), "u", "")})
        else:
            self.source.delete(pc.field("uid").isin(uids))

    def consume(self, name: str) -> None:
        m = self.models[name]
        stream = ctfile.open_table(self.uri).stream(name)
        target = ctfile.open_table(m.target_uri)
        if m.stale:
            with pytest.raises(ctfile.StaleStreamError):
                consume(stream, target)
            assert target.refresh().version == ctfile.open_table(m.target_uri).version
            return
        before = target.version
        consume(stream, target)
        target = ctfile.open_table(m.target_uri)
        rows = [r for v in range(before + 1, target.version + 1)
                for r in as_tuples(target.changes(start_version=v, end_version=v, information="append_only")
                                   .to_arrow().select(TARGET_SCHEMA.names))]
        latest = snapshot_by_rid(self.source, self.source.refresh().version)
        if m.information == "default":
            m.rows = apply_changes(m.rows, rows)
            assert m.rows == latest
        else:
            new = [r[RID_INDEX] for r in rows]
            assert len(set(new)) == len(new) and not set(new) & m.inserted, "a row handed out twice"
            m.inserted |= set(new)
            assert set(latest) <= m.inserted  # every live row was handed out, once

    def vacuum(self, at: int, extension: str) -> None:
        src = ctfile.open_table(self.uri)
        if src.properties.get("ctfile.maxRetentionExtension") != extension:
            src.set_properties({"ctfile.maxRetentionExtension": extension})
        src = ctfile.open_table(self.uri)
        oldest = src.log.oldest_version()
        at = min(max(at, oldest), src.version)
        now = src.log.commit_info(at).timestamp
        before = {}
        for name, m in self.models.items():
            if not m.stale:
                state, p = src.stream(name).state(), src.stream(name).pending()
                first_ms = src.log.commit_info(state.offset + 1).timestamp if state.offset < src.version else None
                before[name] = (state, p.end_version, sorted(as_tuples(change_rows(p)), key=str), first_ms)
        result = vacuum(src.log, retain=0, grace_period=0, now_ms=now)
        made_stale = {h.name for h in result.stale_streams}
        ext_ms = 0 if extension == "0s" else 86_400_000
        reopened = ctfile.open_table(self.uri)
        for name, (state, end, rows, first_ms) in before.items():
            stream = reopened.stream(name)
            event(f"vacuum, extension {extension}: stream {'made stale' if name in made_stale else 'kept'}")
            if name in made_stale:
                assert first_ms is not None and first_ms < now - ext_ms, "a holding stream went stale"
                with pytest.raises(ctfile.StaleStreamError) as e:
                    stream.pending()
                assert e.value.stale_since is not None and e.value.oldest_available == result.oldest_version
                self.models[name].stale = True
            else:
                p = stream.pending(pin=stream.pin_from_token(f"{state.stream_id}:{stream.state().sequence}:{end}"))
                assert sorted(as_tuples(change_rows(p)), key=str) == rows, "a live stream lost changes"
        assert snapshot_by_rid(reopened, reopened.version) == snapshot_by_rid(src, src.version)


UIDS = st.lists(st.integers(0, 10), min_size=1, max_size=3)
OPS = st.one_of(
    st.tuples(st.sampled_from(["insert", "update", "delete"]), UIDS),
    st.tuples(st.just("consume"), st.sampled_from(["all", "new"])),
    st.tuples(st.just("vacuum"), st.tuples(st.integers(0, 30), st.sampled_from(["0s", "1d"]))),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ops=st.lists(OPS, min_size=3, max_size=14))
def test_vacuum_keeps_what_streams_need_and_stale_means_nothing_partial(ops):
    w = World()
    for kind, arg in ops:
        if kind == "vacuum":
            w.vacuum(*arg)
        elif kind == "consume":
            w.consume(arg)
        else:
            w.dml(kind, arg)
    for name in w.models:  # a last consumption of every stream: complete, or refused as stale
        w.consume(name)
