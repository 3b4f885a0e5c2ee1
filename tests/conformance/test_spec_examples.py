"""Keep ``format_spec/SPEC.md`` in sync with the code.

* Every ```json block of SPEC.md is a complete JSON document of a known kind
  (an action, a stats object, a schema, the checkpoint hint) and decodes with
  the reference codec, re-encoding to the same object.
* The field tables of SPEC.md list exactly the fields the codec writes, and
  their "required" column matches what the codec rejects when missing; the
  checkpoint column table lists exactly the columns ctfile writes, with their
  types and nullability.
* Every action example except ``txn`` is copied from the golden table
  (tests/conformance/golden/people, and people-capture for what only a table
  with change capture has), and the raw entries and the directory
  listing shown as ```text blocks match it byte for byte; so do the
  checkpoint rows shown.
* Every ``SPEC §Name`` cited in src/ctfile names a heading of SPEC.md.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctfile.format import actions as A
from ctfile.format import checkpoint as CP
from ctfile.format import codec, paths, schema as S, stats as ST
from ctfile.format import derived as DV
from ctfile.format.errors import CorruptLogError
from ctfile.format import properties as P
from ctfile.format import streams as STR
from ctfile.log.manifest import ManifestLog
from ctfile.log.storage import LocalStorage

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SPEC = REPO / "format_spec" / "SPEC.md"
SRC = REPO / "src" / "ctfile"
GOLDEN = HERE / "golden" / "people"
# Examples of what only a table with change capture has (SPEC §Change capture).
GOLDEN_CAPTURE = HERE / "golden" / "people-capture"
GOLDEN_EVOLVED = HERE / "golden" / "people-evolved"
# Stream states (SPEC §Streams) and the target their consumptions committed to.
GOLDEN_STREAMS = HERE / "golden" / "people-streams"
GOLDEN_CHANGES = HERE / "golden" / "people-changes"
# The re-add of SPEC §Restore.
GOLDEN_RESTORED = HERE / "golden" / "people-restored"
GOLDEN_DERIVED = HERE / "golden" / "people-derived"

ACTION_KEYS = {"commitInfo", "protocol", "metadata", "add", "remove", "change", "txn", "checkpoint"}
STATS_KEYS = {"numRecords", "minValues", "maxValues", "nullCount", "nanCount"}
HINT_KEYS = {"version", "numPartitions"}
FIELD_TABLE_HEADER = "| field | JSON type | required | description |"

REQUIRED_HEADINGS = [
    "Conventions",
    "Overview",
    "Terms",
    "Table layout",
    "Micro-partition files",
    "Hidden columns",
    "Row lineage",
    "Schema",
    "Statistics",
    "Table properties",
    "Log entries",
    "commitInfo",
    "protocol",
    "metadata",
    "add",
    "remove",
    "change",
    "txn",
    "Log replay",
    "Checkpoints",
    "Protocol",
    "Commit protocol",
    "Conflict detection",
    "Commit timestamps",
    "Creating a table",
    "Copy-on-write",
    "Restore",
    "Change capture",
    "Change scans",
    "Streams",
    "Vacuum",
    "Appendix A: Implementation notes",
    "Appendix B: Conformance tables",
]
# Sections that define a feature or a file and so state both kinds of requirement.
SECTIONS_WITH_REQUIREMENTS = [
    "Table layout",
    "Micro-partition files",
    "Hidden columns",
    "Row lineage",
    "Schema",
    "Statistics",
    "Table properties",
    "Log entries",
    "Checkpoints",
    "Protocol",
    "Commit protocol",
    "Commit timestamps",
    "Copy-on-write",
    "Restore",
    "Change capture",
    "Streams",
    "Vacuum",
]
GLOSSARY_TERMS = [
    "Table", "Version", "Micro-partition", "Manifest log", "Log entry", "Action", "Checkpoint",
    "Live partition", "Row id", "Row version", "Fresh row", "Copy-on-write", "Data change",
    "Snapshot", "Change interval", "Re-add",
]


# ---------------------------------------------------------------- parsing SPEC.md


@dataclass
class Block:
    lang: str
    text: str
    line: int  # 1-based line of the opening fence
    section: str  # the nearest heading above


@dataclass
class Section:
    title: str
    level: int
    line: int
    lines: list[str] = field(default_factory=list)  # text outside code blocks
    blocks: list[Block] = field(default_factory=list)


def _strip_heading(text: str) -> str:
    return text.strip().strip("#").strip().replace("`", "")


def parse_spec(text: str) -> tuple[list[Section], list[Block]]:
    sections = [Section("(preamble)", 0, 1)]
    blocks: list[Block] = []
    fence: tuple[str, int, list[str]] | None = None
    for lineno, line in enumerate(text.split("\n"), start=1):
        if fence is not None:
            if line.strip() == "```":
                lang, start, body = fence
                b = Block(lang, "\n".join(body), start, sections[-1].title)
                blocks.append(b)
                sections[-1].blocks.append(b)
                fence = None
            else:
                fence[2].append(line)
            continue
        if line.startswith("```"):
            fence = (line[3:].strip(), lineno, [])
            continue
        m = re.match(r"^(#{1,6})\s+(.*)$", line)
        if m:
            sections.append(Section(_strip_heading(m.group(2)), len(m.group(1)), lineno))
            continue
        sections[-1].lines.append(line)
    assert fence is None, f"SPEC.md: code block opened at line {fence[1]} is never closed"
    return sections, blocks


@pytest.fixture(scope="module")
def spec() -> tuple[list[Section], list[Block]]:
    return parse_spec(SPEC.read_text(encoding="utf-8"))


def section(spec, title: str) -> Section:
    found = [s for s in spec[0] if s.title == title]
    assert len(found) == 1, f"SPEC.md has {len(found)} headings {title!r}"
    return found[0]


def subtree(spec, title: str) -> list[Section]:
    """A section and its subsections (deeper headings up to the next sibling)."""
    secs = spec[0]
    i = secs.index(section(spec, title))
    out = [secs[i]]
    for s in secs[i + 1:]:
        if s.level <= secs[i].level:
            break
        out.append(s)
    return out


def json_blocks(spec) -> list[tuple[Block, object]]:
    out = []
    for b in spec[1]:
        if b.lang == "json":
            try:
                out.append((b, json.loads(b.text)))
            except json.JSONDecodeError as e:
                pytest.fail(f"SPEC.md line {b.line}: ```json block is not one complete JSON document: {e}")
    return out


def kind_of(obj: object) -> str | None:
    if isinstance(obj, dict):
        if len(obj) == 1 and next(iter(obj)) in ACTION_KEYS:
            return next(iter(obj))
        if len(obj) == 1 and "stream" in obj:
            return "stream"
        if obj.get("type") == "struct" and "fields" in obj:
            return "schema"
        if "numRecords" in obj and set(obj) <= STATS_KEYS:
            return "stats"
        if "version" in obj and set(obj) <= HINT_KEYS:
            return "hint"
    return None


# ---------------------------------------------------------------- the golden table


def _golden_lines(name: str, golden: Path = GOLDEN) -> list[dict]:
    """The action lines of a golden log entry, or of a checkpoint's key-value metadata."""
    path = golden / "_ct_log" / name
    if paths.parse_checkpoint_name(name) is not None:
        data = pq.ParquetFile(path).metadata.metadata[CP.METADATA_KEY.encode()]
    else:
        data = path.read_bytes()
    return [json.loads(line) for line in data.decode("utf-8").split("\n") if line.strip()]


