"""InitProducerId (API 22) for idempotent producers (KIP-98).

InitProducerId with a null transactional id is what an idempotent producer sends: it
gets a fresh producer id at epoch 0 (as Kafka does; KIP-360's epoch bump applies to
transactional ids). Transactions are not implemented, so a transactional id is refused.
Ids come from ``odradek.coordinator.producer_ids`` (blocks claimed in ZooKeeper).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from odradek.errors import ErrorCode
from odradek.protocol.codec import RequestHeaderInfo
from odradek.protocol.responses import response
from odradek.server.context import RequestContext

logger = logging.getLogger(__name__)


async def handle_init_producer_id(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    if req.transactional_id is not None:
        return response(22, v, throttle_time=0,
                        error_code=ErrorCode.transactional_id_authorization_failed,
                        producer_id=-1, producer_epoch=-1)
    ids = ctx.producer_ids
    try:
        if ids is None:  # the broker is still starting (no ZooKeeper session yet)
            raise RuntimeError("producer id manager not started")
        pid = await asyncio.to_thread(ids.next_id)
    except Exception:
        logger.exception("could not allocate a producer id")
        return response(22, v, throttle_time=0, error_code=ErrorCode.coordinator_not_available,
                        producer_id=-1, producer_epoch=-1)
    return response(22, v, throttle_time=0, error_code=ErrorCode.none, producer_id=pid,
                    producer_epoch=0)
