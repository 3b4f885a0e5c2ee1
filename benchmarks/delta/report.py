"""The markdown summary of ``bench_delta.py``'s results (:func:`markdown`),
printed by the script and embedded in ``RESULTS.md`` by ``run.py``.

It renders the JSON alone, section by section; a section whose results are
absent (``--only``) is left out.
"""

from __future__ import annotations

METHOD = (
    "Method: the history (bulk insert; RF1 = insert the lineitems of 0.1% new orders, RF2 = delete the "
    "lineitems of 0.1% of the orders by an `l_orderkey IN (...)` list, repeated; UPDATE `l_discount = "
    "l_discount + 0.01 WHERE l_orderkey % 100 = 7`; MERGE of an upsert batch of 0.5% of the rows on "
    "(l_orderkey, l_linenumber), 80% matching rows with a new l_quantity and l_comment, 20% new rows; "
    "compaction) is applied once to a ctfile table, to a second ctfile table created with "
    "`ctfile.changeCapture = before_after` (\"capture on\") and to a Delta table with "
    "`delta.enableChangeDataFeed = true`; the benchmark checks that all three report the same row counts per "
    "statement and hold the same rows at the end. Each timed DML run starts from a clone of the table as it "
    "was before that statement (data files hard-linked, logs copied; untimed, followed by `sync`), opens "
    "it (untimed), then times the statement and, right after it, the change scan of the new version "
    "(ctfile `changes(v, v)` minimum delta; delta-rs `load_cdf(v, v)`), rotating which table goes "
    "first. ctfile fsyncs every data file and log entry; delta-rs does not. Net changes from the Delta "
    "change feed (4): per key, events ordered by commit (pre-image before post-image), the first and last "
    "event kept with pyarrow `group_by(..., use_threads=False).aggregate(first, last)`; the first is the "
    "before-image if it is a delete / update_preimage, the last the after-image if it is an insert / "
    "update_postimage; keys whose before and after images are equal are dropped; delta-rs's string_view "
    "columns are cast to string first (pyarrow cannot take() them). The output row counts of all sides "
    "are checked to be equal."
)


def _ok(flag) -> str:
    return "" if flag is None else ("ok" if flag else "MISS")


def _with(value: str, flag) -> str:
    return f"{value} {_ok(flag)}".rstrip()


def _f(x, fmt: str = ".2f", none: str = "n/a") -> str:
    return none if x is None else format(x, fmt)


def _header(result: dict) -> list[str]:
    meta = result["meta"]
    h = result.get("history") or {}
    return [f"## ctfile vs delta-rs {meta.get('deltalake', '')} on the same history ({meta['mode']}, {meta['started']})", "",
            f"`{meta['command']}` — lineitem SF {meta['sf']:g} ({h.get('rows', 0):,} rows), {meta['rounds']} RF1+RF2 rounds, "
            f"medians of {meta['runs']} alternated runs after a warm-up; both formats write zstd; "
            f"load average {meta['loadavg_start'][0]:.1f} at start, {meta['loadavg_end'][0]:.1f} at end", "", METHOD]


