"""Consumer groups, the client side: a consumer with Kafka's Python names (kafka-python's and confluent-kafka's) and
the admin calls on groups. See :mod:`deltalog.groups.consumer`, :mod:`deltalog.groups.confluent_consumer` and
:mod:`deltalog.groups.admin`; the committed offsets they read and write live with the group coordinator
(:mod:`deltalog.coordinator.group.offsets_topic`), the reads in :mod:`deltalog.log.fetch`."""
