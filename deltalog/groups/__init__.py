"""Consumer groups: committed offsets in the internal topic ``__consumer_offsets`` (Kafka's group coordinator's log)
and a consumer with Kafka's Python names. See :mod:`deltalog.groups.offsets_topic`, :mod:`deltalog.groups.consumer`,
:mod:`deltalog.groups.admin` and :mod:`deltalog.groups.fetch`."""
