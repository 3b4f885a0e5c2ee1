"""Local tables are confined to their real root (SPEC §Table layout, confinement).

Real symbolic links on local disk: a link under the table directory that
leads out of it (``data/``, ``_ct_log/`` or one data file) makes every read,
write, list and delete through it fail with ``StorageError`` naming the
table, the file and the link's target, and nothing outside the root is read,
written or deleted (a sentinel ``.parquet`` outside the root survives
vacuum). ``verify`` reports such a link without following it. Links that stay
inside the root, and a root that is itself a link, work as plain directories.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from typer.testing import CliRunner

import ctfile
from ctfile.log.storage import LocalStorage
from ctfile.tools.cli import app

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])


def _rows(ids) -> pa.Table:
    return pa.table({"id": list(ids), "v": [f"v{i}" for i in ids]}, schema=SCHEMA)


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (links not followed) -> its bytes, or the link's target."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if p.is_symlink():
                out[str(p.relative_to(root))] = f"-> {os.readlink(p)}".encode()
            elif p.is_file():
                out[str(p.relative_to(root))] = p.read_bytes()
    return out


@pytest.fixture
def outside(tmp_path) -> Path:
    """A directory outside every table root, holding a sentinel data file
    that is old enough for any vacuum to want it."""
    d = tmp_path / "outside"
    d.mkdir()
    sentinel = d / "sentinel.parquet"
    sentinel.write_bytes(b"not yours")
    os.utime(sentinel, (0, 0))
    return d


@pytest.fixture
def table(tmp_path) -> ctfile.Table:
    """Versions: 1 insert ids 1..3, 2 update id 1 (removes version 1's file)."""
    t = ctfile.create_table(tmp_path / "t", SCHEMA)
    t.insert(_rows([1, 2, 3]))
    t.update(pc.field("id") == 1, {"v": "one"})
    return t


def _move_out(table: ctfile.Table, name: str, outside: Path) -> Path:
    """Move ``name`` (``data`` or ``_ct_log``) of the table outside its root
    and leave a symbolic link to it in its place."""
    root = Path(table.uri)
    target = outside / name
    shutil.move(str(root / name), str(target))
    os.symlink(target, root / name)
    return target


def _link_live_file_out(table: ctfile.Table, outside: Path) -> tuple[str, Path]:
    """Replace the live data file by a link to a copy outside the root:
    (its path, the copy)."""
    root = Path(table.uri)
    (live,) = table.snapshot().partitions
    copy = outside / "copy.parquet"
    shutil.copy(root / live.path, copy)
    os.remove(root / live.path)
    os.symlink(copy, root / live.path)
    return live.path, copy


def _assert_refused(exc: ctfile.StorageError, table: ctfile.Table, link: str, target: Path) -> None:
    msg = str(exc)
    assert exc.uri == table.uri and exc.path is not None
    assert exc.path in msg and table.uri in msg, msg
    assert f"{link} is a symbolic link to {target}" in msg and "leaves the table root" in msg, msg


# ---------------------------------------------------------------- links that leave the root


def test_reads_through_a_data_link_out_of_the_root_are_refused(table, outside):
    target = _move_out(table, "data", outside)
    for read in (lambda t: t.to_arrow(), lambda t: t.changes(start_version=1).to_arrow()):
        for t in (table, ctfile.open_table(table.uri)):
            with pytest.raises(ctfile.StorageError) as e:
                read(t)
            _assert_refused(e.value, table, "data", target)


def test_a_data_file_linked_out_of_the_root_is_not_read(table, outside):
    live, copy = _link_live_file_out(table, outside)
    with pytest.raises(ctfile.StorageError) as e:
        ctfile.open_table(table.uri).to_arrow()
    _assert_refused(e.value, table, live, copy)


def test_a_log_linked_out_of_the_root_is_not_read(table, outside):
    target = _move_out(table, "_ct_log", outside)
    with pytest.raises(ctfile.StorageError) as e:
        ctfile.open_table(table.uri)
    _assert_refused(e.value, table, "_ct_log", target)


def test_insert_and_update_write_nothing_through_the_link(table, outside):
    target = _move_out(table, "data", outside)
    before = _tree(outside)
    with pytest.raises(ctfile.StorageError) as e:
        table.insert(_rows([4]))
    _assert_refused(e.value, table, "data", target)
    with pytest.raises(ctfile.StorageError):
        table.update(pc.field("id") == 2, {"v": "two"})
    with pytest.raises(ctfile.StorageError):
        table.delete(pc.field("id") == 3)
    assert _tree(outside) == before  # no file written, none deleted
    assert ctfile.open_table(table.uri).version == 2  # nothing committed


def test_vacuum_deletes_nothing_through_a_data_link(table, outside, settle_clock):
    target = _move_out(table, "data", outside)
    root = Path(table.uri)
    for f in list(target.iterdir()):
        os.utime(f, (0, 0))  # every file old enough to go
    before_out, before_in = _tree(outside), _tree(root)
    settle_clock(table)
    with pytest.raises(ctfile.StorageError) as e:
        table.vacuum(retain=0, grace_period=0)
    _assert_refused(e.value, table, "data", target)
    assert (outside / "sentinel.parquet").read_bytes() == b"not yours"
    # The table is untouched too: data/ is listed before anything is deleted.
    assert _tree(outside) == before_out and _tree(root) == before_in


def test_vacuum_does_not_delete_a_file_link_out_of_the_root(table, outside, settle_clock):
    root = Path(table.uri)
    link = root / "data" / "part-stray-00001.parquet"
    os.symlink(outside / "sentinel.parquet", link)
    os.utime(link, (0, 0), follow_symlinks=False)
    settle_clock(table)
    r = table.vacuum(retain=0, grace_period=0)  # the listing leaves the link out
    assert "data/part-stray-00001.parquet" not in r.deleted_data_files
    assert (outside / "sentinel.parquet").read_bytes() == b"not yours"
    assert link.is_symlink()
    assert ctfile.open_table(table.uri).to_arrow().num_rows == 3


def test_a_stray_link_out_of_the_log_does_not_make_the_table_unreadable(table, outside):
    """SPEC §Table layout: readers ignore names in _ct_log/ they do not know;
    listing the log (no hint) must not fail because of a stray link in it."""
    root = Path(table.uri)
    os.symlink(outside / "sentinel.parquet", root / "_ct_log" / "notes")
    (root / "_ct_log" / "_last_checkpoint").unlink(missing_ok=True)
    assert ctfile.open_table(table.uri).to_arrow().num_rows == 3
    problems = ctfile.verify_table(table.uri).problems
    assert [p.check for p in problems] == ["symlink"]


def test_delete_checks_every_path_before_deleting_any(table, outside):
    root = Path(table.uri)
    storage = LocalStorage(table.uri)
    (root / "data" / "a.parquet").write_bytes(b"a")
    os.symlink(outside / "sentinel.parquet", root / "data" / "b.parquet")
    with pytest.raises(ctfile.StorageError):
        storage.delete(["data/a.parquet", "data/b.parquet"])
    assert (root / "data" / "a.parquet").exists() and (root / "data" / "b.parquet").is_symlink()
    assert (outside / "sentinel.parquet").exists()


def test_verify_reports_a_link_out_of_the_root_without_following_it(table, outside):
    target = _move_out(table, "data", outside)
    r = ctfile.verify_table(table.uri)
    assert not r.healthy
    assert [(p.check, p.path) for p in r.problems] == [("symlink", "data")]
    assert str(target) in r.problems[0].message
    assert r.files_checked == 0 and r.unreferenced_files == []  # nothing behind the link was opened
    res = CliRunner().invoke(app, ["verify", table.uri])
    assert res.exit_code == 1, (res.stdout, res.stderr)
    assert "symlink" in res.stdout and str(target) in res.stdout


def test_verify_reports_a_log_link_and_a_file_link(table, outside):
    live, _copy = _link_live_file_out(table, outside)
    r = ctfile.verify_table(table.uri, all_versions=True)
    assert [(p.check, p.path) for p in r.problems] == [("symlink", live)]
    assert r.files_checked == 1  # version 1's file, inside the root; the linked one is not opened

    log_target = _move_out(table, "_ct_log", outside)
    r = ctfile.verify_table(table.uri)
    assert {(p.check, p.path) for p in r.problems} == {("symlink", "_ct_log"), ("symlink", live)}
    assert r.entries_checked == 0 and str(log_target) in next(p.message for p in r.problems if p.path == "_ct_log")
    res = CliRunner().invoke(app, ["verify", table.uri])
    assert res.exit_code == 1 and "the log could not be read" in res.stdout, (res.stdout, res.stderr)


# ---------------------------------------------------------------- links that stay inside


def test_links_inside_the_root_are_followed(table, outside, settle_clock):
    root = Path(table.uri)
    os.rename(root / "data", root / "data-real")
    os.symlink("data-real", root / "data")  # relative, inside the root
    t = ctfile.open_table(table.uri)
    assert sorted(t.to_arrow().column("id").to_pylist()) == [1, 2, 3]
    t.insert(_rows([4]))
    t.update(pc.field("id") == 2, {"v": "two"})
    assert ctfile.verify_table(t.uri).healthy
    # The file version 2 removed goes (the one version 4, the oldest kept,
    # removes stays), deleted inside the root.
    removed_at_2 = next(p for p in table.snapshot(1).partitions if p.path not in table.snapshot(2).partitions)
    for f in (root / "data-real").iterdir():
        os.utime(f, (0, 0))
    settle_clock(t)
    r = t.vacuum(retain=0, grace_period=0)
    assert r.deleted_data_files == (removed_at_2.path,)
    assert not (root / "data-real" / removed_at_2.path.split("/")[1]).exists()
    assert (outside / "sentinel.parquet").exists()
    assert sorted(t.to_arrow().column("v").to_pylist()) == ["one", "two", "v3", "v4"]
    assert ctfile.verify_table(t.uri, all_versions=True).healthy


def test_deleting_a_file_link_inside_the_root_removes_the_link_only(tmp_path):
    root = tmp_path / "t"
    (root / "data").mkdir(parents=True)
    (root / "data" / "real.parquet").write_bytes(b"x")
    os.symlink("real.parquet", root / "data" / "alias.parquet")
    storage = LocalStorage(str(root))
    assert storage.read_bytes("data/alias.parquet") == b"x"
    storage.delete(["data/alias.parquet"])
    assert not (root / "data" / "alias.parquet").exists() and (root / "data" / "real.parquet").exists()


def test_a_root_that_is_a_link_is_fine(table, tmp_path):
    alias = tmp_path / "alias"
    os.symlink(table.uri, alias)
    t = ctfile.open_table(alias)
    t.insert(_rows([4]))
    assert sorted(t.to_arrow().column("id").to_pylist()) == [1, 2, 3, 4]
    assert ctfile.verify_table(alias).healthy


# ---------------------------------------------------------------- a regular file where the table should be


def test_a_regular_file_is_not_a_table(tmp_path):
    f = tmp_path / "table.txt"
    f.write_text("not a table")
    for uri in (f, f / "sub"):
        with pytest.raises(ctfile.TableNotFoundError) as e:
            ctfile.open_table(uri)
        assert f"{f} is a file, not a table directory" in str(e.value) and str(uri) in str(e.value)
    with pytest.raises(ctfile.TableNotFoundError, match="is a file, not a table directory"):
        ctfile.verify_table(f)
    with pytest.raises(ctfile.StorageError, match=f"{f} is a file, not a directory"):
        ctfile.create_table(f, SCHEMA)  # not "a table already exists"
    assert f.read_text() == "not a table"
    # A directory without _ct_log/ still says so.
    with pytest.raises(ctfile.TableNotFoundError, match="_ct_log/ holds no version file"):
        ctfile.open_table(tmp_path)
