"""The options of ``format("deltalog")``: Spark's Kafka source options, parsed and checked once on the driver
side (plain data: pickled to the tasks)."""


from __future__ import annotations

import json
import re
from collections.abc import Mapping

import pyarrow as pa

from deltalog.errors import DeltalogError, InvalidArgumentError
from deltalog.log import transactions
from deltalog.sql.source import STORAGE_OPTION_PREFIX
from deltalog.storage import Storage

SOURCE_NAME = "deltalog"
#: Kafka's ``ListOffsets`` sentinels in ``startingOffsets``/``endingOffsets`` JSON.
EARLIEST = -2
LATEST = -1
#: The ``headers`` column of a staged or read record (Kafka's record headers).
HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())]))



class DataLossError(DeltalogError):
    """Offsets a read wanted are gone (retention or DeleteRecords removed them) and ``failOnDataLoss`` is true."""


# -- options -----------------------------------------------------------------------------------------------


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise InvalidArgumentError(f"option {name!r} must be 'true' or 'false', not {raw!r}")
    return text == "true"


class Options:
    """The options of one ``format("deltalog")`` read or write, parsed and checked once (plain data: it is
    pickled to the tasks)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        opts = {k.lower(): v for k, v in options.items()}
        root = opts.get("store") or opts.get("path")
        if not root:
            raise InvalidArgumentError(
                "format('deltalog') needs the store: option('store', <uri>) or load(<uri>) / save(<uri>)")
        self.root: str = root
        self.storage_options = {k[len(STORAGE_OPTION_PREFIX):]: v for k, v in opts.items()
                                if k.startswith(STORAGE_OPTION_PREFIX)}
        strategies = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k) is not None]
        self.strategy = strategies[0] if len(strategies) == 1 else None
        self.strategy_error = None
        if len(strategies) > 1:
            self.strategy_error = ("only one of the options subscribe, subscribePattern, assign can be given; got "
                                   + ", ".join(strategies))
        elif not strategies:
            self.strategy_error = "one of the options subscribe, subscribePattern, assign is required to read"
        self.subscribe: list[str] = []
        self.pattern: str | None = None
        self.assign: dict[str, list[int]] = {}
        if self.strategy == "subscribe":
            self.subscribe = [t.strip() for t in opts["subscribe"].split(",") if t.strip()]
            if not self.subscribe:
                raise InvalidArgumentError(f"no topics to subscribe to in option 'subscribe': {opts['subscribe']!r}")
        elif self.strategy == "subscribepattern":
            self.pattern = opts["subscribepattern"].strip()
            if not self.pattern:
                raise InvalidArgumentError("option 'subscribePattern' is empty")
            try:
                re.compile(self.pattern)
            except re.error as e:
                raise InvalidArgumentError(f"option 'subscribePattern' is not a regular expression: {e}") from None
        elif self.strategy == "assign":
            self.assign = _parse_assign(opts["assign"])
        self.starting = _parse_offsets("startingOffsets", opts.get("startingoffsets"))
        self.ending = _parse_offsets("endingOffsets", opts.get("endingoffsets"))
        self.fail_on_data_loss = _bool(opts, "failondataloss", True)
        self.include_headers = _bool(opts, "includeheaders", False)
        self.push_filters = _bool(opts, "pushfilters", False)
        level = opts.get("kafka.isolation.level") or opts.get("isolation.level") or opts.get("isolationlevel")
        self.isolation_level = transactions.isolation_level(level, transactions.READ_COMMITTED)
        self.mode = (opts.get("mode") or "log").strip().lower()
        if self.mode not in ("log", "current"):
            raise InvalidArgumentError(f"option 'mode' must be 'log' (every record) or 'current' (the latest "
                                       f"record per key), not {opts.get('mode')!r}")
        raw_max = opts.get("maxoffsetspertrigger")
        self.max_offsets_per_trigger: int | None = None
        if raw_max is not None:
            try:
                self.max_offsets_per_trigger = int(raw_max)
            except ValueError:
                self.max_offsets_per_trigger = 0
            if self.max_offsets_per_trigger <= 0:
                raise InvalidArgumentError(f"option 'maxOffsetsPerTrigger' must be a positive integer, not {raw_max!r}")
        raw_min = opts.get("minpartitions")
        self.min_partitions: int | None = None
        if raw_min is not None:
            try:
                self.min_partitions = int(raw_min)
            except ValueError:
                self.min_partitions = 0
            if self.min_partitions <= 0:
                raise InvalidArgumentError(f"option 'minPartitions' must be a positive integer, not {raw_min!r}")
        self.topic = opts.get("topic")
        self.checkpoint = opts.get("checkpointlocation")
        self.transactional_id = opts.get("transactional.id") or opts.get("transactionalid")

    def require_strategy(self) -> None:
        if self.strategy_error:
            raise InvalidArgumentError(self.strategy_error)

    def storage(self) -> Storage:
        return Storage(self.root, self.storage_options or None)


def _parse_assign(text: str) -> dict[str, list[int]]:
    example = '{"topicA":[0,1],"topicB":[2,4]}'
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if (not isinstance(value, dict) or not value
            or not all(isinstance(ps, list) and all(isinstance(p, int) and not isinstance(p, bool) and p >= 0
                                                    for p in ps) for ps in value.values())):
        raise InvalidArgumentError(f"option 'assign': expected e.g. {example}, got {text!r}")
    return {str(t): sorted(set(ps)) for t, ps in value.items()}


def _parse_offsets(name: str, text: str | None) -> str | dict[str, dict[int, int]] | None:
    """``earliest``, ``latest`` or ``{"topic": {"0": 23, "1": -1}}`` (-2 earliest, -1 latest)."""
    if text is None:
        return None
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        return word
    example = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
    try:
        value = json.loads(text)
        if not isinstance(value, dict):
            raise ValueError
        out: dict[str, dict[int, int]] = {}
        for topic, parts in value.items():
            if not isinstance(parts, dict):
                raise ValueError
            out[str(topic)] = {int(p): int(o) for p, o in parts.items()}
            if any(o < EARLIEST or isinstance(o, bool) for o in out[str(topic)].values()):
                raise ValueError
        return out
    except (ValueError, TypeError):
        raise InvalidArgumentError(f"option {name!r}: 'earliest', 'latest' or JSON such as {example} (-2: earliest, "
                                   f"-1: latest), got {text!r}") from None