def _golden_checkpoint_rows() -> list[dict]:
    (cp,) = [p for p in (GOLDEN / "_ct_log").iterdir() if paths.parse_checkpoint_name(p.name) is not None]
    return pq.read_table(cp).to_pylist()


@pytest.fixture(scope="module")
def golden_objects() -> list[dict]:
    out = []
    for golden in (GOLDEN, GOLDEN_CAPTURE, GOLDEN_EVOLVED, GOLDEN_STREAMS, GOLDEN_CHANGES, GOLDEN_RESTORED,
                   GOLDEN_DERIVED):
        for p in sorted((golden / "_ct_log").iterdir()):
            if paths.parse_commit_name(p.name) is not None or paths.parse_checkpoint_name(p.name) is not None:
                out.extend(_golden_lines(p.name, golden))
    return out


# ---------------------------------------------------------------- code blocks


def test_every_code_block_is_labelled_json_or_text(spec):
    bad = [(b.line, b.lang) for b in spec[1] if b.lang not in ("json", "text")]
    assert not bad, f"SPEC.md code blocks must be ```json or ```text; found (line, label) {bad}"


def test_every_json_block_is_a_known_kind(spec):
    unknown = [(b.line, str(obj)[:80]) for b, obj in json_blocks(spec) if kind_of(obj) is None]
    assert not unknown, (
        "SPEC.md ```json blocks must be an action object, a stats object, a schema or the "
        f"_last_checkpoint hint; use ```text for anything else. Offending (line, start): {unknown}"
    )


