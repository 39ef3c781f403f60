"""The HTTP gateway: a Logbroker-style API over any Kafka-protocol cluster.

    sources ─HTTP/WebSocket─▶ gateway ─confluent-kafka (acks=all, idempotent)─▶ {dc}.{tenant}.{namespace}.{topic}

- `sessions`: write sessions keyed by source id with rising seqnos, one writer per source (generations in the
  store, release calls between gateways), recovery of the last seqno bounded by the seqno index, failover to an
  online partition; the exactly-once argument is in its docstring.
- `batch`: store / commit_request / commit with commit markers.
- `reader`: pull by partition and offset, read sessions with Kafka group offsets, push delivery.
- `store`: durable gateway state (SQLite, or ZooKeeper in `zk_store`) — never the broker's own metadata store.
- `kafka`: the producer, partition health, partition scanning, writes without a source.
- `server`: the aiohttp application; `openapi`: its OpenAPI document; `config`: settings.

Nothing here imports `logbus.broker` or `logbus.storage`.
"""
