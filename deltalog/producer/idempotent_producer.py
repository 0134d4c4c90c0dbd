"""Deprecated: this module is :mod:`deltalog.producer.kafka_producer` now (``KafkaProducer``, the producer
``store.producer(...)`` returns, idempotent or not). Each name still works, and warns."""

from __future__ import annotations

from typing import Any

from deltalog.producer.producer import moved


def __getattr__(name: str) -> Any:
    return moved(__name__, name, "deltalog.producer.kafka_producer", {})