def test_action_examples_decode_and_round_trip(spec):
    n = 0
    for b, obj in json_blocks(spec):
        if kind_of(obj) not in ACTION_KEYS:
            continue
        n += 1
        action = codec.action_from_json(obj, f"SPEC.md line {b.line}")
        assert action is not None, f"SPEC.md line {b.line}: codec ignored the action {list(obj)}"
        assert codec.action_to_json(action) == obj, f"SPEC.md line {b.line}: does not round-trip"
        # And as a log line: compact NDJSON through the entry decoder.
        line = json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n"
        assert codec.decode_actions(line.encode(), where=f"SPEC.md line {b.line}") == [action]
    assert n > 0


def test_stream_state_examples_decode_and_round_trip(spec):
    found = [(b, obj) for b, obj in json_blocks(spec) if kind_of(obj) == "stream"]
    assert found, "SPEC.md shows no stream state"
    for b, obj in found:
        state = STR.state_from_json(obj, f"SPEC.md line {b.line}")
        assert STR.state_to_json(state) == obj, f"SPEC.md line {b.line}: does not round-trip"


def test_stream_state_examples_are_golden_states(spec):
    states = [json.loads(p.read_text()) for p in sorted((GOLDEN_STREAMS / STR.STREAMS_DIR).rglob("*.json"))]
    for b, obj in json_blocks(spec):
        if kind_of(obj) == "stream":
            assert obj in states, f"SPEC.md line {b.line}: not a state file of {GOLDEN_STREAMS.relative_to(REPO)}"


def test_schema_examples_decode_and_round_trip(spec):
    found = [(b, obj) for b, obj in json_blocks(spec) if kind_of(obj) == "schema"]
    assert found, "SPEC.md shows no schema example"
    for b, obj in found:
        schema = S.schema_from_json(obj, f"SPEC.md line {b.line}")
        assert S.schema_to_json(schema) == obj
        schema.to_arrow(include_hidden=True)  # every type maps to Arrow


def test_stats_examples_decode_and_round_trip(spec):
    found = [(b, obj) for b, obj in json_blocks(spec) if kind_of(obj) == "stats"]
    assert found, "SPEC.md shows no stats example"
    for b, obj in found:
        stats = codec.stats_from_json(obj, f"SPEC.md line {b.line}")
        assert codec.stats_to_json(stats) == obj


