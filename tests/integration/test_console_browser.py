"""The web console in a real browser (headless Chromium, Debian's package, driven by
Playwright) against a live cluster: every page renders from the cluster's real state,
and a SIGKILLed broker shows as down, with its partitions' ISRs shrinking, on pages that
are never reloaded (issue 15).

Screenshots go to ``tmp_path``, or to ``$ODRADEK_SCREENSHOTS`` (docs/img is made so).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from replication_util import create_topic, wait_for

from odradek.cluster.local import LocalCluster

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
KILLED = 2
RECORDS = 60
COMMITTED = 7  # the group commits this offset on each partition: lag 13 of 20 each


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (scripts/setup.sh installs it)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def _shots(tmp_path: Path) -> Path:
    d = Path(os.environ.get("ODRADEK_SCREENSHOTS") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture
def console(make_cluster, tmp_path: Path) -> Iterator[tuple[LocalCluster, str, Path]]:
    c: LocalCluster = make_cluster(3, zk_session_timeout_ms=4000)
    reports = tmp_path / "reports"
    _chaos_report(reports / "run-1")
    url = c.start_console([reports])
    try:
        yield c, url.rstrip("/"), reports
    finally:
        c.stop_console()


def _chaos_report(out: Path) -> None:
    """A report written by the chaos tools' own writer, from a result as they record it."""
    from odradek.chaos.report import write_report

    results = [
        {
            "name": "safe-leader-kill",
            "title": "leader SIGKILL",
            "ok": True,
            "metrics": {"acked": 100, "lost": 0},
            "checks": [],
            "seconds": 30.0,
        }
    ]
    write_report(
        out.parent, results, out, command="odradek chaos run safe-leader-kill", plots=False
    )


def _fill(c: LocalCluster, topic: str) -> None:
    create_topic(c.bootstrap_servers, topic, 3, 3)
    p = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all"})
    for i in range(RECORDS):
        p.produce(
            topic,
            partition=i % 3,
            key=f"k{i}".encode(),
            value=json.dumps({"n": i, "name": f"item-{i}"}).encode(),
            headers=[("source", b"test")],
            timestamp=1_700_000_000_000 + i * 1000,
        )
    assert p.flush(30) == 0
    g = Consumer(
        {
            "bootstrap.servers": c.bootstrap_servers,
            "group.id": "console-readers",
            "enable.auto.commit": False,
        }
    )

    def commit() -> bool:
        # The first commit creates __consumer_offsets: NOT_COORDINATOR until it has
        # leaders.
        try:
            g.commit(
                offsets=[TopicPartition(topic, part, COMMITTED) for part in range(3)],
                asynchronous=False,
            )
            return True
        except KafkaException:
            return False

    try:
        wait_for(commit, 60, "the group's offset commit", interval=0.5)
    finally:
        g.close()


