"""The figures of ``RESULTS.md``: one row per goal of issues 7, 12, 13, 14, 16
and 17 (and the object-store figures of issue 5), built from the scripts' JSON
results alone.

:func:`figures` lists them in the issues' order, skipping whatever a run did
not measure. Each figure is a dict (:func:`fig`): its id, what is measured,
against what, the goal, the value, the measured times or bytes, the verdict
(``True`` / ``False`` / ``None`` for informational) and the script. A figure
may carry a ``note``: an explanation of a miss composed from the same run's
measurements (the capture figures of issue 13); other misses are explained
by the prose of ``report.text.FINDINGS``.
"""

from __future__ import annotations

from statistics import median

CAPTURE_OPS = ("UPDATE", "DELETE", "MERGE")


def fig(fid, figure, anchor, goal, value, measured, passed, source, note: str | None = None) -> dict:
    return {"id": fid, "figure": figure, "anchor": anchor, "goal": goal, "value": value,
            "measured": measured, "pass": passed, "source": source, "note": note}


# ---------------------------------------------------------------- issue 7 (and 12)


def _insert_figures(core: dict) -> list[dict]:
    out = []
    for codec, r in core["insert"].items():
        out.append(fig(f"insert_time_{codec}", f"bulk insert time, lineitem SF {core['meta']['sf']:g} ({codec})",
                       "pq.write_table, same data and codec", "<= 1.05x", f"{r['time_ratio']:.2f}x",
                       f"{r['ctfile_s']:.2f} s vs {r['pyarrow_s']:.2f} s (CPU ratio {r['cpu_ratio']:.2f})"
                       if "cpu_ratio" in r else f"{r['ctfile_s']:.2f} s vs {r['pyarrow_s']:.2f} s",
                       r["pass_time"], "core"))
        out.append(fig(f"insert_bytes_{codec}", f"bulk insert bytes ({codec})", "pq.write_table", "<= 1.01x",
                       f"{r['bytes_ratio']:.4f}x", f"{r['ctfile_bytes']:,} vs {r['pyarrow_bytes']:,} bytes",
                       r["pass_bytes"], "core"))
    return out


def _hidden_figure(delta: dict) -> list[dict]:
    h = delta["hidden"]["UPDATE"]
    return [fig("hidden_bytes", "hidden-column bytes after the 1% UPDATE", "table bytes", "<= 1%",
                f"{100 * h['fraction']:.3f}%", f"{h['hidden_bytes']:,} of {h['table_bytes']:,} bytes",
                delta["hidden"]["pass"], "delta")]


def _dml_figures(delta: dict) -> list[dict]:
    out = []
    for op in CAPTURE_OPS:
        e = delta["dml"].get(op)
        if e:
            out.append(fig(f"dml_{op.lower()}", f"{op} time ({e['description']})", "delta-rs with CDF on",
                           "<= 1.0x", f"{e['ratio']:.2f}x",
                           f"{e['ctfile_s']:.2f} s vs {e['delta_s']:.2f} s (CPU ratio {e['cpu_ratio']:.2f})",
                           e["pass"], "delta"))
    return out


def _append_rf1_figures(delta: dict) -> list[dict]:
    a = delta["append"]
    return [
        fig("append_rf1_vs_pyarrow", f"append-only change scan after RF1 ({a['rows']:,} rows)",
            "pq.read_table of the added files", "<= 1.3x", f"{a['ratio_vs_pyarrow']:.2f}x",
            f"{a['ctfile_ms']:.1f} ms vs {a['pyarrow_ms']:.1f} ms", a["pass_vs_pyarrow"], "delta"),
        fig("append_rf1_vs_delta", "append-only change scan after RF1", "delta-rs load_cdf of that version",
            "<= 1.0x", f"{a['ratio_vs_delta']:.2f}x", f"{a['ctfile_ms']:.1f} ms vs {a['delta_ms']:.1f} ms",
            a["pass_vs_delta"], "delta"),
    ]


def _append_1000_figure(changes: dict) -> list[dict]:
    a = changes["append"]
    return [fig("append_1000_vs_pyarrow",
                f"append-only change scan of 1 partition ({a['partition_rows']:,} rows) in a "
                f"{a['large_table']['partitions']:,}-partition table", "pq.read_table of the file", "<= 1.3x",
                f"{a['ratio_vs_pyarrow']:.2f}x", f"{a['ctfile_large_ms']:.1f} ms vs {a['pyarrow_ms']:.1f} ms",
                a["pass_vs_pyarrow"], "changes")]


def _mindelta_figure(delta: dict) -> list[dict]:
    m = delta["mindelta"]
    return [fig("mindelta", f"minimum-delta change scan over RF1+RF2+UPDATE+MERGE ({m['ctfile_rows']:,} rows)",
                "delta-rs load_cdf + consolidation to net changes", "<= 1.0x", f"{m['ratio']:.2f}x",
                f"{m['ctfile_ms']:.0f} ms vs {m['delta_ms']:.0f} ms (load_cdf alone {m['delta_load_cdf_only_ms']:.0f} ms"
                + (f"; pyarrow decoding the removed partitions alone {m['removed_decode_ms']:.0f} ms = "
                   f"{m['removed_decode_vs_delta']:.1f}x" if "removed_decode_ms" in m else "") + ")",
                m["pass"], "delta")]