def test_stats_example_bounds_decode_with_the_schema_example(spec):
    """The stats example belongs to the schema example: every bound decodes for its column type."""
    (schema_obj,) = [obj for _, obj in json_blocks(spec) if kind_of(obj) == "schema"]
    (stats_obj,) = [obj for _, obj in json_blocks(spec) if kind_of(obj) == "stats"]
    schema = S.schema_from_json(schema_obj)
    stats = codec.stats_from_json(stats_obj, "SPEC.md stats")
    for bounds in (stats.min_values, stats.max_values):
        for fid, value in bounds.items():
            f = schema.field_by_id(fid)
            assert f is not None and ST.has_bounds(f.type), f"bound for field {fid} that carries none"
            ST.decode_bound(f.type, value)
    for fid, value in stats.max_values.items():
        if schema.field_by_id(fid).type == "string":
            assert len(value) <= ST.STRING_PREFIX_LENGTH
    for fid in stats.nan_count:
        assert schema.field_by_id(fid).type in ("float", "double")
    assert S.ROW_ID_FIELD_ID in stats.null_count and S.ROW_VERSION_FIELD_ID in stats.null_count


def test_hint_examples_are_read_by_the_manifest_log(spec, tmp_path):
    found = [(b, obj) for b, obj in json_blocks(spec) if kind_of(obj) == "hint"]
    assert found, "SPEC.md shows no _last_checkpoint example"
    for b, obj in found:
        (tmp_path / "_ct_log").mkdir(exist_ok=True)
        (tmp_path / paths.LAST_CHECKPOINT).write_text(json.dumps(obj) + "\n")
        assert ManifestLog(LocalStorage(str(tmp_path))).read_hint() == obj["version"]


def test_every_kind_has_an_example(spec):
    kinds = {kind_of(obj) for _, obj in json_blocks(spec)}
    missing = (ACTION_KEYS | {"schema", "stats", "hint", "stream"}) - kinds
    assert not missing, f"SPEC.md has no JSON example of {sorted(missing)}"


def test_each_action_subsection_has_one_example_of_its_kind(spec):
    for kind in ("commitInfo", "protocol", "metadata", "add", "remove", "change", "txn"):
        sec = section(spec, kind)
        assert sec.level == 3 and _parent(spec, sec).title == "Log entries"
        objs = [json.loads(b.text) for b in sec.blocks if b.lang == "json"]
        assert [kind_of(o) for o in objs] == [kind], f"§{kind} should hold exactly one {kind} example"


def _parent(spec, sec: Section) -> Section:
    secs = spec[0]
    for s in reversed(secs[: secs.index(sec)]):
        if s.level < sec.level:
            return s
    raise AssertionError(f"no parent of {sec.title}")


# ---------------------------------------------------------------- field tables


def _field_table(sec: Section, index: int = 0) -> list[tuple[str, str, str]]:
    """(name, JSON type, required) rows of the index-th field table of a section."""
    tables: list[list[tuple[str, str, str]]] = []
    rows: list[tuple[str, str, str]] | None = None
    for line in sec.lines:
        if line.strip() == FIELD_TABLE_HEADER:
            rows = []
            tables.append(rows)
            continue
        if rows is None:
            continue
        if not line.startswith("|"):
            rows = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if set(cells[0]) <= {"-", " "}:
            continue
        m = re.fullmatch(r"`([A-Za-z]+)`", cells[0])
        assert m, f"§{sec.title}: field table row {line!r} should name one field in backticks"
        assert cells[2] in ("required", "optional"), f"§{sec.title}: {line!r}"
        rows.append((m.group(1), cells[1], cells[2]))
    assert len(tables) > index, f"§{sec.title} has no field table #{index + 1}"
    return tables[index]


