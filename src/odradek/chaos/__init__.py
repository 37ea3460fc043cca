"""Fault injection, workload histories, a Spark loss checker and the documents' failure
scenarios (issue 6; REQ-R4-R10, R15, R18-R22 and the eight network-partition scenarios).

* ``faults``    -- signals, iptables partitions / lossy links, tc htb slow links (root).
* ``workload``  -- producers / consumers / metadata poller that record Parquet histories.
* ``checker``   -- the PySpark job computing loss, duplicates, order, divergence.
* ``scenarios`` -- named runnable scenarios with the outcome the documents predict.
"""

from odradek.chaos.faults import FaultsUnavailable

__all__ = ["FaultsUnavailable"]