def _e2e_figures(delta: dict) -> list[dict]:
    out = []
    for op in CAPTURE_OPS:
        e = delta["dml"].get(op)
        if e and "e2e_ratio" in e:
            out.append(fig(f"e2e_{op.lower()}", f"{op} + the change scan consuming it", "delta-rs DML with CDF + load_cdf",
                           "<= 0.5x", f"{e['e2e_ratio']:.2f}x",
                           f"{e['ctfile_e2e_s']:.2f} s vs {e['delta_e2e_s']:.2f} s (scan {e['ctfile_scan_s']:.2f} s vs "
                           f"{e['delta_scan_s']:.3f} s; CPU ratio {e['e2e_cpu_ratio']:.2f}"
                           + (f"; copy-on-write floor {e['floor_s']:.2f} s = {e['floor_vs_delta_e2e']:.2f}x"
                              if "floor_vs_delta_e2e" in e else "") + ")",
                           e["e2e_pass"], "delta"))
    t = delta["dml"].get("e2e_total")
    if t:
        parts = [delta["dml"][op] for op in t["ops"]]
        floor = ""
        if all("floor_s" in e for e in parts):
            f_s = sum(e["floor_s"] for e in parts)
            scans = sum(e["ctfile_scan_s"] for e in parts)
            dml = sum(e["ctfile_s"] for e in parts)
            floor = (f"; ctfile's statements alone {dml:.2f} s = {dml / t['delta_s']:.2f}x, their change scans "
                     f"{scans:.2f} s; copy-on-write floors {f_s:.2f} s = {f_s / t['delta_s']:.2f}x")
        out.append(fig("e2e_total", f"{' + '.join(t['ops'])}, each with its change scan, end to end",
                       "delta-rs DML with CDF + load_cdf", "<= 0.5x", f"{t['ratio']:.2f}x",
                       f"{t['ctfile_s']:.2f} s vs {t['delta_s']:.2f} s{floor}", t["pass"], "delta"))
    return out


def _changes_figures(changes: dict) -> list[dict]:
    out = []
    if changes.get("minimize"):
        m = changes["minimize"]
        for k, r in m["by_k"].items():
            out.append(fig(f"minimize_k{k}", f"MINIMIZE / ADDED_ONLY, k = {k} partitions of {m['partition_rows']:,} rows",
                           "itself (ADDED_ONLY scan of k appended partitions)", "<= 2x",
                           f"{r['ratio_minimize_vs_added_only']:.2f}x",
                           f"{r['minimize_ms']:.1f} ms vs {r['added_only_ms']:.1f} ms", r["pass"], "changes"))
    if changes.get("append"):
        a = changes["append"]
        out.append(fig("table_size", f"change scan time vs table size ({a['small_table']['partitions']:,} vs "
                       f"{a['large_table']['partitions']:,} partitions, same change)", "itself", "<= 1.2x",
                       f"{a['ratio_vs_small_table']:.2f}x", f"{a['ctfile_large_ms']:.1f} ms vs {a['ctfile_small_ms']:.1f} ms",
                       a["pass_vs_small_table"], "changes"))
    return out


def _cold_figures(cold: dict) -> list[dict]:
    m = cold["meta"]
    return [
        fig(f"cold_{shape}", f"cold one-commit change scan (fresh open_table), {m['partitions']:,} vs "
            f"{m['small_partitions']} live partitions ({'checkpoints off' if shape == 'log' else 'default: the large entry checkpointed'})",
            "itself", f"<= {m['goal']}x", f"{r['ratio']:.2f}x",
            f"{r['large_ms']:.2f} ms vs {r['small_ms']:.2f} ms (CPU ratio {r['cpu_ratio']:.2f})", r["pass"], "cold")
        for shape, r in cold["scan"].items()
    ]


def _merge_figures(r: dict) -> list[dict]:
    """Issue 27: one conditional upsert-with-delete MERGE vs what it replaces."""
    m = r["meta"]
    what = f"one MERGE of a {m['batch']:,}-row upsert-with-delete batch into {m['rows']:,} rows"
    anchors = {"two_statements": "the two statements it replaces (keyed delete, then upsert)",
               "upsert": "Table.merge of the same batch (plain upsert)"}
    return [
        fig(f"merge_vs_{n}", what, anchors[n], f"<= {goal}x", f"{r['ratio'][n]:.2f}x",
            f"{r['ms']['merge']:.0f} ms vs {r['ms'][n]:.0f} ms (CPU ratio {r['cpu_ratio'][n]:.2f})", r["pass"][n], "merge")
        for n, goal in m["goals"].items()
    ]


def _merge_spark_figures(r: dict) -> list[dict]:
    """Issue 27: a small MERGE through ctfile.spark vs the Python engine."""
    m, ms = r["meta"], r["ms"]
    what = f"Spark MERGE of {m['batch']:,} rows into {m['rows']:,}, warm local[2] ({m['command']})"
    rows = {"python": ("spark", "the Python builder's MERGE of the same batch (same clauses)"),
            "upsert": ("spark_upsert", "Table.merge of the same batch (CtfileTable.merge)")}
    out = [
        fig(f"merge_spark_vs_{n}", what, anchor, f"<= {m['goals'][n]}x", f"{r['ratio'][n]:.2f}x",
            f"{ms[mine]:.0f} ms vs {ms[n]:.0f} ms (driver path; on the executors {ms['spark_executors']:.0f} ms"
            + (f", spread over them {ms['spark_spread']:.0f} ms)" if "spark_spread" in ms else ")"),
            r["pass"][n], "merge_spark")
        for n, (mine, anchor) in rows.items()
    ]
    return out


