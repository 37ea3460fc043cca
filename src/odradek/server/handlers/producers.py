"""InitProducerId (API 22) (KIP-98).

InitProducerId with a null transactional id is what an idempotent producer sends: it
gets a fresh producer id at epoch 0 (as Kafka does; KIP-360's epoch bump applies to
transactional ids). With a transactional id the transaction coordinator answers
(``handlers.transactions``: epoch bump, fencing). Ids come from
``odradek.coordinator.producer_ids`` (blocks claimed in ZooKeeper).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from odradek.errors import ErrorCode
from odradek.protocol.codec import RequestHeaderInfo
from odradek.protocol.responses import response
from odradek.server.context import RequestContext
from odradek.server.handlers.transactions import init_producer_id

logger = logging.getLogger(__name__)


async def handle_init_producer_id(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    if req.transactional_id is not None:
        return await init_producer_id(ctx, header, req)
    try:
        pid = await asyncio.to_thread(ctx.producer_ids.next_id)
    except Exception:  # noqa: BLE001 - ZooKeeper unreachable
        logger.exception("could not allocate a producer id")
        return response(22, v, throttle_time=0, error_code=ErrorCode.coordinator_not_available,
                        producer_id=-1, producer_epoch=-1)
    return response(22, v, throttle_time=0, error_code=ErrorCode.none, producer_id=pid,
                    producer_epoch=0)