_STATS = A.PartitionStats(3, {1: 1}, {1: 2}, {1: 0}, {2: 0})
_PART = A.Partition("data/p.parquet", 10, 3, 0, 1, 5, "ab" * 16, _STATS, restored_row_version=0)
_SCHEMA = S.Schema((S.Field(1, "x", "double", True, {"comment": "c"}),))
# SPEC §Derived tables: the optional objects of commitInfo and metadata.
_FRONTIER = (DV.SourceVersion("src", "t", 1, 2),)
_REFRESH = DV.RefreshInfo("FULL", "r", _FRONTIER, 3, 4, 5, 6)
_DERIVED = DV.DerivedDefinition("SELECT 1 FROM src", (DV.SourceBinding("src", "t", "/src"),), "auto", "1 minute", 1,
                                ("_ct_dt_key",), _FRONTIER, 3)
_DERIVED_SCHEMA = S.Schema((*_SCHEMA.fields, S.Field(_SCHEMA.max_field_id() + 1, "_ct_dt_key", "string", False)))
FULL_ACTIONS = {
    "commitInfo": A.CommitInfo(
        1, "INSERT", {"a": 1}, 0, True, {"numInsertedRows": 1}, "e", "t",
        is_blind_append=True, num_actions=2, actions_checksum="0123456789abcdef" * 2, refresh=_REFRESH,
    ),
    "protocol": A.Protocol(),
    "metadata": A.Metadata("id", _DERIVED_SCHEMA, 1, {"k": "v"}, "n", "d", last_field_id=99, derived=_DERIVED),
    "add": A.AddPartition(_PART, True),
    "remove": A.RemovePartition(_PART, 2, True, deletes_all_rows=True),
    "change": A.ChangeFile("_ct_changes/c.parquet", 10, 3, 5, "ab" * 16, _STATS),
    "txn": A.SetTransaction("app", 1, 2),
    "checkpoint": A.CheckpointHeader(1, 2, 3, 0),
}
TABLE_OF = {  # section title -> (kind, index of the field table in the section)
    "commitInfo": ("commitInfo", 0),
    "protocol": ("protocol", 0),
    "metadata": ("metadata", 0),
    "add": ("add", 0),
    "remove": ("remove", 0),
    "change": ("change", 0),
    "txn": ("txn", 0),
    "Checkpoints": ("checkpoint", 0),
    "Statistics": ("stats", 0),
    "Schema": ("field", 1),
    "Streams": ("stream", 0),
}
# SPEC §Streams: the claim's field table (the second of the section).
CLAIM_TABLE = ("Streams", "claim", 1)
_FULL_STREAM = STR.StreamState.created(
    "s", stream_id="ab" * 16, table_id="t", information="default", initial_rows=True, offset=1, now_ms=5,
).claimed(end=3, target_uri="/t", target_table_id="u", now_ms=6)
_FULL_STREAM = dataclasses.replace(_FULL_STREAM, stale_since=7, oldest_version=1, dropped=True)
JSON_TYPES = {
    "long": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array of string": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    "string or object": lambda v: isinstance(v, (str, dict)),
    "array": lambda v: isinstance(v, list),
}


def _encoded_keys(kind: str) -> set[str]:
    if kind in ("stream", "claim"):
        body = STR.state_to_json(_FULL_STREAM)["stream"]
        return set(body["claim"] if kind == "claim" else body)
    if kind == "stats":
        return set(codec.stats_to_json(_STATS))
    if kind == "field":
        return set(S.field_to_json(_SCHEMA.fields[0]))
    return set(codec.action_to_json(FULL_ACTIONS[kind])[kind])


def _example_body(spec, title: str, kind: str) -> dict:
    """The example a field table describes, from the section (or its subsections)."""
    for sec in subtree(spec, title):
        for b in sec.blocks:
            if b.lang != "json":
                continue
            obj = json.loads(b.text)
            k = kind_of(obj)
            if kind == "field" and k == "schema":
                return obj["fields"][0]
            if kind in ("stream", "claim") and k == "stream" and (kind == "stream" or "claim" in obj["stream"]):
                return obj["stream"] if kind == "stream" else obj["stream"]["claim"]
            if k == kind:
                return obj if kind == "stats" else obj[kind]
    raise AssertionError(f"§{title} has no {kind} example")


