"""The three-stage pipeline of ``bench_derived.py`` (issue 30's benchmark):
the benchmark's source as bronze, a deduplicated silver derived table (the
top event by amount of each block of 10 ids, a ``ROW_NUMBER`` window in a
filtering subquery) and a gold derived table over it (revenue and events
per region and event type, through a ``LEFT JOIN`` with the dimension),
both refreshed incrementally. The derived tables live at fixed paths,
since gold's binding names silver's URI: each run puts back the copies
taken after their creation (not timed) and times ``refresh_all`` of the
two. Against it:

* ``recompute``: Spark running the two queries in turn over bronze, each
  written as Parquet (gold reading silver's Parquet), what a user runs
  without derived tables;
* ``rewrite``: Spark reading both derived tables' rows and writing them
  back as Parquet, the copy-on-write floor of a refresh whose change lands
  in every partition of silver (the change picks events at random).

* ``pipelines`` (``bench_derived.py --sides ...,pipelines``): the chain as
  one Spark Declarative Pipelines project (``_pipelines``), a temporary
  view per ctfile table (``bronze``, ``dim``) and two materialized views
  (:func:`sdp_views`: silver, the same query over bronze; gold, the same
  query over the silver view and the dimension), both recomputed in full
  by each update. Its check (:meth:`Chain.gold_check`): the gold view holds
  exactly the rows Spark computes running the two queries over the ctfile
  tables.

The other sides of the benchmark have no meaning for a chain and are not
measured for it (``None``).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable

import sqlglot
from sqlglot import exp

SILVER = ("SELECT id, country, event_type, amount FROM (SELECT *, ROW_NUMBER() OVER "
          "(PARTITION BY id DIV 10 ORDER BY amount DESC, id) AS rn FROM bronze) AS t WHERE rn = 1")
GOLD = ("SELECT d.region, s.event_type, count(*) AS n, sum(s.amount) AS revenue FROM s "
        "LEFT JOIN d ON s.country = d.country GROUP BY d.region, s.event_type")


def sdp_views(name: str) -> dict[str, str]:
    """The chain's materialized views in a pipelines project named
    ``name``: ``<name>_silver`` (:data:`SILVER` over the temporary view
    ``bronze``) and ``<name>`` (:data:`GOLD` reading that view as ``s`` and
    the temporary view ``dim`` as ``d``); view name -> SQL, in dependency
    order.

    >>> views = sdp_views("pipeline_f0")
    >>> list(views)
    ['pipeline_f0_silver', 'pipeline_f0']
    >>> views["pipeline_f0"].split(" FROM ")[1]
    'pipeline_f0_silver AS s LEFT JOIN dim AS d ON s.country = d.country GROUP BY d.region, s.event_type'
    """
    return {f"{name}_silver": SILVER, name: _renamed(GOLD, {"s": f"{name}_silver", "d": "dim"})}


def _renamed(sql: str, names: dict[str, str]) -> str:
    """``sql`` reading each table of ``names`` under its new name, aliased
    by its old one (so column references keep resolving)."""
    tree = sqlglot.parse_one(sql, dialect="spark")
    for table in tree.find_all(exp.Table):
        if table.name in names:
            if not table.alias:
                table.set("alias", exp.TableAlias(this=exp.to_identifier(table.name)))
            table.set("this", exp.to_identifier(names[table.name]))
    return tree.sql(dialect="spark")


class Chain:
    """The pipeline over ``bronze`` and ``dim`` (URIs) under ``root``;
    ``timed`` times a callable (the benchmark's, which quiesces first)."""

    def __init__(self, spark: Any, root: Path, bronze: str, dim: str, timed: Callable[[Callable], float]):
        self.spark, self.root, self.bronze, self.dim, self.timed = spark, root, bronze, dim, timed
        self.paths = {"silver": root / "pipeline-silver", "gold": root / "pipeline-gold"}
        self.pristine = root / "pipeline-pristine"

    def create(self) -> None:
        """Both derived tables, refreshed at creation; a copy of each."""
        from ctfile.spark import derived

        derived.create(self.spark, str(self.paths["silver"]), SILVER, sources={"bronze": self.bronze},
                       refresh_mode="incremental")
        derived.create(self.spark, str(self.paths["gold"]), GOLD,
                       sources={"s": str(self.paths["silver"]), "d": self.dim}, refresh_mode="incremental")
        for name, path in self.paths.items():
            shutil.copytree(path, self.pristine / name)

    def sdp_sources(self) -> dict[str, str]:
        """The pipelines project's temporary views: name -> ctfile table URI."""
        return {"bronze": self.bronze, "dim": self.dim}

    def gold_check(self, name: str) -> tuple[str, list[list]]:
        """The pipelines side's check of project ``name``: a query over its
        gold view and the rows it must give, gold as Spark computes it now
        from the ctfile tables (silver's query over bronze, then gold's
        over that and the dimension; untimed)."""
        from ctfile.spark import CtfileTable

        CtfileTable.for_path(self.spark, self.bronze).to_df().createOrReplaceTempView("bronze")
        CtfileTable.for_path(self.spark, self.dim).to_df().createOrReplaceTempView("d")
        self.spark.sql(SILVER).createOrReplaceTempView("s")
        gold = self.spark.sql(GOLD)
        return f"SELECT {', '.join(gold.columns)} FROM default.{name}", [list(r) for r in gold.collect()]

    def side(self, name: str, actions: dict[str, str], key: str) -> float | None:
        """Seconds of side ``name`` (None: not measured for the chain);
        the refreshes' actions go to ``actions[key]``."""
        if name == "incremental":
            return self._incremental(actions, key)
        if name == "recompute":
            return self._recompute()
        if name == "rewrite":
            return self._rewrite()
        return None

    def _incremental(self, actions: dict[str, str], key: str) -> float:
        from ctfile.spark import derived

        for name, path in self.paths.items():
            shutil.rmtree(path)
            shutil.copytree(self.pristine / name, path)
        tables = [derived.open(self.spark, str(self.paths[n])) for n in ("silver", "gold")]
        box: dict = {}
        secs = self.timed(lambda: box.setdefault("r", derived.refresh_all(self.spark, tables)))
        actions[key] = "; ".join(f"{r.action.value}: {r.reason}" for r in box["r"])
        return secs

    def _recompute(self) -> float:
        from ctfile.spark import CtfileTable

        out = self.root / "pipeline-recompute"
        shutil.rmtree(out, ignore_errors=True)
        CtfileTable.for_path(self.spark, self.bronze).to_df().createOrReplaceTempView("bronze")
        CtfileTable.for_path(self.spark, self.dim).to_df().createOrReplaceTempView("d")

        def run() -> None:
            self.spark.sql(SILVER).write.mode("overwrite").parquet(str(out / "silver"))
            self.spark.read.parquet(str(out / "silver")).createOrReplaceTempView("s")
            self.spark.sql(GOLD).write.mode("overwrite").parquet(str(out / "gold"))

        return self.timed(run)

    def _rewrite(self) -> float:
        from ctfile.spark import CtfileTable

        out = self.root / "pipeline-rewrite"
        shutil.rmtree(out, ignore_errors=True)
        frames = {n: CtfileTable.for_path(self.spark, str(self.pristine / n)).to_df() for n in self.paths}
        return self.timed(lambda: [df.write.mode("overwrite").parquet(str(out / n)) for n, df in frames.items()])
