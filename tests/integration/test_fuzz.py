"""A bounded fuzzing run in CI: mutated requests of every served API against a real broker.

The harness (odradek.fuzz) checks between batches that the broker process is alive,
answers ApiVersions on a fresh connection, stays under its memory ceiling and serves a
confluent-kafka produce/consume round trip. The long run is a documented command
(docs/security.md): ``python -m odradek.fuzz --minutes 30``.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from odradek.fuzz.__main__ import FUZZ_BROKER_CONFIG
from odradek.fuzz.harness import FuzzConfig, run_fuzz
from odradek.protocol.versions import SERVED, api_name

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

DURATION_S = float(os.environ.get("ODRADEK_FUZZ_SECONDS", "75"))


def test_fuzzing_keeps_the_broker_alive_bounded_and_serving(make_cluster: Any) -> None:
    c = make_cluster(1, broker_config=FUZZ_BROKER_CONFIG)
    b = c.broker(1)
    report = run_fuzz(
        FuzzConfig(
            bootstrap=b.address,
            broker_pid=b.pid,
            broker_log=b.log,
            duration_s=DURATION_S,
            seed=20,
            check_every_s=10,
            rss_ceiling_mb=400,
        )
    )
    summary = {
        k: v for k, v in report.as_dict().items() if k not in ("per_api", "last_requests_hex")
    }
    assert report.ok, summary
    assert report.failures == [], report.failures
    assert report.handler_failures == {}, report.handler_failures  # each one is a bug
    assert report.requests >= 10_000, summary
    assert report.checks >= DURATION_S // 10 - 1 and report.round_trips == report.checks
    assert set(report.per_api) == {api_name(k) for k in SERVED}
    assert all(s["sent"] >= 50 and s["answered"] >= 5 for s in report.per_api.values()), (
        report.per_api
    )
    assert report.answered > 0 and report.closed > 0
    assert c.broker_state(1) == "running"