def _decode(kind: str, body: dict) -> None:
    if kind == "stream":
        STR.state_from_json({"stream": body}, "test")
    elif kind == "claim":
        state = STR.state_to_json(_FULL_STREAM)["stream"]
        STR.state_from_json({"stream": {**state, "claim": body}}, "test")
    elif kind == "stats":
        codec.stats_from_json(body, "test")
    elif kind == "field":
        S.field_from_json(body, "test")
    else:
        codec.action_from_json({kind: body}, "test")


@pytest.mark.parametrize("title, kind, index", sorted((t, k, i) for t, (k, i) in TABLE_OF.items()) + [CLAIM_TABLE])
def test_field_table_matches_codec(spec, title, kind, index):
    rows = _field_table(section(spec, title), index)
    names = [r[0] for r in rows]
    assert len(names) == len(set(names)), f"§{title}: duplicate fields {names}"
    assert set(names) == _encoded_keys(kind), (
        f"§{title}: the field table lists {sorted(names)}, the codec writes {sorted(_encoded_keys(kind))}"
    )
    example = _example_body(spec, title, kind)
    for name, json_type, required in rows:
        assert json_type in JSON_TYPES, f"§{title}: unknown JSON type {json_type!r} for {name}"
        if name not in example:
            assert required == "optional", f"§{title}: required field {name} is missing from the example"
            continue
        assert JSON_TYPES[json_type](example[name]), f"§{title}: {name} = {example[name]!r} is not a {json_type}"
        without = {k: v for k, v in example.items() if k != name}
        if required == "required":
            with pytest.raises(CorruptLogError):
                _decode(kind, copy.deepcopy(without))
        else:
            _decode(kind, copy.deepcopy(without))


CHECKPOINT_COLUMNS_HEADER = "| column | Parquet type | nullable | description |"
PARQUET_TYPES = {"INT64": pa.int64(), "BYTE_ARRAY (STRING)": pa.string()}


def _checkpoint_column_table(sec: Section) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] | None = None
    for line in sec.lines:
        if line.strip() == CHECKPOINT_COLUMNS_HEADER:
            assert rows is None, f"§{sec.title} has two checkpoint column tables"
            rows = []
            continue
        if rows is None:
            continue
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if set(cells[0]) <= {"-", " "}:
            continue
        m = re.fullmatch(r"`([A-Za-z]+)`", cells[0])
        assert m, f"§{sec.title}: column table row {line!r} should name one column in backticks"
        rows.append((m.group(1), cells[1], cells[2]))
    assert rows, f"§{sec.title} has no checkpoint column table"
    return rows


def test_checkpoint_column_table_matches_the_writer(spec, tmp_path):
    """§Checkpoints lists exactly the columns ctfile writes, with their Parquet
    types and nullability, in the order ctfile writes them."""
    rows = _checkpoint_column_table(section(spec, "Checkpoints"))
    assert [(r[0], PARQUET_TYPES.get(r[1]), r[2] == "yes") for r in rows] == list(CP.COLUMNS)
    assert {r[2] for r in rows} <= {"yes", "no"}
    # And the file ctfile writes has those Parquet types: a full partition and a bare one.
    from ctfile.log.manifest import ManifestLog
    from ctfile.log.replay import TableState
    from ctfile.log.storage import LocalStorage

    bare = A.Partition("data/q.parquet", 1, 0, 3, 1, 5)
    state = TableState(1, 9, A.Protocol(), FULL_ACTIONS["metadata"], {_PART.path: _PART, bare.path: bare}, 3)
    info = ManifestLog(LocalStorage(str(tmp_path))).write_checkpoint(state)
    pf = pq.ParquetFile(tmp_path / info.path)
    physical = {"INT64": "INT64", "BYTE_ARRAY (STRING)": "BYTE_ARRAY"}
    for i, (name, ptype, nullable) in enumerate(rows):
        col = pf.schema.column(i)
        assert col.name == name and col.physical_type == physical[ptype]
        assert (str(col.logical_type) == "String") == (ptype == "BYTE_ARRAY (STRING)")
        assert col.max_definition_level == (1 if nullable == "yes" else 0)
    assert CP.METADATA_KEY.encode() in pf.metadata.metadata
    assert pq.read_table(tmp_path / info.path).column("stats").to_pylist() == [codec.stats_to_text(_STATS), None]