def _schema_figures(schema: dict) -> list[dict]:
    """Issue 14: reads after a schema change vs the same read before it."""
    m = schema["meta"]
    what = {"added": "add_column", "renamed": "rename_column"}
    return [
        fig(f"schema_{read}_{k}", f"snapshot {read}() of a {m['partitions']:,}-partition table after {what[k]}",
            "the same read before the schema change", f"<= {m['goal']}x", f"{r['ratio'][k]:.2f}x",
            f"{r['ms'][k]:.0f} ms vs {r['ms']['before']:.0f} ms (CPU ratio {r['cpu_ratio'][k]:.2f})", r["pass"][k], "schema")
        for read, r in schema["reads"].items() for k in ("added", "renamed")
    ]


def _clustering_figures(c: dict) -> list[dict]:
    """Issue 16: a table clustered by id vs the same rows unclustered; each
    figure a ratio clustered / unclustered (or / the minimum)."""
    m, g, ins = c["meta"], c["meta"]["goals"], c["insert"]
    out = [fig("clustering_insert", f"insert of {m['rows']:,} shuffled rows, clusterBy = id", "unclustered insert",
               f"<= {g['insert']}x", f"{ins['ratio']:.2f}x",
               f"{ins['ms']['clustered'] / 1000:.2f} s vs {ins['ms']['unclustered'] / 1000:.2f} s "
               f"(CPU ratio {ins['cpu_ratio']:.2f}; sorting the rows alone, NumPy + Arrow take, {ins['ms']['sort'] / 1000:.2f} s: "
               f"floor {ins['floor_ratio']:.2f}x)", ins["pass"], "clustering")]
    if "upsert" in c:
        s, comp, n = c["upsert"]["summary"], c["upsert"]["compaction"], m["batches"]
        x = s["rewrite_x_min"]["clustered"]
        speed = 1 / g["speedup"]
        out += [
            fig("clustering_rewrite", f"partitions rewritten per MERGE of recent keys (worst of {n}), clustered",
                "the minimum: a sorted layout's partitions holding the batch's keys", f"<= {g['rewrite_x_min']}x",
                f"{max(x):.2f}x", f"median {median(x):.2f}x; with autoCompact worst "
                f"{max(s['rewrite_x_min']['clustered_auto']):.2f}x; unclustered rewrote "
                f"{min(s['rewritten']['unclustered'])}-{max(s['rewritten']['unclustered'])} partitions",
                s["pass"]["rewrite_x_min"], "clustering"),
            fig("clustering_merge", f"MERGE of recent keys ({m['batch_keys']:,} keys), clustered", "the same MERGE unclustered",
                f"<= {speed:g}x", f"{1 / s['merge_speedup']:.3f}x",
                f"{s['merge_ms']['clustered']:.0f} ms vs {s['merge_ms']['unclustered']:.0f} ms (median of {n}; "
                f"CPU ratio {1 / s['merge_cpu_speedup']:.3f})", s["pass"]["merge_speedup"], "clustering"),
            fig("clustering_scan", "change scan of each MERGE of recent keys, clustered", "the same scan unclustered",
                f"<= {speed:g}x", f"{1 / s['scan_speedup']:.3f}x",
                f"{s['scan_ms']['clustered']:.0f} ms vs {s['scan_ms']['unclustered']:.0f} ms (median of {n})",
                s["pass"]["scan_speedup"], "clustering"),
            fig("clustering_auto_compaction", f"live partitions after {n} MERGEs, clustered with autoCompact",
                "a fully compacted table (ceil(rows / partitionRows))", f"<= {g['auto_compaction']}x",
                f"{comp['ratio']['clustered_auto']:.2f}x",
                f"{comp['partitions']['clustered_auto']} vs {comp['fully_compacted']} (without autoCompact "
                f"{comp['partitions']['clustered']} = {comp['ratio']['clustered']:.2f}x)", comp["pass"], "clustering"),
        ]
    if "random" in c:
        s = c["random"]["summary"]
        out.append(fig("clustering_random", "MERGE of keys uniform over all ids (worst case), clustered",
                       "the same MERGE unclustered", f"<= {g['random_floor']}x", f"{s['ratio']:.2f}x",
                       f"{s['merge_ms']['clustered']:.0f} ms vs {s['merge_ms']['unclustered']:.0f} ms (median of "
                       f"{m['random_batches']}; CPU ratio {s['cpu_ratio']:.2f})", s["pass"], "clustering"))
    if "recluster" in c:
        out += _recluster_figures(c["recluster"])
    return out


