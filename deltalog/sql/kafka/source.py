"""The data source class Spark registers as ``format("deltalog")``."""


from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
)
from pyspark.sql.types import (
    StructType,
)

from deltalog.errors import InvalidArgumentError
from deltalog.sql.kafka.batch import DeltalogBatchReader
from deltalog.sql.kafka.options import SOURCE_NAME, Options
from deltalog.sql.kafka.reads import kafka_schema
from deltalog.sql.kafka.streaming import DeltalogStreamReader
from deltalog.sql.kafka.writes import DeltalogBatchWriter, DeltalogStreamWriter

# -- the data source -----------------------------------------------------------------------------------------


class DeltalogDataSource(DataSource):
    """``format("deltalog")``: see the module docstring."""

    #: Tasks a read aims for when option ``minPartitions`` is not given: the session's default parallelism,
    #: set by :func:`register` on the class it registers (the planner runs in a Python worker that cannot
    #: ask the session).
    parallelism: int = 1

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return kafka_schema(Options(self.options).include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return DeltalogBatchReader(Options(self.options), schema, self.parallelism)

    def streamReader(self, schema: StructType) -> DeltalogStreamReader:  # noqa: N802
        return DeltalogStreamReader(Options(self.options), schema, self.parallelism)

    def writer(self, schema: StructType, overwrite: bool) -> DeltalogBatchWriter:
        if overwrite:
            raise InvalidArgumentError("Save mode overwrite not allowed for deltalog (a log is appended to). "
                                       "The allowed save mode is append (Spark refuses its default, errorifexists, for "
                                       "Python data sources).")
        return DeltalogBatchWriter(Options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DeltalogStreamWriter:  # noqa: N802
        return DeltalogStreamWriter(Options(self.options), schema)




def session_source(parallelism: int) -> type[DeltalogDataSource]:
    """:class:`DeltalogDataSource` aiming reads at ``parallelism`` tasks. A subclass its module does not name,
    so cloudpickle sends it to the planner's Python worker by value, attribute included (the class itself
    goes by reference: its attributes as set here would not)."""
    return type("DeltalogDataSource", (DeltalogDataSource,),
                {"parallelism": max(int(parallelism), 1), "__module__": __name__,
                 "__qualname__": "session_source.<locals>.DeltalogDataSource"})

