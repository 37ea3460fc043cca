"""Kafka clients that outlive the test module that made them.

Each integration module starts its own cluster on loopback addresses that the next module
reuses. A client left alive (a librdkafka handle, or kafka-python's background threads)
keeps reconnecting to those addresses, so it talks to the NEXT module's cluster: in CI a
forgotten producer's metadata requests auto-created a topic in test_console_polling.

``pytest_runtest_protocol`` below (registered by tests/conftest.py) runs
``leftover_clients()`` after each module. A client something still refers to is an error
of the module's last test; one held only by a reference cycle is destroyed by the check
(so it cannot reach the next cluster) and reported as a warning, since such cycles come
from everyday code (a frame held by the traceback of an exception a future or kazoo
re-raised). It has to be cheap, since it runs for every module: a live
librdkafka handle always has threads named ``rdk:*`` (read from /proc, no Python object
visited), and kafka-python's clients run Python threads of known classes, so the usual
answer costs a directory listing. Only when such threads remain does it look for the
objects, collect garbage and say who holds them.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
import types
import warnings
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

# How long a client that is being destroyed (by another thread, or librdkafka's own
# shutdown of its broker threads) may take to go.
SETTLE_S = 10.0


def librdkafka_threads() -> list[str]:
    """Names of this process's librdkafka threads (every live handle has ``rdk:main``)."""
    names = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:  # not Linux: no cheap check, and no leak report either
        return []
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:  # the thread ended meanwhile
            continue
        if name.startswith("rdk:"):
            names.append(name)
    return sorted(names)


def _is_kafka_python_thread(t: threading.Thread) -> bool:
    # kafka-python 3 runs one I/O thread per client ("kafka-io-<client id>"); a
    # producer's sender thread is a Sender (its name is the client id's).
    if t.name.startswith("kafka-io-"):
        return True
    sender = sys.modules.get("kafka.producer.sender")
    return sender is not None and isinstance(t, getattr(sender, "Sender", ()))


def client_threads() -> list[str]:
    """Threads that only a live Kafka client keeps running."""
    python = [t.name for t in threading.enumerate() if _is_kafka_python_thread(t)]
    return librdkafka_threads() + sorted(python)


def _client_types() -> tuple[type, ...]:
    out: list[type] = []
    cimpl = sys.modules.get("confluent_kafka.cimpl")
    if cimpl is not None:
        out += [cimpl.Producer, cimpl.Consumer, cimpl._AdminClientImpl]
    kafka = sys.modules.get("kafka")
    if kafka is not None:
        out += [kafka.KafkaProducer, kafka.KafkaConsumer, kafka.KafkaAdminClient]
    return tuple(out)


def _clients(kinds: tuple[type, ...], skip: set[int]) -> list[Any]:
    # A weak proxy passes isinstance() for the class it points to (kafka-python keeps one
    # of its producer); it is not a client of its own.
    return [
        o
        for o in gc.get_objects()
        if isinstance(o, kinds) and not isinstance(o, weakref.ProxyTypes) and id(o) not in skip
    ]


def live_handles() -> int:
    """How many clients are alive: one ``rdk:main`` thread per librdkafka handle, one
    or two threads per kafka-python client."""
    threads = client_threads()
    return sum(1 for t in threads if t == "rdk:main" or not t.startswith("rdk:"))


STILL_REFERENCED = (
    "still referenced: close() it (or flush() it and drop it) in the test or the teardown"
)
IN_A_CYCLE = (
    "held only by a reference cycle (destroyed now by gc.collect(); else it would have "
    "lived until a full collection)"
)


class _Reported:
    """What was reported already, so that the modules after the one that leaked a client
    are not blamed for it again."""

    def __init__(self) -> None:
        # The reported clients that something else still refers to: held, so that their
        # identity (not a reusable id()) tells them from new ones.
        self.clients: list[Any] = []
        # Live handles that were reported (the cheap check's baseline); it only falls,
        # when a reported client goes after all.
        self.handles = 0

    def forget(self) -> None:
        self.clients.clear()
        self.handles = 0


REPORTED = _Reported()


def _wait_settled(deadline: float) -> int:
    while (n := live_handles()) > REPORTED.handles and time.monotonic() < deadline:
        time.sleep(0.05)
    return n


def _name(o: object) -> str:
    if isinstance(o, types.FrameType):
        return f"frame of {o.f_code.co_name}() at {o.f_code.co_filename}:{o.f_lineno}"
    if isinstance(o, types.FunctionType):
        return f"function {o.__module__}.{o.__qualname__}"
    if isinstance(o, types.MethodType):
        return f"method {type(o.__self__).__qualname__}.{o.__func__.__name__}"
    if isinstance(o, types.ModuleType):
        return f"module {o.__name__}"
    if isinstance(o, types.TracebackType):
        return "traceback"
    if isinstance(o, BaseException):
        return f"exception {type(o).__qualname__}"
    t = type(o)
    return f"{t.__module__}.{t.__qualname__}" if t.__module__ != "builtins" else t.__qualname__


def _ours(r: object) -> bool:
    return isinstance(r, types.FrameType) and r.f_code.co_filename == __file__


