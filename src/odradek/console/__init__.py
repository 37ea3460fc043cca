"""The web console (``odradek console``): brokers, topics, groups, messages, chaos reports."""
