"""A small synchronous Kafka client on ``odradek.protocol.client_codec`` (issue 17).

* ``connection.KafkaConnection`` — one broker connection: pipelined requests, correlation
  ids checked in order, frames bounded by what the client asked for, socket timeouts.
* ``wire`` — hand-encoded Fetch v11 / Produce v8 (record batches stay views, never copied).
* ``cluster.ClusterClient`` — metadata, per-leader connections, ListOffsets, InitProducerId.
* ``fetcher.PartitionFetcher`` — reads one partition's offset range, following leader
  changes, with Kafka's read_committed filtering.
* ``producer.BatchProducer`` — idempotent, pipelined Produce of ready-made record batches.

Used by the Spark connector's columnar paths; the CLI and tests can move onto it.
"""