def _recluster_figures(w: dict) -> list[dict]:
    """Issue 26: the maximum clustering depth after every random-key MERGE
    with ``ctfile.autoCompact``, against ``ctfile.autoCompactMaxDepth``."""
    s, n, u = w["summary"], len(w["batches"]), w["summary"]["unbounded"]
    return [
        fig(f"clustering_depth_bound_{x['bound']}",
            f"max clustering depth after each of {n} random-key MERGEs ({w['rows']:,} rows), autoCompact, "
            f"autoCompactMaxDepth {x['bound']}", "the bound", f"<= {x['bound']}", str(x["worst_max_depth"]),
            f"final average {x['final_average_depth']:.2f} (without the bound: max {u['worst_max_depth']}, final "
            f"average {u['final_average_depth']:.2f}); compaction rewrote {x['auto_rows']:,} rows, "
            f"{x['auto_per_merge_rows']:.1%} of the {x['merge_rows']:,} the MERGEs wrote; all MERGEs {x['total_s']:.0f} s "
            f"vs {u['total_s']:.0f} s", x["pass"], "clustering")
        for x in (s["depth_2"], s["depth_3"])
    ]


def _streams_figures(streams: dict) -> list[dict]:
    """Issue 17: consuming a stream exactly once vs the manual way (changes()
    + an application transaction), and what many streams cost."""
    m, loc = streams["meta"], streams["local"]
    floor = (f"floor {loc['ms']['floor']:.2f} ms: stream / (manual + floor) = {loc['ratio_vs_anchor_plus_floor']:.2f}x")
    note = None
    if loc["pass"] is False:
        note = (f"The stream took {loc['overhead_ms']:+.1f} ms over the manual consumer; what it must add (a listing "
                f"of `_ct_streams/`, a read of its state, the claim and resolution puts) took {loc['ms']['floor']:.2f} "
                f"ms alone in the same rounds, so against the anchor plus that floor the ratio is "
                f"{loc['ratio_vs_anchor_plus_floor']:.2f}x.")
    out = [fig("streams_consume_local", f"exactly-once consumption of an insert + update through a stream "
               f"(transaction(consuming=), {m['rows']:,}-row tables, local disk)",
               "changes(last + 1, latest) + app transaction, same rounds", f"<= {m['goal']}x", f"{loc['ratio']:.2f}x",
               f"{loc['ms']['stream']:.1f} ms vs {loc['ms']['manual']:.1f} ms (CPU ratio {loc['cpu_ratio']:.2f}; {floor})",
               loc["pass"], "streams", note)]
    s3 = streams.get("s3") or {}
    if "ratio" in s3:
        q = s3["requests"]
        diff = ", ".join(f"{k} {v:+g}" for k, v in q["stream_minus_manual"].items() if v)
        out.append(fig("streams_consume_s3", "the same consumption over the S3 API (SeaweedFS)",
                       "informational (against its floor)", "", f"{s3['ratio']:.2f}x",
                       f"{s3['ms']['stream']:.1f} ms vs {s3['ms']['manual']:.1f} ms; {q['total']['stream']:g} vs "
                       f"{q['total']['manual']:g} requests ({diff}); floor {s3['ms']['floor']:.1f} ms: stream / "
                       f"(manual + floor) = {s3['ratio_vs_anchor_plus_floor']:.2f}x", None, "streams"))
    mn = streams["many"]
    one, many = mn["streams"]
    for call, key in (("Table.streams()", "streams"), ("vacuum(dry_run=True) planning", "vacuum")):
        out.append(fig(f"streams_{key}_{many}", f"{call} on a table with {many} streams", "the same with 1 stream (informational)",
                       "", f"{mn['ms'][f'{key}_{many}']:.1f} ms",
                       f"1 stream: {mn['ms'][f'{key}_{one}']:.1f} ms ({mn[f'{key}_ratio']:.1f}x)", None, "streams"))
    return out


def _spark_figure(spark: dict) -> list[dict]:
    ratio = spark.get("ratio")
    return [fig("spark", f"snapshot scan through Spark, {spark.get('rows', 0):,} rows, {spark.get('partitions')} partitions",
                "spark.read.parquet on the same files", "<= 1.5x", f"{ratio:.2f}x",
                f"{spark['ctfile_s']:.2f} s vs {spark['spark_read_parquet_s']:.2f} s (SF {spark.get('scale_factor')}, "
                f"{spark.get('runs')} runs)", ratio <= 1.5, "spark")]


def _spark_native_figures(r: dict) -> list[dict]:
    """Issue 15: ``CtfileTable.to_df()`` against ``spark.read.parquet`` on the same files."""
    m, out = r["meta"], []
    for key, what in (("scan", "full scan"), ("count", "count()")):
        x = r[key]
        out.append(fig(f"spark_native_{key}", f"to_df() {what} through Spark, {m['rows']:,} rows, {m['partitions']} partitions",
                       "spark.read.parquet on the same files", f"<= {x['goal']}x", f"{x['ratio']:.2f}x",
                       f"{x['s']['to_df']:.2f} s vs {x['s']['parquet']:.2f} s (SF {m['scale_factor']}, {m['runs']} runs; "
                       f"spark.read.format('ctfile') {x['ctfile_ratio']:.2f}x)", x["pass"], "spark_native"))
    fa = r["first_action"]
    for side, label in (("ctfile", "spark.read.format('ctfile')"), ("to_df", "to_df()")):
        med = fa["median"][side]
        out.append(fig(f"spark_first_{side}", f"first Spark action of a fresh process, {label}",
                       "spark.read.parquet's first action", "reported", f"{fa['ratio'][side]:.2f}x",
                       f"{med['first_action_s']:.2f} s vs {fa['median']['parquet']['first_action_s']:.2f} s "
                       f"(session start {med['session_s']:.1f} s apart; {m['first_runs']} runs)", None, "spark_native"))
    return out


