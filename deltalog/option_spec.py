"""One declarative pattern for every table of options deltalog parses: Kafka's ``ConfigDef``.

Kafka declares each config once (``ConfigDef.define(name, type, default, validator, importance, doc)``) and
parses a whole map against the table, refusing unknown names; Spark's data sources take a case-insensitive map
of options (``CaseInsensitiveMap``). deltalog has three such tables: the topic and store configs
(:mod:`deltalog.config`, dotted Kafka names), the cleaner job's config file (:mod:`deltalog.jobs.cleaner_job`) and
the options of ``format("deltalog")`` (:mod:`deltalog.sql.kafka.options`). Each is a tuple of :class:`OptionSpec`
(name and aliases, the attribute it fills, its parser with its validation, its default, its doc) parsed by
:func:`parse_options`; a bad value raises what the parser raises, naming the option, the value and what is
allowed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: ``parse(name, raw) -> value``: the name as the user gave it (for the message), the raw value.
Parser = Callable[[str, Any], Any]


@dataclass(frozen=True)
class OptionSpec:
    """One documented option: its name (and the other names it is accepted by), the attribute it fills, the
    parser that converts and validates a given value, the default when it is not given, and its doc."""

    name: str
    attr: str
    parse: Parser
    default: Any
    doc: str
    aliases: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    def render(self, value: Any) -> str:
        """The value as a string (Delta table properties, ``describe``, the docs)."""
        if isinstance(value, tuple):
            return ",".join(value)
        if isinstance(value, bool):
            return "true" if value else "false"
        if value is None:  # an optional key not set (a topic key its store-wide key decides)
            return ""
        return str(value)


def by_name(specs: Iterable[OptionSpec], *, case_insensitive: bool = False) -> dict[str, OptionSpec]:
    """Every name and alias of ``specs`` -> its spec (lower-cased names when ``case_insensitive``)."""
    out = {}
    for spec in specs:
        for n in spec.names:
            out[n.lower() if case_insensitive else n] = spec
    return out


def parse_options(specs: Iterable[OptionSpec], given: Mapping[str, Any], *, case_insensitive: bool = False,
                  unknown: Callable[[list[str]], Exception] | None = None, defaults: bool = False) -> dict[str, Any]:
    """``given`` parsed against ``specs``: attribute -> value for each option given (and, with ``defaults``, each
    one not given, at its default). An option given under two of its names takes the first name's value in
    declaration order. Names no spec has: ``unknown(sorted names)`` is raised, or, without ``unknown``, they are
    left to the caller."""
    specs = tuple(specs)
    table = by_name(specs, case_insensitive=case_insensitive)
    fold = (lambda n: n.lower()) if case_insensitive else (lambda n: n)
    folded = {fold(str(k)): (str(k), v) for k, v in given.items()}
    if unknown is not None:
        extra = sorted(orig for k, (orig, _) in folded.items() if k not in table)
        if extra:
            raise unknown(extra)
    out: dict[str, Any] = {}
    for spec in specs:
        hit = next((folded[fold(n)] for n in spec.names if fold(n) in folded), None)
        if hit is not None:  # a case-insensitive map (Spark's options) names the option as declared
            out[spec.attr] = spec.parse(spec.name if case_insensitive else hit[0], hit[1])
        elif defaults:
            out[spec.attr] = spec.default
    return out
