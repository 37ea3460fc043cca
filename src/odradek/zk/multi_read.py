"""ZooKeeper's ``multiRead`` (3.6+, opcode 22) for kazoo, which lacks it.

Why: kazoo costs ~0.2 ms of Python per request on this machine (measured: 2,000
pipelined ``get_async`` calls took 390 ms), so reading the state znodes of 10,000
partitions one request each takes seconds. One ``multiRead`` carries hundreds of
``getData``/``getChildren`` operations in one request and one reply: 2,000 reads in
chunks of 500 took 11 ms. Controller fail-over and broker start-up read every partition
state (REQ-R13: a new controller starts from what ZooKeeper holds), so this is what
makes them O(N / chunk) round trips.

Unlike a write ``multi`` it is not a transaction: each operation succeeds or fails on its
own (a missing znode gives ``NoNodeError`` in its slot) and no watch is set.

The request goes through ``KazooClient._call``, the same entry point kazoo's own
``TransactionRequest.commit_async`` uses; the wire format is ZooKeeper's
``MultiOperationRecord`` / ``MultiResponse`` (jute): per operation a ``MultiHeader(type,
done=false, err=-1)`` and the operation's record, closed by ``MultiHeader(-1, true, -1)``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import EXCEPTIONS
from kazoo.protocol.serialization import (
    MultiHeader,
    ZnodeStat,
    int_struct,
    multiheader_struct,
    read_buffer,
    read_string,
    stat_struct,
    write_string,
)

logger = logging.getLogger(__name__)

GET_DATA = 4  # ZooKeeper OpCode.getData
GET_CHILDREN = 8  # ZooKeeper OpCode.getChildren
_ERROR = -1  # OpCode.error: the slot holds an ErrorResponse

# One read: (GET_DATA | GET_CHILDREN, absolute path without the chroot).
ReadOp = tuple[int, str]
# A slot of the reply: (data, ZnodeStat) for GET_DATA, list of child names for
# GET_CHILDREN, or the exception for that operation (e.g. NoNodeError()).
ReadResult = Any


class MultiRead:
    """A kazoo request object (``type``, ``serialize``, ``deserialize``) for multiRead."""

    type = 22  # ZooKeeper OpCode.multiRead

    def __init__(self, ops: Sequence[ReadOp]) -> None:
        self.ops = list(ops)

    def serialize(self) -> bytearray:
        b = bytearray()
        for kind, path in self.ops:
            b.extend(MultiHeader(kind, False, -1).serialize())
            b.extend(write_string(path))
            b.append(0)  # watch: false (multiRead sets no watches)
        b.extend(multiheader_struct.pack(-1, True, -1))
        return b

    @classmethod
    def deserialize(cls, buf: bytes, offset: int) -> list[ReadResult]:
        out: list[ReadResult] = []
        while True:
            header, offset = MultiHeader.deserialize(buf, offset)
            if header.done:
                return out
            if header.type == GET_DATA:
                data, offset = read_buffer(buf, offset)
                stat = ZnodeStat._make(stat_struct.unpack_from(buf, offset))
                offset += stat_struct.size
                out.append((data, stat))
            elif header.type == GET_CHILDREN:
                count = int_struct.unpack_from(buf, offset)[0]
                offset += int_struct.size
                children = []
                for _ in range(max(count, 0)):
                    name, offset = read_string(buf, offset)
                    children.append(name)
                out.append(children)
            elif header.type == _ERROR:
                err = int_struct.unpack_from(buf, offset)[0]
                offset += int_struct.size
                out.append(EXCEPTIONS[err]())
            else:  # pragma: no cover - a server answering something we did not ask
                raise ValueError(f"multiRead: unexpected result type {header.type}")

    def __repr__(self) -> str:  # kazoo logs requests at debug level
        return f"MultiRead({len(self.ops)} ops)"


def multi_read_async(zk: KazooClient, ops: Sequence[ReadOp]) -> Any:
    """Send one multiRead; returns kazoo's async result (``.get()`` -> list of slots).

    Paths are given without the client's chroot (like every kazoo call); it is added
    here because ``_call`` bypasses kazoo's path handling."""
    request = MultiRead([(kind, zk.chroot + path if zk.chroot else path) for kind, path in ops])
    result = zk.handler.async_result()
    zk._call(request, result)
    return result