def _spark_changes_figures(r: dict) -> list[dict]:
    """Issue 29: the minimum-delta ``changes_df`` against the data source's ``default`` scan."""
    m, out = r["meta"], []
    what = {"small": "UPDATE of 0.1% of the rows", "insert": "insert of 1% new rows",
            "large": "UPDATE 0.1%, DELETE 1%, UPDATE 10%, insert 1%"}
    for name, x in r["changes"].items():
        a, b = x["interval"]
        out.append(fig(f"spark_changes_{name}",
                       f"changes_df(information='default') of versions {a}..{b} ({what.get(name, name)}; "
                       f"{x['change_rows']:,} change rows, {m['rows']:,}-row table)",
                       "spark.read.format('ctfile').option('changes', 'default'), same interval", f"<= {x['goal']}x",
                       f"{x['ratio']:.2f}x", f"{x['s']['changes_df']:.2f} s vs {x['s']['ctfile']:.2f} s "
                       f"(CPU ratio {x['cpu_ratio']:.2f}; {m['runs']} runs"
                       + (f"; Spark reading the scan's files alone {x['s']['floor']:.2f} s = {x['floor_ratio']:.2f}x"
                          if "floor" in x["s"] else "") + ")", x["pass"], "spark_changes"))
    return out


def _spark_dml_figures(r: dict) -> list[dict]:
    """Issue 15: a MERGE of a 0.5% upsert batch through ``ctfile.spark``
    against the native floor (Spark MERGEing plain Parquet) and the Python
    ``Table.merge``."""
    m, med, cpu = r["meta"], r["median_s"], r["median_cpu_s"]
    what = f"MERGE of {m['batch_rows']:,} rows into {m['rows']:,} (SF {m['scale']}), ctfile.spark on local[2]"
    return [
        fig("spark_dml_floor", what, "native floor: Spark MERGEing the same Parquet files", f"<= {r['goal_vs_floor']}x",
            f"{r['ratio_vs_floor']:.2f}x", f"{med['spark']:.2f} s vs {med['floor']:.2f} s (CPU {cpu['spark']:.1f} s vs "
            f"{cpu['floor']:.1f} s; {m['runs']} runs)", r["pass"], "spark_dml"),
        fig("spark_dml_python", what, "Python Table.merge in the driver process", "reported",
            f"{r['ratio_vs_python']:.2f}x", f"{med['spark']:.2f} s vs {med['python']:.2f} s (CPU {cpu['spark']:.1f} s vs "
            f"{cpu['python']:.1f} s)", None, "spark_dml"),
    ] + _spark_update_figures(r) + _spark_sync_figures(r)


def _spark_update_figures(r: dict) -> list[dict]:
    """The selective UPDATE of the same run (absent from results of before it)."""
    u = r.get("update")
    if not u:
        return []
    m, med, cpu = r["meta"], r["median_s"], r["median_cpu_s"]
    what = (f"UPDATE where {u['condition']} ({u['updated']:,} of {m['rows']:,} rows, {u['removed_partitions']} of "
            f"{m['partitions']} partitions rewritten), ctfile.spark on local[2]")
    return [
        fig("spark_update_floor", what, "native floor: Spark filtering (row-group pushdown) and rewriting the same files",
            f"<= {r['goal_vs_floor']}x", f"{u['ratio_vs_floor']:.2f}x",
            f"{med['spark_update']:.2f} s vs {med['floor_update']:.2f} s (CPU {cpu['spark_update']:.1f} s vs "
            f"{cpu['floor_update']:.1f} s; {m['runs']} runs)", u["pass"], "spark_dml"),
        fig("spark_update_python", what, "Python Table.update in the driver process", "reported",
            f"{u['ratio_vs_python']:.2f}x", f"{med['spark_update']:.2f} s vs {med['python_update']:.2f} s (CPU "
            f"{cpu['spark_update']:.1f} s vs {cpu['python_update']:.1f} s)", None, "spark_dml"),
    ]


def _spark_sync_figures(r: dict) -> list[dict]:
    """Issue 27: the snapshot sync (NOT MATCHED BY SOURCE THEN DELETE) of
    the same run (absent from results of before it)."""
    y = r.get("sync")
    if not y:
        return []
    m, med, cpu = r["meta"], r["median_s"], r["median_cpu_s"]
    what = (f"MERGE ... WHEN NOT MATCHED BY SOURCE THEN DELETE, a snapshot of {y['snapshot_rows']:,} keys into "
            f"{m['rows']:,} rows ({y['deleted']:,} deleted, {y['removed_partitions']} of {m['partitions']} partitions "
            "rewritten), ctfile.spark on local[2]")
    return [
        fig("spark_sync_floor", what, "native floor: Spark anti-joining the keys and rewriting the same files",
            f"<= {r['goal_vs_floor']}x", f"{y['ratio_vs_floor']:.2f}x",
            f"{med['spark_sync']:.2f} s vs {med['floor_sync']:.2f} s (CPU {cpu['spark_sync']:.1f} s vs "
            f"{cpu['floor_sync']:.1f} s; {m['runs']} runs)", y["pass"], "spark_dml"),
        fig("spark_sync_python", what, "Python Table.merge_builder in the driver process", "reported",
            f"{y['ratio_vs_python']:.2f}x", f"{med['spark_sync']:.2f} s vs {med['python_sync']:.2f} s (CPU "
            f"{cpu['spark_sync']:.1f} s vs {cpu['python_sync']:.1f} s)", None, "spark_dml"),
    ]