def _key_of(d: dict[Any, Any], value: object) -> object:
    # A loop, not a generator expression: that would put ``value`` in a cell, which
    # gc.get_referrers would then list as one more holder.
    for k, v in d.items():
        if v is value:
            return k
    return "?"


def holders(obj: object, ignore: set[int], depth: int = 4, width: int = 3) -> list[str]:
    """Who refers to ``obj``, and who refers to them, as indented lines (``ignore``: ids
    of the caller's own containers). A dict is shown by the key that holds the object;
    the line under it names the dict's owner."""
    ours = set(ignore)
    lines: list[str] = []
    seen: set[int] = {id(obj)}

    def walk(o: object, level: int) -> None:
        refs = [
            r
            for r in gc.get_referrers(o)
            if id(r) not in seen and id(r) not in ours and not _ours(r)
        ]
        shown = refs[:width]
        ours.update((id(refs), id(shown)))
        for r in shown:
            seen.add(id(r))
            if isinstance(r, dict) and not isinstance(o, types.ModuleType):
                key = _key_of(r, o)
                lines.append(f"{'  ' * level}<- dict[{key!r}]")
            else:
                lines.append(f"{'  ' * level}<- {_name(r)}")
            if level < depth and not isinstance(r, types.ModuleType):
                walk(r, level + 1)
        if len(refs) > width:
            lines.append(f"{'  ' * level}<- ... {len(refs) - width} more")

    walk(obj, 1)
    return lines


@dataclass
class Leftovers:
    """What a module left: clients something still refers to (a leak: an error), and
    clients held only by a reference cycle (destroyed by the check's gc.collect(), so
    they cannot reach the next module: a warning)."""

    referenced: list[str] = field(default_factory=list)
    cycles: list[str] = field(default_factory=list)


def leftover_clients(settle_s: float = SETTLE_S) -> Leftovers | None:
    """None when no Kafka client is alive (beyond those reported before), else what is
    alive and who holds it.

    A client that only a reference cycle keeps (a callback bound to the object that holds
    the client, a frame held by an exception's traceback) would live until a full
    collection, which a big heap may not see for many modules; here gc.collect()
    destroys it."""
    REPORTED.handles = min(REPORTED.handles, n := live_handles())
    if n <= REPORTED.handles:
        return None
    deadline = time.monotonic() + settle_s
    if _wait_settled(min(deadline, time.monotonic() + 1.0)) <= REPORTED.handles:
        return None  # a client was being destroyed, and now is
    kinds = _client_types()
    reported = {id(q) for q in REPORTED.clients}
    found = _clients(kinds, reported)
    described = [(f"{type(o).__qualname__} at {id(o):#x}", holders(o, {id(found)})) for o in found]
    ids = [id(o) for o in found]
    del found
    gc.collect()
    alive = {id(o): o for o in _clients(kinds, set())}
    out = Leftovers()
    for i, (name, held_by) in zip(ids, described, strict=True):
        if i in alive:
            REPORTED.clients.append(alive[i])
            REPORTED.handles += 1
            out.referenced += [f"{name}, {STILL_REFERENCED}; referred to by", *held_by]
        else:
            out.cycles += [f"{name}, {IN_A_CYCLE}; referred to by", *held_by]
    del alive
    n = _wait_settled(deadline)
    if n > REPORTED.handles:  # threads without a client object that we could find
        out.referenced.append(f"live client threads (one handle per rdk:main): {client_threads()}")
    REPORTED.handles = n
    return out if out.referenced or out.cycles else None


def clear_last_failure() -> None:
    """Drop the traceback pytest keeps of the last failed test (for post-mortem
    debugging): its frames hold that test's clients until the next test's call phase,
    which comes after the next module's cluster has started on the same addresses."""
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            delattr(sys, name)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[object]:
    """After a module's last test (its fixtures torn down, and pytest's references to
    them dropped, which happens after the teardown hooks), no Kafka client may be left:
    the next module's cluster takes the same addresses (this module's docstring)."""
    result = yield
    module = item.getparent(pytest.Module)
    if nextitem is None or nextitem.getparent(pytest.Module) is not module:
        clear_last_failure()
        try:
            left = leftover_clients()
        except Exception as e:  # the guard's own failure must not end the session
            left = Leftovers(referenced=[f"the check itself failed: {e!r}"])
        if left is not None and left.referenced:
            text = "\n".join(["the module left Kafka clients alive:", *left.referenced])
            _report_teardown_error(item, f"{item.nodeid}: {text}")
        if left is not None and left.cycles:
            text = "\n".join(["Kafka clients outlived the module in a cycle:", *left.cycles])
            warnings.warn(pytest.PytestWarning(f"{item.nodeid}: {text}"), stacklevel=1)
    return result


def _report_teardown_error(item: pytest.Item, text: str) -> None:
    # The teardown phase has been reported already; one more teardown report marks the
    # test in error, and the run fails (under xdist too: workers forward reports).
    rep = pytest.TestReport(item.nodeid, item.location, {}, "failed", text, "teardown")
    item.ihook.pytest_runtest_logreport(report=rep)
