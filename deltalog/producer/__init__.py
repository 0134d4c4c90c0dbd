"""Kafka's producer clients: what ``org.apache.kafka.clients.producer`` (and kafka-python's ``kafka/producer/``) hold.

``KafkaProducer``, the producer ``store.producer(...)`` returns, with idempotence and transactions
(:mod:`~deltalog.producer.kafka_producer`, as kafka-python's ``kafka/producer/kafka.py``); the router under it and
under ``store.produce`` that places each record on a partition and appends one Delta commit per partition
(:mod:`~deltalog.producer.router`: ``PartitionRouter``, ``RecordMetadata``, ``ProduceResult``); Kafka's partitioner
(:mod:`~deltalog.producer.partitioner`: murmur2, the sticky partitioner) and the shapes of kafka-python's and
confluent-kafka's clients (:mod:`~deltalog.producer.client_shapes`). ``deltalog.producer.producer`` and
``deltalog.producer.idempotent_producer``, these modules' earlier names, still work and warn.

These are clients of the log, as Kafka's clients are of the broker's storage: they import :mod:`deltalog.log` and
:mod:`deltalog.groups` (a transaction's offsets go to ``__consumer_offsets``), and nothing below imports them. What
the log keeps about producers (``ProducerStateManager``'s state, producer ids, the transaction coordinator) stays in
:mod:`deltalog.log`, as Kafka keeps ``ProducerStateManager`` in its storage module. This file imports nothing.
"""
