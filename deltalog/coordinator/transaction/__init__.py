"""Kafka's transaction coordinator (``kafka.coordinator.transaction``): :mod:`.transaction_coordinator`
(``TransactionCoordinator``, ``TransactionMetadata``), :mod:`.producer_ids` (``ProducerIdManager``),
:mod:`.store_clock` (the coordinator's clock) and :mod:`.hanging` (``kafka-transactions.sh find-hanging`` /
``abort``). Per-partition producer state (``ProducerStateManager``) stays in the log
(:mod:`deltalog.log.producer_state`), as in Kafka. This file imports nothing."""