def _open_figures(core: dict) -> list[dict]:
    return [fig(f"open_{shape}", f"open table at {r['versions_large']:,} vs {r['versions_small']:,} versions ({shape})",
                "itself", "<= +100 ms", f"{r['diff_ms']:+.1f} ms",
                f"{r['large_ms']:.1f} ms vs {r['small_ms']:.1f} ms", r["pass"], "core")
            for shape, r in core["open"].items()]


def _stream_figures(changes: dict) -> list[dict]:
    return [fig(f"stream_{name}", f"peak RSS of a change scan streamed with to_batches() ({name}: "
                f"{r['rows']:,} rows, {r['change_set_bytes'] / 2**30:.2f} GiB change set)", "change set size",
                "bounded, < 1 GB", f"{r['peak_rss_bytes'] / 2**20:,.0f} MiB",
                f"peak RSS for {r['change_set_bytes'] / 2**20:,.0f} MiB of change batches", r["pass"], "changes")
            for name, r in changes["stream"].items()]


def read_check_figures(core: dict | None, changes: dict | None) -> list[dict]:
    """Issue 12's figures: reads with the read-time damage check vs the same reads without it."""
    out = []
    reads = []
    if core and core.get("scan"):
        sc = core["scan"]
        reads += [("snapshot scan", label, sc["reads"][label], "core") for label in sc["goal_reads"]]
    if changes and changes.get("check"):
        reads += [("change scan", label, r, "changes") for label, r in changes["check"]["reads"].items()]
    for kind, label, r, source in reads:
        slug = "".join(ch if ch.isalnum() else "_" for ch in label.lower()).strip("_")
        out.append(fig(f"read_check_{slug}", f"{kind} {label} with the read-time damage check",
                       "the same read inside unchecked_reads()", "<= 1.03x", f"{r['ratio']:.3f}x",
                       f"{r['ms']['checked']:.1f} ms vs {r['ms']['unchecked']:.1f} ms (CPU ratio {r['cpu_ratio']:.3f}; "
                       f"the check alone {r['ms']['check alone']:.1f} ms = {100 * r['check_share']:.1f}%)",
                       r["pass"], source))
    return out


def objectstore_figures(r: dict) -> list[dict]:
    """Issue 5's object-store figures (not in issue 7's table; listed for completeness)."""
    out = []
    c = r.get("commit_local")
    if c:
        out.append(fig("commit_local", f"single-writer commit throughput, local disk ({c['commits']} commits)", "goal",
                       f">= {c.get('goal_commits_per_s', 100)} commits/s", f"{c['commits_per_s']} commits/s",
                       f"{c['ms_per_commit']} ms per commit", c.get("meets_goal"), "objectstore"))
    c = r.get("commit_s3")
    if c:
        out.append(fig("commit_s3", f"single-writer commit throughput, S3 API (SeaweedFS, {c['commits']} commits)",
                       "informational", "", f"{c['commits_per_s']} commits/s",
                       f"{c['ms_per_commit']} ms and {c.get('requests_per_commit_total')} requests per commit", None,
                       "objectstore"))
    o = r.get("open")
    if o and "with_hint" in o:
        w = o["with_hint"]
        nh = o.get("without_hint", {})
        out.append(fig("open_s3", f"open table at {o['versions']:,} versions over the S3 API", "informational", "",
                       f"{1000 * w['median_s']:.0f} ms",
                       f"{w['requests_total']} requests (without the checkpoint hint: "
                       f"{1000 * nh.get('median_s', float('nan')):.0f} ms, {nh.get('requests_total')} requests)",
                       None, "objectstore"))
    return out


# ---------------------------------------------------------------- issue 13: change capture


def _step(delta: dict, op: str) -> dict:
    """The history step a timed op repeats (DELETE: the last RF2)."""
    rounds = delta["meta"]["rounds"]
    op, rnd = ("RF2", rounds - 1) if op == "DELETE" else (op, -1)
    return next(s for s in delta["history"]["steps"] if s["op"] == op and s.get("round", -1) == rnd)


def _decode_floor(c: dict) -> str:
    """The floor of a captured scan measured in the same rounds: pyarrow alone
    decoding the commit's change files."""
    if c.get("decode_ms") is None:
        return ""
    return f"; pyarrow decoding the change files alone {c['decode_ms']:.1f} ms = {c['decode_vs_delta']:.2f}x"


