"""A Confluent-compatible Schema Registry (REST API v1) storing its state in the
compacted ``_schemas`` topic of an Odradek cluster (docs/schema-registry.md)."""
