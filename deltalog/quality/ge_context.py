"""The guarantee suites run in a team's own Great Expectations context (``store.check(topic, context=...)``,
``deltalog check --ge-context DIR``, the cleaner job's ``check.ge_context``).

The ephemeral mode (:class:`deltalog.quality.check._Runner`) builds every suite in code and forgets it; a team
that keeps a Great Expectations project wants the suites, the runs and the results in it. Given a context
(an ``AbstractDataContext``, or the directory of a file context: the project root holding ``gx/``, or ``gx/``
itself), every object lives there under a stable name per topic and kind of suite (``partition``, ``clean``,
``state`` for a topic with a state table):

=================================================  ==============================================================
Great Expectations object                          name
=================================================  ==============================================================
Spark data source (``data_sources.add_spark``)     ``deltalog``
dataframe asset, whole-dataframe batch definition  ``deltalog.<topic>.<kind>``, ``whole``
``ExpectationSuite``                               ``deltalog.<topic>.<kind>``
``ValidationDefinition``                           ``deltalog.<topic>.<kind>``
``Checkpoint``                                     ``deltalog.<topic>.<kind>``, with ``UpdateDataDocsAction``
=================================================  ==============================================================

Each is created on first use and used as it is saved afterwards: a user may edit a suite (add expectations,
change a ``mostly``) or a checkpoint (its actions: Slack, email, more data docs sites; its result format), and
the next check runs what they saved. deltalog's own expectations are found by their ``meta.deltalog`` name; one a
user added is reported under its type and column. A suite saved by an older deltalog keeps its expectations;
delete it to get the current ones. The suites read their figures (log end, cleaner checkpoint, the last clean's
time) from columns of the batch, so one saved suite holds for every snapshot (:mod:`deltalog.quality.suites`).

Each partition snapshot and each clean checked is one ``Checkpoint.run`` with the DataFrame as its batch
parameter and a ``RunIdentifier`` named ``<topic>-<partition>.<kind>-v<version>``: Great Expectations stores the
validation result in the context's validation results store and runs the checkpoint's actions (the data docs
site is rebuilt by ``UpdateDataDocsAction``). deltalog's own JSON result in the store is written as in the
ephemeral mode.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import great_expectations as gx
from great_expectations.checkpoint import UpdateDataDocsAction
from great_expectations.core.run_identifier import RunIdentifier
from great_expectations.data_context import AbstractDataContext

from deltalog.errors import InvalidArgumentError
from deltalog.quality.runner import RESULT_FORMAT, _Runner
from deltalog.quality.suites import Guarantee

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: The Spark data source deltalog's assets hang from in a user's context.
DATA_SOURCE = "deltalog"
BATCH_DEFINITION = "whole"
#: Great Expectations' file context configuration, inside its ``gx/`` directory.
CONFIG_FILE = "great_expectations.yml"


def stable_name(topic: str, kind: str) -> str:
    """The name of a topic's suite, validation definition, asset and checkpoint of one kind in a context."""
    return f"deltalog.{topic}.{kind}"


def open_context(context: Any) -> AbstractDataContext:
    """``context`` as a data context: one given is used as is; a directory is opened as a file context (the
    project root, where Great Expectations makes ``gx/`` if it is not there yet, or ``gx/`` itself)."""
    if isinstance(context, AbstractDataContext):
        return context
    if not isinstance(context, (str, os.PathLike)):
        raise InvalidArgumentError(
            f"context must be a Great Expectations data context or the directory of a file context, not "
            f"{type(context).__name__}"
        )
    path = Path(context).expanduser()
    if not path.is_dir():
        raise InvalidArgumentError(
            f"Great Expectations context directory {str(path)!r} does not exist; give an existing directory (a "
            f"project root, where gx/ is kept or made, or the gx/ directory holding {CONFIG_FILE})"
        )
    if (path / CONFIG_FILE).is_file():
        return gx.get_context(mode="file", context_root_dir=str(path))
    return gx.get_context(mode="file", project_root_dir=str(path))


class ContextRunner(_Runner):
    """Runs the suites as Checkpoints of a user's context (see the module docstring)."""

    def __init__(self, context: AbstractDataContext) -> None:
        self.context = context
        try:
            self.source = context.data_sources.get(DATA_SOURCE)
        except (KeyError, ValueError, LookupError):
            self.source = context.data_sources.add_spark(DATA_SOURCE)
        self.validations: list[dict[str, Any]] = []
        self.ran_docs = False

    def _validate(self, topic: str, kind: str, name: str, guarantees: Sequence[Guarantee], df: DataFrame
                  ) -> list[Any]:
        checkpoint = self._checkpoint(topic, kind, guarantees)
        result = checkpoint.run(batch_parameters={"dataframe": df}, run_id=RunIdentifier(run_name=name))
        self.ran_docs = self.ran_docs or any(isinstance(a, UpdateDataDocsAction) for a in checkpoint.actions)
        return list(result.run_results.values())

    def _checkpoint(self, topic: str, kind: str, guarantees: Sequence[Guarantee]) -> Any:
        name = stable_name(topic, kind)
        try:
            return self.context.checkpoints.get(name)
        except Exception:  # noqa: BLE001 - Great Expectations raises its own not-found errors per store backend
            pass
        return self.context.checkpoints.add(gx.Checkpoint(
            name=name, validation_definitions=[self._validation_definition(name, guarantees)],
            actions=[UpdateDataDocsAction(name="update_data_docs")], result_format=RESULT_FORMAT,
        ))

    def _validation_definition(self, name: str, guarantees: Sequence[Guarantee]) -> Any:
        try:
            return self.context.validation_definitions.get(name)
        except Exception:  # noqa: BLE001 - see above
            pass
        try:
            suite = self.context.suites.get(name)
        except Exception:  # noqa: BLE001 - see above
            suite = self.context.suites.add(gx.ExpectationSuite(name=name,
                                                                expectations=[g.expectation for g in guarantees]))
        try:
            asset = self.source.get_asset(name)
        except LookupError:
            asset = self.source.add_dataframe_asset(name)
        try:
            batch_definition = asset.get_batch_definition(BATCH_DEFINITION)
        except (KeyError, LookupError, ValueError):
            batch_definition = asset.add_batch_definition_whole_dataframe(BATCH_DEFINITION)
        return self.context.validation_definitions.add(gx.ValidationDefinition(name=name, data=batch_definition,
                                                                                suite=suite))

    def data_docs(self, *, build: bool = False) -> str | None:
        """The index of the context's first data docs site, once a checkpoint's action (or ``build``: the
        check's ``data_docs=True``) has built it."""
        if build:
            self.context.build_data_docs()
            self.ran_docs = True
        if not self.ran_docs:
            return None
        urls = [u.get("site_url") for u in self.context.get_docs_sites_urls()]
        return next((u for u in urls if u), None)