def _capture_scan_figures(delta: dict) -> list[dict]:
    out = []
    for op in CAPTURE_OPS:
        e = delta["scans"].get(op)
        if not e or "capture" not in e:
            continue
        c = e["capture"]
        cdc = _step(delta, op)["dl_cdc"]
        how = (f"captured, {c['change_bytes']:,} change-file bytes" if c["captured"]
               else "not captured: no change file")
        note = None
        if c["pass"] is False:
            note = (f"The capture-on table's {op} commit names no change file, so its scan read the partitions "
                    f"the statement rewrote, as with capture off ({c['ms']:.1f} ms vs {e['ctfile_ms']:.1f} ms): the "
                    "ctfile build measured does not capture this statement."
                    if not c["captured"] else
                    f"Captured ({c['plan_shape']}): the scan read {c['change_bytes']:,} bytes of change files plus "
                    f"the partitions the commit added, in {c['ms']:.1f} ms ({c['cpu_ms']:.1f} ms CPU); delta-rs's "
                    f"load_cdf read {cdc['cdc_bytes']:,} bytes of _change_data in {e['delta_ms']:.1f} ms "
                    f"({e['delta_cpu_ms']:.1f} ms CPU).")
        out.append(fig(f"capture_scan_{op.lower()}", f"change scan of the {op} commit, capture on "
                       f"({e['rows']['ctfile_capture']:,} rows)", "delta-rs load_cdf(v, v)", "<= 1.0x",
                       f"{c['ratio']:.2f}x",
                       f"{c['ms']:.1f} ms vs {e['delta_ms']:.1f} ms (CPU ratio {c['cpu_ratio']:.2f}; capture off "
                       f"{e['ctfile_ms']:.1f} ms, on / off {c['vs_off']:.2f}; {how}{_decode_floor(c)})",
                       c["pass"], "delta", note))
    return out


def _capture_mindelta_figure(delta: dict) -> list[dict]:
    m = delta["mindelta"]
    c = m.get("capture")
    if not c:
        return []
    n, k = c["interval_commits"], c["interval_captured"]
    note = None
    if c["pass"] is False:
        note = (f"{n - k} of the {n} commits of RF1..MERGE on the capture-on table name no change file (the "
                "ctfile build measured does not capture them), so the scan read their partitions, as with capture "
                f"off ({c['ms']:.0f} ms vs {m['ctfile_ms']:.0f} ms)." if k < n else
                f"All {n} commits captured ({c['plan_shape']}): the scan read {c['interval_change_bytes']:,} bytes of "
                f"change files plus the partitions the interval added, in {c['ms']:.0f} ms (CPU ratio "
                f"{c['cpu_ratio']:.2f}); delta-rs's load_cdf alone took {m['delta_load_cdf_only_ms']:.0f} ms and the "
                f"consolidation the rest of {m['delta_ms']:.0f} ms.")
    return [fig("capture_mindelta", f"minimum-delta change scan over RF1..MERGE, capture on ({c['rows']:,} rows)",
                "delta-rs load_cdf + consolidation to net changes", "<= 1.0x", f"{c['ratio']:.2f}x",
                f"{c['ms']:.0f} ms vs {m['delta_ms']:.0f} ms (CPU ratio {c['cpu_ratio']:.2f}; capture off "
                f"{m['ctfile_ms']:.0f} ms; {k} of {n} commits captured, {c['interval_change_bytes']:,} change-file bytes)",
                c["pass"], "delta", note)]


def _capture_dml_figures(delta: dict) -> list[dict]:
    out = []
    for op in CAPTURE_OPS:
        e = delta["dml"].get(op)
        if not e or "capture" not in e:
            continue
        c = e["capture"]
        wrote = f"{c['change_files']} change files, {c['change_bytes']:,} bytes, {c['change_rows']:,} rows"
        note = None
        if c["pass_vs_off"] is False:
            runs = e["runs_s"]
            note = (f"Capture on took {c['ctfile_s'] - e['ctfile_s']:+.3f} s ({100 * (c['vs_off'] - 1):+.1f}%) over "
                    f"capture off, CPU {100 * (c['cpu_vs_off'] - 1):+.1f}%, writing {wrote}."
                    + ("" if c["captured"] else
                       " The commit is not captured: both arms did the same work, so the difference is run-to-run "
                       f"variation (runs on: {', '.join(f'{x:.3f}' for x in runs['ctfile_capture'])} s; off: "
                       f"{', '.join(f'{x:.3f}' for x in runs['ctfile'])} s)."))
        out.append(fig(f"capture_dml_{op.lower()}", f"{op} time, capture on", "the same statement, capture off",
                       "<= 1.05x", f"{c['vs_off']:.3f}x",
                       f"{c['ctfile_s']:.2f} s vs {e['ctfile_s']:.2f} s (CPU ratio {c['cpu_vs_off']:.3f}; {wrote})",
                       c["pass_vs_off"], "delta", note))
        value = "n/a" if c["bytes_vs_delta"] is None else f"{c['bytes_vs_delta']:.3f}x"
        why = "" if c["bytes_vs_delta"] is not None else (
            "; not captured, no figure" if not c["captured"] else "; delta-rs wrote no _change_data")
        note = None
        if c["pass_bytes"] is False:
            dl_rows = e["rows"]["dl"]["scan_rows"]
            note = (f"{c['change_bytes'] / max(c['change_rows'], 1):.1f} bytes per change row ({c['change_rows']:,} "
                    f"rows in {c['change_files']} files) against delta-rs's "
                    f"{c['delta_cdc_bytes'] / max(dl_rows, 1):.1f} bytes per change-feed row ({dl_rows:,} rows in "
                    f"{c['delta_cdc_files']} files).")
        out.append(fig(f"capture_bytes_{op.lower()}", f"change-file bytes of the {op}", "delta-rs _change_data bytes",
                       "<= 1.0x", value,
                       f"{c['change_bytes']:,} bytes in {c['change_files']} files vs {c['delta_cdc_bytes']:,} bytes in "
                       f"{c['delta_cdc_files']} files{why}", c["pass_bytes"], "delta", note))
    return out


