"""The configuration tables behind ``odradek.configdefs``, one module per area.

``definitions`` holds what a table entry is (``ConfigDef``, its types, validators and
Kafka's parsing); ``topic`` the topic configs (Kafka's LogConfig); ``broker_*`` the broker
properties by area (server, log, replication, coordinators, extras, security). Each
setting is declared once, in its area's module; ``odradek.configdefs`` assembles the
tables (in this order), applies the Support column and is what the rest of Odradek
imports.
"""
