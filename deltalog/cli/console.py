"""What the console tools (``produce``, ``consume``) share: Kafka's spellings of their options.

``deltalog produce TOPIC`` and ``deltalog consume TOPIC`` also take ``--topic TOPIC`` as Kafka's console tools
do, and ``--property KEY=VALUE`` for the formatter / line reader (:mod:`deltalog.cli.kafka_text`).
"""

from __future__ import annotations

import argparse

from deltalog.cli.kafka_text import kafka_property
from deltalog.errors import UsageError


def add_topic_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topic", metavar="TOPIC", nargs="?", help="the topic (or --topic TOPIC)")
    parser.add_argument("--topic", dest="topic_option", metavar="TOPIC", help="the topic, as Kafka's tools take it")


def topic_of(args: argparse.Namespace) -> str:
    """The topic given as TOPIC or --topic TOPIC (exactly one of them)."""
    given = [t for t in (args.topic, args.topic_option) if t is not None]
    if not given:
        raise UsageError('Missing required argument "[topic]": give it as TOPIC or --topic TOPIC')
    if len(given) > 1:
        raise UsageError("give the topic once, as TOPIC or as --topic TOPIC, not both")
    return given[0]


def add_property_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--property", dest="properties", metavar="KEY=VALUE", type=kafka_property, action="append",
                        default=[], help=help_text)
