"""The coordinators: what Kafka keeps apart from its storage (``kafka.coordinator.transaction``, the
``group-coordinator`` module), on top of the log.

* :mod:`deltalog.coordinator.transaction`: the transaction coordinator (one document per transactional id, by
  compare-and-swap), the producer-id counter, the store's clock the coordinator's timeouts run on, and the hanging
  transactions ``kafka-transactions.sh`` finds and aborts;
* :mod:`deltalog.coordinator.group`: ``__consumer_offsets`` (committed offsets), the classic group membership
  protocol the endpoint serves, and the group's membership record in ``__consumer_offsets``.

The two never import each other. Spark's Python workers never import this package; this file imports nothing.
"""
