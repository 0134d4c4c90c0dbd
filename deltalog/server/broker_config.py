"""The broker configs of one endpoint that are not about its listener's security or its limits: whether Metadata
creates a topic a client asks for (``auto.create.topics.enable``, ``num.partitions``), and every config the endpoint
was started with, which DescribeConfigs on the broker answers (Kafka's ``KafkaConfig``, ``ConfigResource.Type.BROKER``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from deltalog.errors import InvalidConfigError
from deltalog.server import limits

#: Kafka's ``ConfigEntry.ConfigSource``: a value from the server's file, and a default.
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

#: The keys read here.
KEYS = ("auto.create.topics.enable", "num.partitions")


@dataclass(frozen=True)
class BrokerConfig:
    #: ``auto.create.topics.enable`` (Kafka's default true): Metadata creates an unknown topic when the client allows
    #: it (``allow.auto.create.topics``, Metadata v4+; always before v4, as Kafka).
    auto_create_topics_enable: bool = True
    #: ``num.partitions``: the partitions of a topic created that way (or by CreateTopics with -1).
    num_partitions: int = 1
    #: Every config given (``server.properties`` and overrides), for DescribeConfigs.
    properties: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> BrokerConfig:
        """Raises :class:`InvalidConfigError` naming the key for a value that is not one."""
        auto = (props.get("auto.create.topics.enable") or "true").strip().lower()
        if auto not in ("true", "false"):
            raise InvalidConfigError(f"auto.create.topics.enable={auto!r} must be true or false")
        n = (props.get("num.partitions") or "1").strip()
        if not n.isdigit() or int(n) <= 0:
            raise InvalidConfigError(f"num.partitions={n!r} must be a positive integer (default 1)")
        return cls(auto == "true", int(n), dict(props))

    def described(self) -> list[tuple[str, str | None, int, bool]]:
        """(name, value, source, sensitive) of each config, sorted: the ones given (passwords, keys and JAAS configs
        hidden, as Kafka hides its password configs), then the defaults of those deltalog reads that were not."""
        defaults = {"auto.create.topics.enable": "true", "num.partitions": "1",
                    **{limits.KEYS[f]: str(getattr(limits.ConnectionLimits(), f)) for f in limits.KEYS}}
        out = []
        for name, value in self.properties.items():
            sensitive = any(w in name for w in ("password", "jaas.config", "keystore.key"))
            out.append((name, None if sensitive else value, STATIC_BROKER_CONFIG, sensitive))
        out += [(k, v, DEFAULT_CONFIG, False) for k, v in defaults.items() if k not in self.properties]
        return sorted(out)


__all__ = ["BrokerConfig", "DEFAULT_CONFIG", "KEYS", "STATIC_BROKER_CONFIG"]
