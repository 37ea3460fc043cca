"""The console's web app: aiohttp + Jinja2, server-rendered, live through server-sent
events (no JavaScript build; one small script swaps in fragments the server renders).

Pages: brokers (with byte-rate charts), topics, one topic's partitions, consumer groups,
one group's members and lag, the message browser, the chaos reports. Every live page
has one region (``<main id="live">``) rendered by a fragment template; ``/events``
streams that fragment again for every new snapshot, so the page follows the cluster
without reloading. ``/metrics`` exports consumer lag as kafka-exporter names it.

A network surface: queries are validated (ints, bounded counts), file serving is
confined to the report directories, at most ``MAX_EVENT_STREAMS`` event streams are
open at once, and aiohttp bounds request lines and headers. For a secured cluster every
page needs a login (``console.auth``): each viewer sees the topics and groups the
cluster lets them describe, and reads messages as themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import jinja2
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest

from odradek.console import charts
from odradek.console.auth import VIEWER_KEY, ConsoleLogin, Viewer
from odradek.console.browse import FORMATS, MAX_MESSAGES, read_messages
from odradek.console.lag_exporter import LagCollector
from odradek.console.reports import ChaosReports
from odradek.console.snapshot import EMPTY, Interest, Snapshot, View

logger = logging.getLogger(__name__)

__all__ = ["ConsoleState", "make_app", "MAX_EVENT_STREAMS"]

MAX_EVENT_STREAMS = 64
KEEPALIVE_S = 15.0
BROWSE_CONCURRENCY = 2

HERE = Path(__file__).parent
LIVE_VIEWS = ("brokers", "topics", "topic", "groups", "group")


class ConsoleState:
    """The latest snapshot and a way to wait for the next one (on the web loop), and
    which live views are open (``interest``, read by the collector's thread: it asks
    the cluster for what is being looked at)."""

    def __init__(self) -> None:
        self.snapshot: Snapshot = EMPTY
        self._changed = asyncio.Condition()
        self._views: Counter[View] = Counter()
        self._views_lock = threading.Lock()
        self.on_view_opened: Callable[[], None] | None = None  # the collector's wake()

    def interest(self) -> Interest:
        with self._views_lock:
            return Interest(frozenset(self._views))

    @contextlib.contextmanager
    def watching(self, view: str, arg: str) -> Iterator[None]:
        """While a page streams ``view``: the collector keeps its figures fresh."""
        key = (view, arg)
        with self._views_lock:
            opened = self._views[key] == 0
            self._views[key] += 1
        if opened and self.on_view_opened is not None:
            self.on_view_opened()
        try:
            yield
        finally:
            with self._views_lock:
                self._views[key] -= 1
                if self._views[key] <= 0:
                    del self._views[key]

    async def publish(self, snap: Snapshot) -> None:
        async with self._changed:
            self.snapshot = snap
            self._changed.notify_all()

    async def next_after(self, version: int, timeout_s: float) -> Snapshot | None:
        async with self._changed:
            try:
                async with asyncio.timeout(timeout_s):  # not wait_for: see fetcher._run
                    await self._changed.wait_for(lambda: self.snapshot.version > version)
            except TimeoutError:
                return None
            return self.snapshot


def _fmt_bytes(n: float | int | None) -> str:
    if n is None:
        return "-"
    v = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(v) < 1024 or unit == "TB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{v:.1f} TB"


def _fmt_ts(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "-"
    return (
        datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[
            :-3
        ]
        + "Z"
    )


def _fmt_time(t: float) -> str:
    return datetime.datetime.fromtimestamp(t).strftime("%H:%M:%S") if t else "-"


def _templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=jinja2.select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["bytes"] = _fmt_bytes
    env.filters["ts"] = _fmt_ts
    env.filters["clock"] = _fmt_time
    env.globals["sparkline"] = charts.sparkline
    env.globals["rate_chart"] = charts.rate_chart
    return env


def _int_param(request: web.Request, name: str, lo: int, hi: int) -> int | None:
    raw = request.query.get(name, "").strip()
    if not raw:
        return None
    try:
        v = int(raw)
    except ValueError:
        raise web.HTTPBadRequest(text=f"{name} must be an integer") from None
    if not lo <= v <= hi:
        raise web.HTTPBadRequest(text=f"{name} must be in [{lo}, {hi}]")
    return v


def make_app(
    state: ConsoleState,
    bootstrap: str,
    reports: ChaosReports,
    *,
    title: str = "Odradek console",
    read: Callable[..., Any] = read_messages,
    client_conf: Mapping[str, str] | None = None,
    login: ConsoleLogin | None = None,
) -> web.Application:
    """``client_conf``: librdkafka security settings of a secured cluster (the message
    browser's consumer). ``login``: every page needs a login, and shows and reads what
    the logged-in user may (the browser's consumer then uses the user's settings)."""
    env = _templates()
    app = web.Application(
        client_max_size=64 * 1024,  # no uploads: small bodies only
        middlewares=[login.middleware] if login is not None else [],
    )
    streams: set[web.StreamResponse] = set()
    browse_slots = asyncio.Semaphore(BROWSE_CONCURRENCY)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LagCollector(lambda: state.snapshot))

    def viewer_of(r: web.Request) -> Viewer | None:
        v = r.get(VIEWER_KEY)
        return v if isinstance(v, Viewer) else None

    def seen(r: web.Request, snap: Snapshot | None = None) -> Snapshot:
        """The snapshot as the request's viewer may see it."""
        snap = state.snapshot if snap is None else snap
        v = viewer_of(r)
        return snap if v is None else v.filter(snap)

    def page(r: web.Request, name: str, **ctx: Any) -> web.Response:
        v = viewer_of(r)
        html = env.get_template(name).render(
            title=title, bootstrap=bootstrap, snap=seen(r), user=v.user if v else None, **ctx
        )
        return web.Response(text=html, content_type="text/html")

    def fragment(view: str, arg: str, snap: Snapshot) -> str:
        return env.get_template(f"_{view}.html").render(snap=snap, arg=arg)

    async def index(_r: web.Request) -> web.Response:
        raise web.HTTPFound("/brokers")

    async def brokers(r: web.Request) -> web.Response:
        return page(
            r,
            "live.html",
            view="brokers",
            arg="",
            heading="Brokers",
            live=fragment("brokers", "", seen(r)),
        )

    async def topics(r: web.Request) -> web.Response:
        return page(
            r,
            "live.html",
            view="topics",
            arg="",
            heading="Topics",
            live=fragment("topics", "", seen(r)),
        )

    async def topic(r: web.Request) -> web.Response:
        name = r.match_info["name"]
        return page(
            r,
            "live.html",
            view="topic",
            arg=name,
            heading=f"Topic {name}",
            live=fragment("topic", name, seen(r)),
        )

    async def groups(r: web.Request) -> web.Response:
        return page(
            r,
            "live.html",
            view="groups",
            arg="",
            heading="Consumer groups",
            live=fragment("groups", "", seen(r)),
        )

    async def group(r: web.Request) -> web.Response:
        gid = r.match_info["group"]
        return page(
            r,
            "live.html",
            view="group",
            arg=gid,
            heading=f"Consumer group {gid}",
            live=fragment("group", gid, seen(r)),
        )

    async def messages(r: web.Request) -> web.Response:
        topic_name = r.query.get("topic", "")
        partition = _int_param(r, "partition", 0, 1 << 20) or 0
        offset = _int_param(r, "offset", 0, 1 << 62)
        ts_text = r.query.get("timestamp", "").strip()
        limit = _int_param(r, "limit", 1, MAX_MESSAGES) or 20
        fmt = r.query.get("format", "auto")
        if fmt not in FORMATS:
            raise web.HTTPBadRequest(text=f"format must be one of {', '.join(FORMATS)}")
        timestamp_ms = None
        if ts_text:
            try:
                timestamp_ms = (
                    int(ts_text)
                    if ts_text.isdigit()
                    else int(
                        datetime.datetime.fromisoformat(ts_text.replace("Z", "+00:00")).timestamp()
                        * 1000
                    )
                )
            except ValueError:
                raise web.HTTPBadRequest(text="timestamp: epoch ms or ISO 8601") from None
        records: list[Any] = []
        start = None
        error = None
        viewer = viewer_of(r)
        conf = viewer.librdkafka_config() if viewer is not None else client_conf
        if topic_name:
            if seen(r).topic(topic_name) is None and state.snapshot.version:
                error = f"no topic {topic_name!r}"
            else:
                async with browse_slots:
                    try:
                        start, records = await asyncio.to_thread(
                            read,
                            bootstrap,
                            topic_name,
                            partition,
                            offset=offset,
                            timestamp_ms=timestamp_ms,
                            limit=limit,
                            fmt=fmt,
                            **({"client_conf": conf} if conf else {}),
                        )
                    except Exception as e:  # noqa: BLE001 - shown on the page
                        error = str(e)
        return page(
            r,
            "messages.html",
            heading="Messages",
            topic=topic_name,
            partition=partition,
            offset=offset,
            timestamp=ts_text,
            limit=limit,
            fmt=fmt,
            formats=FORMATS,
            records=records,
            start=start,
            error=error,
        )

    async def chaos(r: web.Request) -> web.Response:
        return page(r, "chaos.html", heading="Chaos reports", reports=reports.list())

    async def chaos_file(r: web.Request) -> web.StreamResponse:
        path = reports.resolve(r.match_info["rid"], r.match_info["path"] or "index.html")
        if path is None:
            raise web.HTTPNotFound()
        return web.FileResponse(path)

    async def events(r: web.Request) -> web.StreamResponse:
        view = r.query.get("view", "")
        arg = r.query.get("arg", "")[:256]
        if view not in LIVE_VIEWS:
            raise web.HTTPBadRequest(text="unknown view")
        if len(streams) >= MAX_EVENT_STREAMS:
            raise web.HTTPServiceUnavailable(text="too many event streams")
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(r)
        streams.add(resp)
        try:
            with state.watching(view, arg):  # the collector asks for what this page shows
                await stream(resp, view, arg, r)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            streams.discard(resp)
        return resp

    async def stream(resp: web.StreamResponse, view: str, arg: str, r: web.Request) -> None:
        """The view's fragment again for every new snapshot, until the client leaves."""
        version = -1
        while True:
            snap = await state.next_after(version, KEEPALIVE_S)
            if snap is None:
                await resp.write(b": keepalive\n\n")  # finds clients that left
                continue
            version = snap.version
            html = fragment(view, arg, seen(r, snap))
            data = "".join(f"data: {line}\n" for line in html.split("\n"))
            await resp.write(f"id: {version}\n{data}\n".encode())

    async def metrics(r: web.Request) -> web.Response:
        reg = registry
        if viewer_of(r) is not None:  # this viewer's groups only
            reg = CollectorRegistry(auto_describe=False)
            reg.register(LagCollector(lambda: seen(r)))
        return web.Response(
            body=generate_latest(reg), headers={"Content-Type": "text/plain; version=0.0.4"}
        )

    async def health(_r: web.Request) -> web.Response:
        h = state.snapshot.health
        return web.json_response(
            {"healthy": bool(h and h.healthy), "reasons": h.reasons if h else ["collecting"]},
            status=200 if h and h.healthy else 503,
        )

    app.router.add_get("/", index)
    app.router.add_get("/brokers", brokers)
    app.router.add_get("/topics", topics)
    app.router.add_get("/topics/{name}", topic)
    app.router.add_get("/groups", groups)
    app.router.add_get("/groups/{group}", group)
    app.router.add_get("/messages", messages)
    app.router.add_get("/chaos", chaos)
    app.router.add_get("/chaos/{rid}/{path:.*}", chaos_file)
    app.router.add_get("/events", events)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", health)
    app.router.add_static("/static", HERE / "static", follow_symlinks=False)

    async def close_streams(_app: web.Application) -> None:
        for s in list(streams):
            task = s.task
            if task is not None:
                task.cancel()

    app.on_shutdown.append(close_streams)
    return app
