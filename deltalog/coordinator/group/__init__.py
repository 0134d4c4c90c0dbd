"""Kafka's group coordinator (the ``group-coordinator`` module): :mod:`.offsets_topic` (``__consumer_offsets``,
committed offsets), :mod:`.group_coordinator` (the classic ``GroupCoordinator``: JoinGroup, SyncGroup, Heartbeat,
LeaveGroup) and :mod:`.group_metadata` (``GroupMetadataManager.storeGroup`` / ``loadGroupsForPartition``). The
consumer clients that use it live in :mod:`deltalog.groups`. This file imports nothing."""