def test_console_pages_follow_a_broker_kill(console, browser, topic_name, tmp_path) -> None:
    c, base, _ = console
    _fill(c, topic_name)
    shots = _shots(tmp_path)
    ctx = browser.new_context(viewport={"width": 1366, "height": 900})
    brokers = ctx.new_page()
    brokers.goto(f"{base}/brokers")
    brokers.wait_for_selector("tr[data-broker='3'][data-state='up']")
    assert brokers.locator("tr[data-state='up']").count() == 3
    assert brokers.locator("text=★ controller").count() == 1
    brokers.wait_for_selector("#health[data-healthy='true']")

    topics = ctx.new_page()
    topics.goto(f"{base}/topics")
    row = topics.locator(f"tr[data-topic='{topic_name}']")
    row.wait_for()
    wait_for(lambda: f"{RECORDS:,}" in row.inner_text(), 20, "the topic's record count")
    topics.screenshot(path=str(shots / "console-topics.png"))

    topic = ctx.new_page()
    topic.goto(f"{base}/topics/{topic_name}")
    topic.wait_for_selector("tr[data-partition='2']")
    for part in range(3):
        assert topic.get_attribute(f"tr[data-partition='{part}']", "data-isr") is not None
    # HW and the leader's LEO: 20 records per partition.
    wait_for(
        lambda: topic.locator("tr[data-partition='0'] td").nth(6).inner_text() == "20",
        20,
        "HW 20 on partition 0",
    )
    wait_for(
        lambda: topic.locator("tr[data-partition='0'] td").nth(7).inner_text() == "20",
        20,
        "LEO 20 on partition 0",
    )

    groups = ctx.new_page()
    groups.goto(f"{base}/groups/console-readers")
    lag_total = groups.locator("#total-lag")
    wait_for(
        lambda: lag_total.count() and lag_total.inner_text() == str(RECORDS - 3 * COMMITTED),
        30,
        "the group's total lag",
    )
    assert groups.get_attribute(
        f"tr[data-topic='{topic_name}'][data-partition='1']", "data-lag"
    ) == str(RECORDS // 3 - COMMITTED)
    groups.screenshot(path=str(shots / "console-group.png"))
    lag = c.console and _scrape_console(base)
    assert (
        f'kafka_consumergroup_lag{{consumergroup="console-readers",partition="1",topic="{topic_name}"}} {float(RECORDS // 3 - COMMITTED)}'
        in lag
    )

    msgs = ctx.new_page()
    msgs.goto(f"{base}/messages?topic={topic_name}&partition=1&offset=0&limit=5&format=json")
    msgs.wait_for_selector("tr[data-offset='4']")
    assert msgs.locator("tr[data-offset]").count() == 5
    first = msgs.locator("tr[data-offset='0']").inner_text()
    assert '"name": "item-1"' in first and "k1" in first and "source" in first
    assert "2023-11-14 22:13:21" in first  # CreateTime 1_700_000_001_000
    msgs.goto(
        f"{base}/messages?topic={topic_name}&partition=1&timestamp=1700000030000&limit=2&format=hex"
    )
    msgs.wait_for_selector("tr[data-offset]")
    # Partition 1 holds i = 1, 4, 7, ...: the first at/after 30 s is i = 31, offset 10.
    assert msgs.locator("tr[data-offset]").first.get_attribute("data-offset") == "10"
    assert "7b 22 6e 22" in msgs.locator("tr[data-offset='10']").inner_text()  # {"n"
    msgs.screenshot(path=str(shots / "console-messages.png"))
    msgs.goto(f"{base}/messages?topic={topic_name}&partition=x")
    assert "partition must be an integer" in msgs.content()

    chaos = ctx.new_page()
    chaos.goto(f"{base}/chaos")
    chaos.wait_for_selector("section.report")
    assert "1 scenarios" in chaos.inner_text("section.report")
    chaos.click("section.report h2 a")
    chaos.wait_for_load_state()
    assert "safe-leader-kill" in chaos.content()

    brokers.screenshot(path=str(shots / "console-brokers.png"))
    topic.screenshot(path=str(shots / "console-topic.png"))
    # A reload would lose these markers: the pages must change in place.
    for pg in (brokers, topic):
        pg.evaluate("window.__notReloaded = true")

    c.stop_broker(KILLED, signal.SIGKILL)
    brokers.wait_for_selector(f"tr[data-broker='{KILLED}'][data-state='down']", timeout=30_000)
    brokers.wait_for_selector("#health[data-healthy='false']", timeout=30_000)

    def isr_shrunk() -> bool:
        isrs = [
            topic.get_attribute(f"tr[data-partition='{p}']", "data-isr") or "" for p in range(3)
        ]
        return all(str(KILLED) not in isr.split(",") and isr for isr in isrs)

    wait_for(isr_shrunk, 60, f"every ISR without broker {KILLED}")
    for pg in (brokers, topic):
        assert pg.evaluate("window.__notReloaded === true")
    brokers.screenshot(path=str(shots / "console-broker-down.png"))
    topic.screenshot(path=str(shots / "console-isr-shrunk.png"))

    c.start_broker(KILLED)
    try:
        brokers.wait_for_selector(f"tr[data-broker='{KILLED}'][data-state='up']", timeout=60_000)
    except Exception as e:  # say what the page and the console saw (seen once under load)
        version = brokers.evaluate("document.body.dataset.liveVersion")
        stale = brokers.evaluate("document.body.classList.contains('stale')")
        raise AssertionError(
            f"broker {KILLED} not shown up again: {e}\npage (version {version}, "
            f"stale={stale}):\n{brokers.inner_text('body')}\n"
            f"console /health: {_get(base + '/health')}"
        ) from e
    ctx.close()


def _get(url: str) -> str:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read().decode()
    except urllib.error.HTTPError as e:
        return f"{e.code} {e.read().decode()}"
    except OSError as e:
        return repr(e)


def _scrape_console(base: str) -> str:
    import urllib.request

    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as r:
        return r.read().decode()


def test_console_bounds_bad_requests(console) -> None:
    import urllib.error
    import urllib.request

    _, base, _ = console
    for path, code in (
        ("/messages?limit=100000", 400),
        ("/messages?format=evil", 400),
        ("/events?view=nope", 400),
        ("/chaos/xyz/../../etc/passwd", 404),
        ("/chaos/0123456789ab/index.html", 404),
        ("/static/../app.py", 404),
    ):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(base + path, timeout=5)
        assert e.value.code in (code, 403), path

    def healthy() -> bool:  # 503 while the first snapshot is being collected
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as r:
                return r.status == 200 and json.load(r)["healthy"] is True
        except urllib.error.HTTPError:
            return False

    wait_for(healthy, 30, "the console's /health to say healthy")
