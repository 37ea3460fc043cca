"""The scenarios' expectations over checker metrics (pure; docs/requirements.md, P3)."""

from __future__ import annotations

import json

import pytest

from odradek.chaos.expectations import Metrics
from odradek.chaos.scenarios import SCENARIOS


def _p3_metrics(isrs_during_expired: list[list[int]]) -> Metrics:
    return {
        "leader_changes": 0,
        "leaders_seen": [1],
        "lost": 0,
        "divergent": 0,
        "dirty_reads": 0,
        "never_sent_read": 0,
        "final_isr": [1, 2, 3],
        "phases": {
            "expired": {
                "acks": 600,
                "errors": {},
                "isrs": sorted(json.dumps(i) for i in isrs_during_expired),
                "leaders": [1],
            }
        },
    }


def _p3_failed(m: Metrics) -> list[str]:
    (sc,) = [s for s in SCENARIOS if s.name == "p3-follower-cut-from-zk"]
    return [c.what for c in sc.expect(m) if not c.ok]


@pytest.mark.parametrize(
    "isrs",
    [
        [[1, 2, 3], [1, 3]],  # the poller read the state znode before the controller's write
        [[2, 1]],  # ... or after it (the run that failed the old check)
    ],
)
def test_p3_holds_whichever_side_of_the_controllers_write_the_phase_starts(
    isrs: list[list[int]],
) -> None:
    assert _p3_failed(_p3_metrics(isrs)) == []


def test_p3_fails_when_the_expired_follower_stays_in_the_isr() -> None:
    # KIP-841 / Kafka's onBrokerFailure: a broker without a session leaves the ISR.
    assert _p3_failed(_p3_metrics([[1, 2, 3]])) == [
        "ISR during 'expired': the controller takes the expired follower out"
    ]


def test_p3_fails_when_the_isr_loses_more_than_the_expired_follower() -> None:
    assert _p3_failed(_p3_metrics([[1, 2, 3], [1, 3], [1]])) == [
        "ISR during 'expired': the leader and the other follower stay"
    ]
