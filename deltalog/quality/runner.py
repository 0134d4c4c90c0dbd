"""Running suites in an ephemeral Great Expectations context: the runner :mod:`deltalog.quality.check` uses by
default, and the base of :class:`deltalog.quality.ge_context.ContextRunner` (a user's own context). Apart from
``check`` so that both import it and neither imports the other."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import great_expectations as gx
from great_expectations.data_context.types.base import ProgressBarsConfig

from deltalog.quality.suites import SAMPLE_LIMIT, Guarantee
from deltalog.spark import connect_mode, functions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

@dataclass(frozen=True)
class ExpectationOutcome:
    """One expectation's verdict, with a sample of the offending records."""

    name: str
    description: str
    success: bool
    unexpected_count: int
    sample: tuple[dict[str, Any], ...] = ()
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "success": self.success,
                "unexpected_count": self.unexpected_count, "sample": list(self.sample), "error": self.error}

def _context(docs_dir: str | None) -> Any:
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    if docs_dir is not None:
        context.add_data_docs_site("deltalog", {
            "class_name": "SiteBuilder",
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": docs_dir},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        })
    return context


def _outcome(g: Guarantee | None, r: Any) -> ExpectationOutcome:
    """deltalog's verdict on one expectation result; ``g`` is None for an expectation a user added to a saved
    suite (named by its type and column)."""
    config = r.expectation_config
    if g is None:
        kwargs = config.kwargs or {}
        name = config.type + (f"({kwargs['column']})" if kwargs.get("column") else "")
        g = Guarantee(name, getattr(config, "description", None) or name, None)
    info = r.exception_info or {}
    if info.get("raised_exception"):
        return ExpectationOutcome(g.name, g.description, False, 0, (), str(info.get("exception_message")))
    res = r.result or {}
    if config.type == "unexpected_rows_expectation":
        count = int(res.get("observed_value") or 0)
        sample = tuple((res.get("details") or {}).get("unexpected_rows") or ())
    else:
        count = int(res.get("unexpected_count") or 0)
        index = res.get("partial_unexpected_index_list")
        sample = tuple(index) if index else tuple({"value": v} for v in res.get("partial_unexpected_list") or ())
    return ExpectationOutcome(g.name, g.description, bool(r.success), count, sample[:SAMPLE_LIMIT])


#: The result format of deltalog's runs: every unexpected row counted, a sample of them named by offset.
RESULT_FORMAT = {"result_format": "COMPLETE", "unexpected_index_column_names": ["offset"],
                 "partial_unexpected_count": SAMPLE_LIMIT}


class _Runner:
    """Validates DataFrames against lists of guarantees in one ephemeral Great Expectations context: a suite and
    a validation definition per run, built in code, gone with the process."""

    def __init__(self, docs_dir: str | None) -> None:
        self.context = _context(docs_dir)
        self.source = self.context.data_sources.add_spark("deltalog", persist=False)
        self.validations: list[dict[str, Any]] = []

    def run(self, topic: str, kind: str, name: str, guarantees: Sequence[Guarantee], df: DataFrame,
            parameters: Mapping[str, int | None]) -> tuple[ExpectationOutcome, ...]:
        """Validate ``df`` (with the suite's ``parameters`` as columns) against ``guarantees``; ``kind`` is
        ``partition`` or ``clean``, ``name`` this run's name (topic, partition, version)."""
        df = _with_parameters(df, parameters)
        # Great Expectations runs its SQL expectations (a temporary view of the batch) on its execution engine's
        # session, which it otherwise looks up itself, a Spark Connect default session first: in a process that
        # holds both kinds it would query another session's view. It is the DataFrame's own session.
        self.source.get_execution_engine().spark = df.sparkSession
        # Every expectation scans the batch; the suite's data is read from the files once and kept in memory.
        cached = df.persist()
        try:
            # Great Expectations builds its columns with pyspark.sql.functions: Connect ones only in Connect mode.
            with connect_mode(df.sparkSession):
                results = self._validate(topic, kind, name, guarantees, cached)
        finally:
            cached.unpersist()
        by_name = {g.name: g for g in guarantees}
        outcomes = []
        for result in results:
            self.validations.append(result.to_json_dict())
            for r in result.results:
                own = (r.expectation_config.meta or {}).get("deltalog")
                outcomes.append(_outcome(by_name.get(own) if isinstance(own, str) else None, r))
        return tuple(outcomes)

    def _validate(self, topic: str, kind: str, name: str, guarantees: Sequence[Guarantee], df: DataFrame
                  ) -> list[Any]:
        asset = self.source.add_dataframe_asset(name)
        batch_definition = asset.add_batch_definition_whole_dataframe("whole")
        suite = self.context.suites.add(gx.ExpectationSuite(name=name, expectations=[g.expectation for g in guarantees]))
        vd = self.context.validation_definitions.add(gx.ValidationDefinition(name=name, data=batch_definition,
                                                                              suite=suite))
        return [vd.run(batch_parameters={"dataframe": df}, result_format=RESULT_FORMAT)]

    def data_docs(self, *, build: bool = False) -> str | None:
        """The data docs index a user's context built (the ephemeral mode builds its own site below)."""
        return None


def _with_parameters(df: DataFrame, parameters: Mapping[str, int | None]) -> DataFrame:
    """``df`` with each of the suite's figures as a column of its own (see :mod:`deltalog.quality.suites`)."""
    sf = functions(df.sparkSession)
    return df.select("*", *[sf.lit(v).cast("long").alias(k) for k, v in parameters.items()])
