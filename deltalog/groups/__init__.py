"""Consumer groups: committed offsets in the internal topic ``__consumer_offsets`` (Kafka's group coordinator) and a
consumer with Kafka's Python names. See :mod:`deltalog.groups.offsets_topic`, :mod:`deltalog.groups.coordinator` and
:mod:`deltalog.groups.consumer`."""
