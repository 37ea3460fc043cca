"""A connection from this broker to another one (followers to leaders).

Every outgoing connection binds this broker's own address first (FACTS: otherwise a
connection to 127.0.0.3 leaves from 127.0.0.1 and source-based iptables rules used by
the fault tests never match). One request at a time per connection, like Kafka's
replica fetcher.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from odradek.protocol.client_codec import decode_response, encode_request

_I32 = struct.Struct(">i")


class BrokerConnectionError(Exception):
    pass


class BrokerConnection:
    def __init__(self, host: str, port: int, source_ip: str | None, client_id: str,
                 timeout_s: float) -> None:
        self.host, self.port = host, port
        self.source_ip = source_ip
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = 0

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def connect(self) -> None:
        local = (self.source_ip, 0) if self.source_ip else None
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, local_addr=local,
                                        limit=1 << 20), self.timeout_s)
        except (OSError, asyncio.TimeoutError) as e:
            self.close()
            raise BrokerConnectionError(f"connect to {self.host}:{self.port}: {e!r}") from e

    async def request(self, entity: Any, timeout_s: float | None = None) -> Any:
        if not self.connected:
            await self.connect()
        assert self._reader is not None and self._writer is not None
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        corr = self._correlation
        try:
            self._writer.write(encode_request(entity, corr, self.client_id))
            await asyncio.wait_for(self._writer.drain(), timeout_s or self.timeout_s)
            size_b = await asyncio.wait_for(self._reader.readexactly(4),
                                            timeout_s or self.timeout_s)
            frame = await asyncio.wait_for(self._reader.readexactly(_I32.unpack(size_b)[0]),
                                           timeout_s or self.timeout_s)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
            self.close()
            raise BrokerConnectionError(f"request to {self.host}:{self.port}: {e!r}") from e
        got, response = decode_response(type(entity).__api_key__, type(entity).__version__,
                                        frame)
        if got != corr:
            self.close()
            raise BrokerConnectionError(f"correlation id {got} != {corr}")
        return response

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