def test_checkpoint_rows_shown_are_the_golden_checkpoint(spec):
    """The ```text block of checkpoint rows is the golden checkpoint, row for row."""
    (block,) = [b for b in spec[1] if b.lang == "text" and b.text.startswith('{"path"')]
    assert block.section == "Checkpoints"
    shown = [json.loads(line) for line in block.text.split("\n")]
    assert shown == _golden_checkpoint_rows()
    for row in shown:  # each stats text is a stats object
        codec.stats_from_text(row["stats"], "SPEC.md", num_records=row["numRecords"], path=row["path"])


def test_schema_struct_table_lists_the_schema_keys(spec):
    rows = _field_table(section(spec, "Schema"), 0)
    assert {r[0] for r in rows} == set(S.schema_to_json(_SCHEMA))


# ---------------------------------------------------------------- examples come from the golden table


def test_action_examples_are_copied_from_the_golden_table(spec, golden_objects):
    """Regenerating the golden table without updating SPEC.md fails here:
    run ``make_golden.py --examples`` and paste the new lines."""
    for b, obj in json_blocks(spec):
        kind = kind_of(obj)
        if kind in ACTION_KEYS and kind != "txn":
            assert obj in golden_objects, (
                f"SPEC.md line {b.line}: this {kind} example is not a line of the golden tables "
                f"{GOLDEN.relative_to(REPO)}, {GOLDEN_CAPTURE.relative_to(REPO)} or {GOLDEN_EVOLVED.relative_to(REPO)}"
            )
        if kind == "hint":
            assert obj == json.loads((GOLDEN / paths.LAST_CHECKPOINT).read_text())


def test_raw_entries_shown_are_the_golden_files(spec):
    """A ```text block made of action lines is a log entry of the golden table, byte for byte."""
    entries = {p.read_text(encoding="utf-8") for g in (GOLDEN, GOLDEN_CAPTURE) for p in (g / "_ct_log").glob("*.json")}
    shown = 0
    for b in spec[1]:
        lines = b.text.split("\n")
        if b.lang != "text" or not lines[0].startswith('{"commitInfo"'):
            continue
        shown += 1
        assert b.text + "\n" in entries, f"SPEC.md line {b.line}: not a golden log entry, byte for byte"
    assert shown >= 2


def test_directory_listing_is_the_golden_table(spec):
    (listing,) = [b for b in spec[1] if b.lang == "text" and b.text.startswith("people/")]
    listed = {line.split()[0] for line in listing.text.split("\n")}
    actual = {
        "people/" + p.relative_to(GOLDEN).as_posix() for p in GOLDEN.rglob("*") if p.is_file()
    }
    assert listed == actual


# ---------------------------------------------------------------- headings and citations


def _headings(spec) -> set[str]:
    names = {s.title for s in spec[0]}
    # "(Code comments also cite this section as §Partition lineage.)"
    text = SPEC.read_text(encoding="utf-8")
    names |= set(re.findall(r"cite this section as §([^.)\n]+)", text))
    return names


def test_required_headings_exist(spec):
    titles = [s.title for s in spec[0]]
    missing = [h for h in REQUIRED_HEADINGS if titles.count(h) != 1]
    assert not missing, f"SPEC.md lacks (or repeats) the headings {missing}"
    order = [titles.index(h) for h in REQUIRED_HEADINGS]
    assert order == sorted(order), "SPEC.md headings are out of the documented order"


