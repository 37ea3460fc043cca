"""The console's message browser: read a few records of one partition from an offset or
a timestamp (a real consumer, assigned, never committing), and show keys, values and
headers as text, JSON or hex.

Bounded: at most ``MAX_MESSAGES`` records per page and ``MAX_SHOWN_BYTES`` shown per
key or value (the rest is counted, not rendered), so a huge record or a hostile query
costs the asker a truncated page, not the console its memory.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

__all__ = [
    "FORMATS",
    "MAX_MESSAGES",
    "MAX_SHOWN_BYTES",
    "Decoded",
    "BrowsedRecord",
    "decode",
    "read_messages",
]

FORMATS = ("auto", "text", "json", "hex")
MAX_MESSAGES = 100
MAX_SHOWN_BYTES = 4096
READ_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Decoded:
    text: str  # what to show
    format: str  # the format actually used: text, json, hex or null
    truncated: int  # bytes not shown


def _hex(data: bytes) -> str:
    lines = []
    for i in range(0, len(data), 16):
        chunk = data[i : i + 16]
        ascii_ = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{i:08x}  {chunk.hex(' '):<47}  {ascii_}")
    return "\n".join(lines)


def decode(data: bytes | None, fmt: str = "auto") -> Decoded:
    """Render bytes as ``fmt``; ``auto`` picks JSON, then UTF-8 text, then hex. A value
    that is not valid in the asked format falls back to hex (never an error page)."""
    if data is None:
        return Decoded("null", "null", 0)
    shown, rest = data[:MAX_SHOWN_BYTES], max(len(data) - MAX_SHOWN_BYTES, 0)
    if fmt in ("auto", "json") and rest == 0:
        try:
            obj = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            obj = None
        else:
            if fmt == "json" or isinstance(obj, (dict, list)):
                return Decoded(json.dumps(obj, indent=2, ensure_ascii=False), "json", 0)
    if fmt in ("auto", "text", "json"):
        try:
            text = shown.decode("utf-8")
        except UnicodeDecodeError as e:
            # A multi-byte character cut by the limit is not an error.
            if rest and e.start >= len(shown) - 3:
                text = shown[: e.start].decode("utf-8")
                rest += len(shown) - e.start
            else:
                text = None
        if text is not None and (
            fmt != "auto"
            or text.isprintable()
            or all(c.isprintable() or c in "\n\r\t" for c in text)
        ):
            return Decoded(text, "text", rest)
    return Decoded(_hex(shown), "hex", rest)


@dataclass(frozen=True)
class BrowsedRecord:
    offset: int
    timestamp_ms: int
    key: Decoded
    value: Decoded
    headers: tuple[tuple[str, Decoded], ...]


_GROUP_AUTHORIZATION_FAILED = 30


def read_messages(
    bootstrap: str,
    topic: str,
    partition: int,
    *,
    offset: int | None = None,
    timestamp_ms: int | None = None,
    limit: int = 20,
    fmt: str = "auto",
    timeout_s: float = READ_TIMEOUT_S,
    client_conf: Mapping[str, str] | None = None,
) -> tuple[int, list[BrowsedRecord]]:
    """(start offset, records) from ``offset`` (or the first at/after ``timestamp_ms``;
    neither: the last ``limit`` records). Blocking: run it in a thread."""
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

    limit = max(1, min(limit, MAX_MESSAGES))
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"odradek-console-browser-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "logger": logging.getLogger("odradek.console.librdkafka"),
            **(client_conf or {}),
        }
    )
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
        if timestamp_ms is not None:
            found = c.offsets_for_times(
                [TopicPartition(topic, partition, timestamp_ms)], timeout=timeout_s
            )[0].offset
            start = found if found >= 0 else high
        elif offset is not None:
            start = min(max(offset, low), high)
        else:
            start = max(high - limit, low)
        if start >= high:
            return start, []
        c.assign([TopicPartition(topic, partition, start)])
        out: list[BrowsedRecord] = []
        want = min(limit, high - start)
        deadline = time.monotonic() + timeout_s
        while len(out) < want and time.monotonic() < deadline:
            msgs = c.consume(num_messages=want - len(out), timeout=0.5)
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == -191:  # _PARTITION_EOF
                        deadline = 0.0
                        break
                    if err.code() == _GROUP_AUTHORIZATION_FAILED:
                        # librdkafka looks up the coordinator of its group.id even for
                        # an assign()-only consumer that never uses it; a viewer
                        # without access to that group can still read the partition.
                        continue
                    raise RuntimeError(str(m.error()))
                out.append(_record(m, fmt))
        return start, out
    finally:
        c.close()


def _record(m: Any, fmt: str) -> BrowsedRecord:
    _, ts = m.timestamp()
    headers = tuple(
        (k, decode(v, "text" if fmt == "auto" else fmt)) for k, v in (m.headers() or [])
    )
    return BrowsedRecord(m.offset(), ts, decode(m.key(), fmt), decode(m.value(), fmt), headers)
