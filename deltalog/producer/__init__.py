"""Kafka's producer clients: what ``org.apache.kafka.clients.producer`` (and kafka-python's ``kafka/producer/``) hold.

The router that places each record on a partition and appends one Delta commit per partition
(:mod:`~deltalog.producer.producer`: ``Producer``, ``RecordMetadata``, ``ProduceResult``), Kafka's partitioner
(:mod:`~deltalog.producer.partitioner`: murmur2, the sticky partitioner), ``KafkaProducer`` with idempotence and
transactions (:mod:`~deltalog.producer.idempotent_producer`) and the shapes of kafka-python's and confluent-kafka's
clients (:mod:`~deltalog.producer.client_shapes`).

These are clients of the log, as Kafka's clients are of the broker's storage: they import :mod:`deltalog.log` and
:mod:`deltalog.groups` (a transaction's offsets go to ``__consumer_offsets``), and nothing below imports them. What
the log keeps about producers (``ProducerStateManager``'s state, producer ids, the transaction coordinator) stays in
:mod:`deltalog.log`, as Kafka keeps ``ProducerStateManager`` in its storage module. This file imports nothing.
"""
