"""The one compare-and-set of Odradek's admin writes (odradek.zk.cas) against a real
ZooKeeper: create on absence, conditional set, delete, skip, dry run, and the races --
another session's set or create between our read and our write (re-read, re-apply), a
writer that always wins (bounded: ConcurrentUpdateError), several threads at once (no
update lost) -- and Kafka's changeConfigs: the entity znode, then one notification."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from odradek.zk import znodes
from odradek.zk.cas import ConcurrentUpdateError, Updated, change_entity_config, update_znode

PATH = "/counters/c"


def _decode(data: bytes | None) -> dict[str, int]:
    return json.loads(data) if data else {}


def _encode(value: dict[str, int]) -> bytes | None:
    return json.dumps(value, sort_keys=True).encode() if value else None


def _bump(key: str) -> Callable[[dict[str, int]], dict[str, int]]:
    return lambda current: {**current, key: current.get(key, 0) + 1}


def _update(
    zk: KazooClient, change: Callable[[dict[str, int]], dict[str, int]], **options: Any
) -> Updated[dict[str, int]]:
    """``update_znode`` of PATH with this file's codec; ``options`` as update_znode's."""
    return update_znode(zk, PATH, change, decode=_decode, encode=_encode, **options)


def test_create_set_delete_skip_and_dry_run(zk_connect: Callable[..., KazooClient]) -> None:
    zk = zk_connect()
    done = _update(zk, _bump("a"))
    assert (done.old, done.new, done.written) == ({}, {"a": 1}, True)
    _update(zk, _bump("a"))
    data, stat = zk.get(PATH)
    assert _decode(data) == {"a": 2} and stat.version == 1

    dry = _update(zk, _bump("a"), dry_run=True)
    assert dry.new == {"a": 3} and not dry.written
    same = _update(zk, dict, skip_unchanged=True)
    assert not same.written
    assert zk.get(PATH)[1].version == 1  # neither wrote

    _update(zk, lambda _current: {})  # encodes to None: the znode goes
    assert zk.exists(PATH) is None
    assert not _update(zk, lambda _current: {}).written
    with pytest.raises(NoNodeError):
        _update(zk, _bump("a"), create=False)
    assert zk.exists(PATH) is None


def test_a_concurrent_set_makes_the_change_re_apply(zk_connect: Callable[..., KazooClient]) -> None:
    zk, other = zk_connect(), zk_connect()
    _update(zk, _bump("a"))
    seen: list[dict[str, int]] = []

    def change(current: dict[str, int]) -> dict[str, int]:
        seen.append(current)
        if len(seen) == 1:  # the other writer lands between our read and our set
            other.set(PATH, _encode({**current, "b": 7}))
        return _bump("a")(current)

    done = _update(zk, change)
    assert seen == [{"a": 1}, {"a": 1, "b": 7}]
    assert done.written and _decode(zk.get(PATH)[0]) == {"a": 2, "b": 7}


def test_a_concurrent_create_makes_the_change_re_apply(
    zk_connect: Callable[..., KazooClient],
) -> None:
    zk, other = zk_connect(), zk_connect()
    calls = 0

    def change(current: dict[str, int]) -> dict[str, int]:
        nonlocal calls
        calls += 1
        if calls == 1:
            other.create(PATH, _encode({"b": 1}), makepath=True)
        return _bump("a")(current)

    _update(zk, change)
    assert calls == 2 and _decode(zk.get(PATH)[0]) == {"a": 1, "b": 1}


def test_a_writer_that_always_wins_ends_the_retries(zk_connect: Callable[..., KazooClient]) -> None:
    zk, other = zk_connect(), zk_connect()
    _update(zk, _bump("a"))

    def change(current: dict[str, int]) -> dict[str, int]:
        other.set(PATH, _encode(_bump("b")(current)))
        return _bump("a")(current)

    with pytest.raises(ConcurrentUpdateError) as e:
        _update(zk, change, attempts=3)
    assert e.value.attempts == 3 and isinstance(e.value, TimeoutError)
    assert _decode(zk.get(PATH)[0]) == {"a": 1, "b": 3}


def test_concurrent_writers_lose_no_update(zk_connect: Callable[..., KazooClient]) -> None:
    sessions = [zk_connect() for _ in range(4)]
    per_writer = 15
    errors: list[BaseException] = []

    def writer(zk: KazooClient) -> None:
        try:
            for _ in range(per_writer):
                _update(zk, _bump("n"), attempts=1000)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(zk,)) for zk in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads) and errors == []
    data, stat = sessions[0].get(PATH)
    assert _decode(data) == {"n": len(sessions) * per_writer}
    assert stat.version == len(sessions) * per_writer - 1


def test_change_entity_config_writes_then_notifies(zk_connect: Callable[..., KazooClient]) -> None:
    zk = zk_connect()
    new = change_entity_config(zk, "users/alice", lambda c: {**c, "producer_byte_rate": "10"})
    assert new == {"producer_byte_rate": "10"}
    assert znodes.decode_topic_config(zk.get("/config/users/alice")[0]) == new
    assert change_entity_config(zk, "users/alice", dict, skip_unchanged=True) == new
    assert change_entity_config(zk, "users/alice", lambda c: {}, validate_only=True) == {}
    assert znodes.decode_topic_config(zk.get("/config/users/alice")[0]) == new
    changes = sorted(zk.get_children(znodes.CONFIG_CHANGES))
    assert len(changes) == 1  # the skipped and the validate-only changes announce nothing
    body = zk.get(f"{znodes.CONFIG_CHANGES}/{changes[0]}")[0]
    assert znodes.decode_config_change(body) == "users/alice"
