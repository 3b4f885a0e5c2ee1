"""The declared bronze -> silver -> gold pipeline of docs/spark.md ("The
same pipeline, declared", issue 30): an append-only bronze of people's
events, a silver derived table that keeps each person's latest event
unless it churned them (a deduplication window), a gold derived table that
counts people per city through a LEFT JOIN with a dimension, kept current
by the scheduler (``derived.run``). :func:`run_pipeline` runs it on any
storage (local paths, ``s3://`` with storage options) and session (local,
standalone cluster), checks every step against a Python model of the
queries, and returns what it saw. The docs' own block is checked to use
these queries (test_spark_pipeline_readme.py)."""

from __future__ import annotations

import time
from collections import Counter

import pyarrow as pa

import ctfile

PEOPLE = pa.schema([("id", pa.int64()), ("name", pa.string()), ("team", pa.string()), ("seq", pa.int64()),
                    ("churned", pa.bool_())])
TEAMS = pa.schema([("team", pa.string()), ("city", pa.string())])
SILVER = ("SELECT id, name, team, seq FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY id ORDER BY seq DESC) AS rn "
          "FROM bronze) AS latest WHERE rn = 1 AND NOT churned")
GOLD = "SELECT t.city, count(*) AS people FROM s LEFT JOIN t ON s.team = t.team GROUP BY t.city"

#: The batches that reach bronze (people's events) and the dimension, in order.
BATCHES = [
    {"people": [(1, "jeff", "pins", 1, False), (2, "donny", "pins", 2, False), (1, "the dude", "dudes", 3, False),
                (3, "walter", "pins", 4, False)],
     "teams": [("pins", "Los Angeles")]},
    # donny churns, maude arrives, the dudes get a city
    {"people": [(2, "donny", "pins", 5, True), (4, "maude", "art", 6, False)], "teams": [("dudes", "Pasadena")]},
    # the dude moves team; a late, older event of walter's changes nothing
    {"people": [(1, "the dude", "pins", 7, False), (3, "walt", "dudes", 0, False)], "teams": []},
    # donny comes back
    {"people": [(2, "donny", "dudes", 8, False)], "teams": []},
]


def model(people: list[tuple], teams: list[tuple]) -> tuple[Counter, Counter]:
    """The silver and gold rows the queries give over these rows."""
    latest: dict[int, tuple] = {}
    for row in people:
        if row[0] not in latest or row[3] > latest[row[0]][3]:
            latest[row[0]] = row
    silver = Counter((i, n, t, s) for i, n, t, s, churned in latest.values() if not churned)
    city = dict(teams)
    gold = Counter()
    for (_, _, team, _), n in silver.items():
        gold[city.get(team)] += n
    return silver, Counter({(c, n) for c, n in gold.items()})


def _rows(uri: str, columns: list[str], storage_options) -> Counter:
    table = ctfile.open_table(uri, storage_options=storage_options).to_arrow()
    return Counter(tuple(r[c] for c in columns) for r in table.to_pylist())


def run_pipeline(spark, root: str, *, storage_options: dict | None = None) -> list[dict]:
    """Build the pipeline under ``root`` and feed it :data:`BATCHES`; after
    each, one scheduler cycle an hour later (so gold is due, silver pulled
    along as its ``downstream`` upstream) brings both to the model. Returns,
    per batch, the scheduler's refreshes (uri -> (outcome, action))."""
    from ctfile.spark import derived

    opts = storage_options
    root = root.rstrip("/")
    bronze = ctfile.create_table(f"{root}/bronze_people", PEOPLE, properties={"ctfile.appendOnly": "true"},
                                 storage_options=opts)
    teams = ctfile.create_table(f"{root}/teams", TEAMS, storage_options=opts)
    silver = derived.create(spark, f"{root}/silver_people", SILVER, sources={"bronze": bronze.uri},
                            refresh_mode="incremental", target_lag="downstream", storage_options=opts)
    gold = derived.create(spark, f"{root}/gold_cities", GOLD, sources={"s": silver.uri, "t": teams.uri},
                          refresh_mode="incremental", target_lag="1 minute", storage_options=opts)
    seen, people, dims = [], [], []
    for batch in BATCHES:
        if batch["people"]:
            bronze.insert(pa.Table.from_pylist([dict(zip(PEOPLE.names, r)) for r in batch["people"]], schema=PEOPLE))
        if batch["teams"]:
            teams.insert(pa.Table.from_pylist([dict(zip(TEAMS.names, r)) for r in batch["teams"]], schema=TEAMS))
        people += batch["people"]
        dims += batch["teams"]
        report = derived.run(spark, [silver.uri, gold.uri], once=True, storage_options=opts,
                             clock=lambda: time.time() + 3600, handle_signals=False)
        done = {r.uri: (r.outcome.value, r.action.value if r.action is not None else None)
                for r in report.refreshes()}
        assert all(outcome == "refreshed" and action == "INCREMENTAL" for outcome, action in done.values()), done
        assert set(done) == {silver.uri, gold.uri}, done
        want_silver, want_gold = model(people, dims)
        assert _rows(silver.uri, ["id", "name", "team", "seq"], opts) == want_silver
        assert _rows(gold.uri, ["city", "people"], opts) == want_gold
        seen.append(done)
    quiet = derived.run(spark, [silver.uri, gold.uri], once=True, storage_options=opts,
                        clock=lambda: time.time() + 7200, handle_signals=False)
    assert not [r for r in quiet.refreshes() if r.outcome.value == "refreshed"], quiet  # nothing changed
    for uri in (silver.uri, gold.uri):
        assert ctfile.verify_table(uri, all_versions=True, storage_options=opts).healthy
    return seen
