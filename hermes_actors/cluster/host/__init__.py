"""What runs in a shard host (a Ray worker): the runtime restricted to the shards the host holds, its shard
heartbeat, the resets and operator changes it applies as control rows of its shards' inbox, and the Ray actor."""