def test_sections_state_writer_and_reader_requirements(spec):
    for title in SECTIONS_WITH_REQUIREMENTS:
        subs = [s.title for s in subtree(spec, title)[1:]]
        assert "Writer requirements" in subs and "Reader requirements" in subs, (
            f"§{title} should have 'Writer requirements' and 'Reader requirements' subsections"
        )


def test_rfc2119_and_glossary(spec):
    text = SPEC.read_text(encoding="utf-8")
    assert "RFC 2119" in text
    terms = "\n".join(section(spec, "Terms").lines)
    missing = [t for t in GLOSSARY_TERMS if not re.search(r"^- \*\*" + re.escape(t), terms, re.M)]
    assert not missing, f"the glossary lacks {missing}"


def _citations() -> list[tuple[str, int, str]]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for m in re.finditer("§", text):
            snippet = text[m.end(): m.end() + 120]
            snippet = re.sub(r"\s*\n\s*(#\s*)?", " ", snippet)  # join wrapped comment lines
            out.append((str(path.relative_to(REPO)), text.count("\n", 0, m.start()) + 1, snippet))
    return out


def test_code_citations_name_spec_headings(spec):
    cites = _citations()
    assert len(cites) > 20, "found suspiciously few SPEC citations in src/ctfile"
    names = sorted(_headings(spec), key=len, reverse=True)
    unresolved = []
    for where, line, snippet in cites:
        ok = any(
            snippet.startswith(h) and (len(snippet) == len(h) or not snippet[len(h)].isalnum())
            for h in names
        )
        if not ok:
            unresolved.append(f"{where}:{line}: §{snippet[:40]}")
    assert not unresolved, "code cites SPEC sections that SPEC.md lacks:\n" + "\n".join(unresolved)


# ---------------------------------------------------------------- constants the text quotes


def test_constants_quoted_in_spec_match_the_code(spec):
    text = " ".join(SPEC.read_text(encoding="utf-8").split())  # undo line wrapping
    assert f"`{S.ROW_ID_COLUMN}` | {S.ROW_ID_FIELD_ID} |" in text
    assert f"`{S.ROW_VERSION_COLUMN}` | {S.ROW_VERSION_FIELD_ID} |" in text
    for prefix in S.RESERVED_PREFIXES:
        assert f"`{prefix}`" in text
    assert f"at most {ST.STRING_PREFIX_LENGTH} code points" in text
    assert f"zero-padded to exactly {paths.VERSION_DIGITS} digits" in text
    assert paths.commit_path(0) in text and paths.checkpoint_path(5) in text
    assert f"`{CP.METADATA_KEY}`" in text
    for key, default in (
        (P.PARTITION_ROWS, P.DEFAULT_PARTITION_ROWS),
        (P.ROW_GROUP_ROWS, P.DEFAULT_ROW_GROUP_ROWS),
        (P.COMPRESSION, f"`{P.DEFAULT_COMPRESSION}`"),
        (P.CHECKPOINT_INTERVAL, P.DEFAULT_CHECKPOINT_INTERVAL),
        (P.CHANGE_CAPTURE, f"`{P.DEFAULT_CHANGE_CAPTURE.value}`"),
    ):
        assert f"| `{key}` | {default} |" in text, f"§Table properties should list {key} (default {default})"
    assert f"reader version {A.READER_VERSION} and writer version {A.WRITER_VERSION}" in text
    for feature in sorted(A.SUPPORTED_WRITER_FEATURES):
        assert f"| `{feature}` |" in text, f"feature {feature} is not in the §Protocol table"
    # The protocol example of §protocol is what a new table gets.
    protos = [obj for b, obj in json_blocks(spec) if kind_of(obj) == "protocol" and b.section == "protocol"]
    assert protos == [codec.action_to_json(A.Protocol())]
    for t in S.PRIMITIVE_TYPES:
        assert f"`{t}`" in "\n".join(section(spec, "Schema").lines)