def _history(h: dict) -> list[str]:
    lines = ["", "History (single untimed build run, seconds; change data = ctfile change files of the capture-on "
                 "table / delta-rs `_change_data` files the statement's log entry names):", "",
             "| step | rows inserted / updated / deleted | ctfile s | capture on s | delta-rs s | ctfile version | "
             "delta version | change data bytes: capture on / delta-rs |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for s in h["steps"]:
        c = s["ct"]
        name = s["op"] + ("" if s.get("round", -1) < 0 else f" #{s['round'] + 1}")
        counts = f"{c.get('inserted', c.get('rows', 0)):,} / {c.get('updated', 0):,} / {c.get('deleted', 0):,}"
        cap, cdc = s.get("cc_capture"), s.get("dl_cdc")
        data = "" if cap is None else (f"{cap['change_bytes']:,}" + ("" if cap["captured"] else " (not captured)")
                                       + f" / {cdc['cdc_bytes']:,}")
        lines.append(f"| {name} | {counts} | {s['ct_s']:.2f} | {_f(s.get('cc_s'))} | {s['dl_s']:.2f} | {c['version']} | "
                     f"{s['dl']['version']} | {data} |")
    return lines


def _dml(d: dict) -> list[str]:
    lines = ["", "### (1) DML and (2) DML + the change scan consuming it (each run from a clone of the same table state)", "",
             "| statement | ctfile s | delta-rs s | ratio (<= 1.0) | CPU ratio | scan s: ctfile changes / delta-rs load_cdf | ctfile DML+scan s | delta-rs DML+load_cdf s | ratio (<= 0.5) | scan rows |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for op, e in d.items():
        if op == "e2e_total":
            continue
        e2e = (f"{e['ctfile_scan_s']:.3f} / {e['delta_scan_s']:.3f} | "
               f"{e['ctfile_e2e_s']:.3f} | {e['delta_e2e_s']:.3f} | {e['e2e_ratio']:.2f} {_ok(e['e2e_pass'])} | "
               f"{e['rows']['ct']['scan_rows']:,}") if "e2e_ratio" in e else " | | | |"
        lines.append(f"| {e['description']} | {e['ctfile_s']:.3f} | {e['delta_s']:.3f} | {e['ratio']:.2f} {_ok(e['pass'])} | "
                     f"{e['cpu_ratio']:.2f} | {e2e} |")
    if "e2e_total" in d:
        t = d["e2e_total"]
        lines.append(f"| **{' + '.join(t['ops'])}, end to end** | | | | | | {t['ctfile_s']:.3f} | {t['delta_s']:.3f} | "
                     f"{t['ratio']:.2f} {_ok(t['pass'])} | |")
    floors = [(op, e) for op, e in d.items() if op != "e2e_total" and "floor_s" in e]
    if floors:
        lines += ["", "Copy-on-write floor: pyarrow alone decoding the data columns of the files the ctfile statement "
                      "rewrote and encoding them again (zstd, 1 Mi-row row groups, 2 threads; DELETE without the deleted "
                      "rows; no hidden columns, checksum, fsync or log), timed in the same rounds. No copy-on-write "
                      "statement can cost less, whatever its change scan costs:", "",
                  "| statement | files | floor s | floor / delta-rs DML | floor / delta-rs DML + load_cdf |",
                  "|---|---:|---:|---:|---:|"]
        for op, e in floors:
            lines.append(f"| {op} | {e['floor_files']} | {e['floor_s']:.3f} | {e['floor_vs_delta']:.2f} | "
                         f"{e.get('floor_vs_delta_e2e', float('nan')):.2f} |")
    c = d.get("COMPACT")
    if c:
        ct_r, dl_r = c["rows"]["ct"], c["rows"]["dl"]
        lines += ["", f"COMPACT (no goal): ctfile rewrote {ct_r.get('files_removed')} small partitions into "
                      f"{ct_r.get('files_added')}; delta-rs optimize.compact() removed {dl_r.get('files_removed')} and "
                      f"added {dl_r.get('files_added')} files (its default target is ~100 MB per file)."]
    return lines


def _append(a: dict) -> list[str]:
    return ["", f"### (3) append-only change scan of the last RF1 commit ({a['rows']:,} rows, {a['files']} file(s), {a['file_bytes']:,} bytes)", "",
            "| ctfile ms | pq.read_table(added files) ms | delta-rs load_cdf ms | vs pyarrow (<= 1.3) | vs delta-rs (<= 1.0) | CPU ratios (pq, delta) |",
            "|---:|---:|---:|---:|---:|---:|",
            f"| {a['ctfile_ms']:.2f} | {a['pyarrow_ms']:.2f} | {a['delta_ms']:.2f} | {a['ratio_vs_pyarrow']:.2f} {_ok(a['pass_vs_pyarrow'])} | "
            f"{a['ratio_vs_delta']:.2f} {_ok(a['pass_vs_delta'])} | {a['cpu_ratio_vs_pyarrow']:.2f}, {a['cpu_ratio_vs_delta']:.2f} |"]


def _mindelta(m: dict) -> list[str]:
    lines = ["", "### (4) minimum-delta change scan over RF1..MERGE", "",
             "| ctfile ms (rows) | delta-rs load_cdf + consolidation ms (CDF rows -> net rows) | load_cdf alone ms | ratio (<= 1.0) | vs load_cdf alone | CPU ratio |",
             "|---:|---:|---:|---:|---:|---:|",
             f"| {m['ctfile_ms']:.1f} ({m['ctfile_rows']:,}) | {m['delta_ms']:.1f} ({m['delta_cdf_rows']:,} -> {m['delta_net_rows']:,}) | "
             f"{m['delta_load_cdf_only_ms']:.1f} | {m['ratio']:.2f} {_ok(m['pass'])} | {m['ratio_vs_load_cdf_only']:.2f} | {m['cpu_ratio']:.2f} |"]
    if "removed_decode_ms" in m:
        lines += ["", f"Floor of a scan that reads only the interval's partitions: pyarrow `pq.read_table` of the data "
                      f"columns of the {m['removed_partitions']} net removed partitions ({m['removed_rows']:,} rows; "
                      f"the old images of the deleted and updated rows exist only there, scattered over all of them): "
                      f"{m['removed_decode_ms']:.0f} ms, {m['removed_decode_vs_delta']:.2f}x delta-rs's load_cdf + "
                      "consolidation, in the same rounds."]
    return lines


def _scans(sc: dict) -> list[str]:
    lines = ["", "### (4b) the change scan of each statement alone (informational; the goal is (2))", "",
             "| scan | plan shape | rows (ctfile / delta-rs CDF) | ctfile ms | delta-rs load_cdf ms | ratio | ctfile CPU ms | delta-rs CPU ms | load avg |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for op, e in sc.items():
        load = "" if e["loadavg"] is None else f"{e['loadavg']:.1f}"
        lines.append(f"| {op} | {e['plan_shape']} | {e['rows']['ctfile']:,} / {e['rows']['delta']:,} | {e['ctfile_ms']:.1f} | "
                     f"{e['delta_ms']:.1f} | {e['ratio']:.1f} | {e['ctfile_cpu_ms']:.1f} | {e['delta_cpu_ms']:.1f} | {load} |")
    return lines


def _hidden(hb: dict) -> list[str]:
    lines = ["", "### (5) hidden-column bytes (compressed _ct_row_id + _ct_row_version chunks / live partition bytes)", "",
             "| after | partitions (with hidden columns) | table bytes | hidden bytes | fraction |", "|---|---:|---:|---:|---:|"]
    for k in ("UPDATE", "MERGE", "COMPACT"):
        r = hb[k]
        flag = f" {_ok(hb['pass'])} (<= 1%)" if k == "UPDATE" else ""
        lines.append(f"| {k} (v{r['version']}) | {r['partitions']} ({r['partitions_with_hidden']}) | {r['table_bytes']:,} | "
                     f"{r['hidden_bytes']:,} | {100 * r['fraction']:.3f}%{flag} |")
    return lines


def _captured(flag: bool) -> str:
    return "yes" if flag else "**no** (fell back to partitions)"


def _capture_dml(d: dict, ops: list[str]) -> list[str]:
    lines = ["", "DML (capture on vs off) and change-data bytes (sum of the entry's `change` sizeBytes vs "
                 "delta-rs's `cdc` sizes):", "",
             "| statement | capture off s | capture on s | on / off (<= 1.05) | CPU on / off | captured | change files (rows) | change bytes | delta-rs _change_data files | delta-rs bytes | bytes ratio (<= 1.0) |",
             "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for op in ops:
        e, c = d[op], d[op]["capture"]
        lines.append(f"| {op} | {e['ctfile_s']:.3f} | {c['ctfile_s']:.3f} | {_with(_f(c['vs_off'], '.3f'), c['pass_vs_off'])} | "
                     f"{c['cpu_vs_off']:.3f} | {_captured(c['captured'])} | {c['change_files']} ({c['change_rows']:,}) | "
                     f"{c['change_bytes']:,} | {c['delta_cdc_files']} | {c['delta_cdc_bytes']:,} | "
                     f"{_with(_f(c['bytes_vs_delta'], '.3f'), c['pass_bytes'])} |")
    lines += ["", "DML + its change scan end to end, capture on (UPDATE goal <= 0.5x delta-rs; DELETE and MERGE "
                  "against their copy-on-write floors of (2)):", "",
              "| statement | capture on DML+scan s | delta-rs DML+load_cdf s | ratio | CPU ratio | scan s: on / off / delta-rs | floor s | on / floor |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for op in [op for op in ops if "e2e_s" in d[op]["capture"]]:
        e, c = d[op], d[op]["capture"]
        goal = " (<= 0.5) " + _ok(c["e2e_pass"]) if op == "UPDATE" else ""
        lines.append(f"| {op} | {c['e2e_s']:.3f} | {e['delta_e2e_s']:.3f} | {c['e2e_vs_delta']:.2f}{goal} | "
                     f"{c['e2e_cpu_vs_delta']:.2f} | {c['scan_s']:.3f} / {e['ctfile_scan_s']:.3f} / {e['delta_scan_s']:.3f} | "
                     f"{_f(e.get('floor_s'), '.3f')} | {_f(c.get('e2e_vs_floor'))} |")
    t = d.get("e2e_total")
    if t and "capture_s" in t:
        lines.append(f"| **{' + '.join(t['ops'])}** | {t['capture_s']:.3f} | {t['delta_s']:.3f} | {t['capture_ratio']:.2f} | | | | |")
    return lines


def _capture_scans(sc: dict) -> list[str]:
    lines = ["", "The change scan of each statement alone (capture on: goal <= 1.0x delta-rs `load_cdf(v, v)`; "
                 "vs capture off informational):", "",
             "| scan | captured (change bytes) | plan shape on | capture on ms | capture off ms | delta-rs ms | on / delta-rs (<= 1.0) | CPU on / delta-rs | on / off |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for op, e in sc.items():
        c = e["capture"]
        lines.append(f"| {op} | {_captured(c['captured'])} ({c['change_bytes']:,}) | {c['plan_shape']} | {c['ms']:.1f} | "
                     f"{e['ctfile_ms']:.1f} | {e['delta_ms']:.1f} | {c['ratio']:.2f} {_ok(c['pass'])} | "
                     f"{c['cpu_ratio']:.2f} | {c['vs_off']:.2f} |")
    return lines


def _capture_mindelta(m: dict) -> list[str]:
    c = m["capture"]
    return ["", "Minimum delta over RF1..MERGE, capture on (goal <= 1.0x delta-rs load_cdf + consolidation):", "",
            "| capture on ms (rows) | capture off ms | delta-rs load_cdf + consolidation ms | ratio (<= 1.0) | CPU ratio | on / off | commits captured | change bytes |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|",
            f"| {c['ms']:.1f} ({c['rows']:,}) | {m['ctfile_ms']:.1f} | {m['delta_ms']:.1f} | {c['ratio']:.2f} {_ok(c['pass'])} | "
            f"{c['cpu_ratio']:.2f} | {c['vs_off']:.2f} | {c['interval_captured']} of {c['interval_commits']} | "
            f"{c['interval_change_bytes']:,} |"]


def _capture(result: dict) -> list[str]:
    """(6) Change capture on (issue 13), from the capture parts of (1), (2), (4) and (4b)."""
    d, sc, m = result.get("dml") or {}, result.get("scans") or {}, result.get("mindelta")
    ops = [op for op in d if op != "e2e_total" and "capture" in d[op]]
    sc = {op: e for op, e in sc.items() if "capture" in e}
    if not (ops or sc or (m and "capture" in m)):
        return []
    lines = ["", "### (6) change capture on (`ctfile.changeCapture = before_after`), in the same rounds as (1)-(4b)", "",
             "A commit is *captured* when its log entry names change files, or every data-changing remove has "
             "`deletesAllRows` (SPEC §Change capture); a change scan reads no partition a captured commit "
             "rewrote. A commit that is not captured (a writer that does not capture) is scanned from its "
             "partitions, as with capture off."]
    uncaptured = [op for op in ops if op in ("UPDATE", "DELETE", "MERGE") and not d[op]["capture"]["captured"]]
    if uncaptured:
        lines += ["", f"**The capture-on table's {', '.join(uncaptured)} commit(s) are not captured** (their entries "
                      "name no change file): the ctfile build measured does not write change files, so these figures "
                      "measure the fallback."]
    lines += _capture_dml(d, ops) if ops else []
    lines += _capture_scans(sc) if sc else []
    lines += _capture_mindelta(m) if m and "capture" in m else []
    return lines


def markdown(result: dict) -> str:
    lines = _header(result)
    if result.get("history"):
        lines += _history(result["history"])
    if result.get("dml"):
        lines += _dml(result["dml"])
    if result.get("append"):
        lines += _append(result["append"])
    if result.get("mindelta"):
        lines += _mindelta(result["mindelta"])
    if result.get("scans"):
        lines += _scans(result["scans"])
    if result.get("hidden"):
        lines += _hidden(result["hidden"])
    lines += _capture(result)
    return "\n".join(lines)
