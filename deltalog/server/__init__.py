"""A Kafka endpoint on a store: Kafka's wire protocol served by deltalog (``deltalog serve``)."""
