"""Deprecated: this module is :mod:`deltalog.producer.router` now, and its ``Producer`` is ``PartitionRouter``
(the router under ``store.produce`` and ``KafkaProducer``; the producer a user holds is
:class:`~deltalog.producer.kafka_producer.KafkaProducer`). Each name still works, and warns."""

from __future__ import annotations

from typing import Any


def moved(module: str, name: str, new_module: str, renamed: dict[str, str]) -> Any:
    """What ``module.name`` stands for now (``new_module``'s ``name``, or the name it was ``renamed`` to), after a
    ``DeprecationWarning`` naming where it lives; an ``AttributeError`` (as Python's own) for a name neither has."""
    import importlib
    import warnings

    new_name = renamed.get(name, name)
    target = importlib.import_module(new_module)
    if name.startswith("__") or not hasattr(target, new_name):
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warnings.warn(f"{module}.{name} is deprecated: use {new_module}.{new_name}", DeprecationWarning, stacklevel=3)
    return getattr(target, new_name)


def __getattr__(name: str) -> Any:
    return moved(__name__, name, "deltalog.producer.router", {"Producer": "PartitionRouter"})