def _capture_e2e_figures(delta: dict) -> list[dict]:
    out = []
    for op in CAPTURE_OPS:
        e = delta["dml"].get(op)
        c = (e or {}).get("capture") or {}
        if "e2e_s" not in c:
            continue
        floor = (f"; copy-on-write floor {e['floor_s']:.2f} s = {e['floor_vs_delta_e2e']:.2f}x delta-rs, "
                 f"capture on = {c['e2e_vs_floor']:.2f}x its floor" if "e2e_vs_floor" in c else "")
        measured = (f"{c['e2e_s']:.2f} s vs {e['delta_e2e_s']:.2f} s (DML {c['ctfile_s']:.2f} s + scan {c['scan_s']:.3f} s "
                    f"vs {e['delta_s']:.2f} s + {e['delta_scan_s']:.3f} s; CPU ratio {c['e2e_cpu_vs_delta']:.2f}{floor})")
        note = None
        if c["e2e_pass"] is False:
            budget = 0.5 * e["delta_e2e_s"]
            note = (f"The goal leaves {budget:.2f} s; capture on spent {c['ctfile_s']:.2f} s in the statement "
                    f"({c['ctfile_s'] / e['delta_e2e_s']:.2f}x delta-rs's DML + load_cdf) and {c['scan_s']:.3f} s in "
                    f"its change scan ({'captured' if c['captured'] else 'not captured: the scan read the rewritten partitions'})"
                    + (f"; the copy-on-write floor of the statement alone is {e['floor_s']:.2f} s "
                       f"({e['floor_vs_delta_e2e']:.2f}x)." if "floor_s" in e else "."))
        goal = "<= 0.5x" if op == "UPDATE" else "reported against its copy-on-write floor"
        out.append(fig(f"capture_e2e_{op.lower()}", f"{op} + the change scan consuming it, capture on",
                       "delta-rs DML with CDF + load_cdf", goal, f"{c['e2e_vs_delta']:.2f}x", measured,
                       c["e2e_pass"], "delta", note))
    return out


def capture_figures(delta: dict) -> list[dict]:
    """Issue 13's figures, in its order: scans and minimum delta, DML and bytes, end to end."""
    out: list[dict] = []
    out += _capture_scan_figures(delta) if delta.get("scans") else []
    out += _capture_mindelta_figure(delta) if delta.get("mindelta") else []
    out += _capture_dml_figures(delta) if delta.get("dml") else []
    out += _capture_e2e_figures(delta) if delta.get("dml") else []
    return out


# ---------------------------------------------------------------- all


def figures(res: dict[str, dict]) -> list[dict]:
    """The figures of issues 7, 12, 13, 14, 16, 17 and 27, from whatever results exist."""
    core, changes, delta, spark = (res.get(k) for k in ("core", "changes", "delta", "spark"))
    has = lambda r, k: bool(r and r.get(k))  # noqa: E731
    out: list[dict] = []
    out += _insert_figures(core) if has(core, "insert") else []
    out += _hidden_figure(delta) if has(delta, "hidden") else []
    out += _dml_figures(delta) if has(delta, "dml") else []
    out += _append_rf1_figures(delta) if has(delta, "append") else []
    out += _append_1000_figure(changes) if has(changes, "append") else []
    out += _mindelta_figure(delta) if has(delta, "mindelta") else []
    out += _e2e_figures(delta) if has(delta, "dml") else []
    out += _changes_figures(changes) if changes else []
    out += _cold_figures(res["cold"]) if has(res.get("cold"), "scan") else []
    out += _schema_figures(res["schema"]) if has(res.get("schema"), "reads") else []
    out += _merge_figures(res["merge"]) if has(res.get("merge"), "ratio") else []
    out += _merge_spark_figures(res["merge_spark"]) if has(res.get("merge_spark"), "ratio") else []
    out += _clustering_figures(res["clustering"]) if has(res.get("clustering"), "insert") else []
    out += _streams_figures(res["streams"]) if has(res.get("streams"), "local") else []
    out += _spark_figure(spark) if spark else []
    out += _spark_native_figures(res["spark_native"]) if has(res.get("spark_native"), "scan") else []
    out += _spark_changes_figures(res["spark_changes"]) if has(res.get("spark_changes"), "changes") else []
    out += _spark_dml_figures(res["spark_dml"]) if has(res.get("spark_dml"), "median_s") else []
    if has(res.get("derived"), "ms"):
        from report.derived import derived_figures  # its module imports this one's fig()

        out += derived_figures(res["derived"])
    out += read_check_figures(core, changes)
    out += _open_figures(core) if has(core, "open") else []
    out += _stream_figures(changes) if has(changes, "stream") else []
    out += capture_figures(delta) if delta else []
    os_res = res.get("objectstore")
    if os_res:
        try:
            out += objectstore_figures(os_res)
        except (KeyError, TypeError, ValueError):
            pass  # an older or newer layout: its tables still appear below
    return out
