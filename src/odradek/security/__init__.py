"""Security foundations, sans-IO: principals, the ACL model and the authorizer's decision,
SASL server and client state machines (PLAIN, SCRAM via ``scramp``), SCRAM credential
codecs, JAAS option parsing and TLS contexts from Kafka's ``ssl.*`` settings.

Nothing here does network or ZooKeeper I/O: the server (``odradek.server.security_layer``)
feeds bytes in and acts on the decisions; the ZooKeeper side lives in
``odradek.zk.security_store``.
"""
