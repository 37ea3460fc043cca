"""Encoded Metadata answers, kept while the metadata image does not change (issue 29).

A Metadata request for every topic at 10,000 partitions took ~35 ms to build and ~50 ms
to encode, in one event-loop step: every request of the broker waited behind it. The
console asks for it every round (every 2 s while a page is open), and so do tools that
list topics; between two image changes (a leader, an ISR, a topic) the answer is the
same bytes. So the encoded body is kept per (image, question) and answered again with
the new request's correlation id; a new image drops every kept answer.

Only where the answer depends on nothing else: without an authorizer (with one, the
topics listed and the operations allowed depend on the principal and the ACLs), and not
for a request that auto-creates topics. At most ``MAX_ANSWERS`` per image, so requests
naming ever new topic lists cannot grow it.

A new image (any leader, ISR or topic change) still made the next answer cost the whole
~90 ms, and a benchmark that creates one topic per run caught every such answer as a
250 ms stall on a loaded machine. But an image keeps the ``TopicInfo`` of every topic
that did not change (``metadata.store``), and a topic's entry in the answer depends only
on that, the live brokers (offline replicas, leader errors), the version and the
operations allowed: ``TopicEntries`` keeps each topic's encoded entry for those, so an
answer after a change re-encodes the changed topics only, with or without an
authorizer.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from odradek.metadata.image import MetadataImage, TopicInfo

__all__ = ["MAX_ANSWERS", "MetadataAnswers", "TopicEntries"]

MAX_ANSWERS = 32


class MetadataAnswers:
    def __init__(self) -> None:
        self._image: MetadataImage | None = None
        self._bodies: dict[Hashable, bytes] = {}
        self.hits = 0

    def get(self, image: MetadataImage, question: Hashable) -> bytes | None:
        if image is not self._image:
            self._image = image
            self._bodies = {}
            return None
        body = self._bodies.get(question)
        if body is not None:
            self.hits += 1
        return body

    def put(self, image: MetadataImage, question: Hashable, body: bytes) -> None:
        if image is self._image and len(self._bodies) < MAX_ANSWERS:
            self._bodies[question] = body


class TopicEntries:
    """Encoded MetadataResponseTopic entries, per (topic, version, operations allowed),
    valid while the topic's ``TopicInfo`` is the same object and the live brokers are
    the same. Bounded by the image: entries of topics no longer in it are dropped when
    they outnumber the image's topics."""

    def __init__(self) -> None:
        self._image: MetadataImage | None = None
        self._live: frozenset[int] = frozenset()
        self._entries: dict[tuple[str, int, int], tuple[TopicInfo, bytes]] = {}
        self.encoded = 0  # entries encoded (misses), for tests

    def get(self, image: MetadataImage, info: TopicInfo, version: int, ops: int) -> bytes | None:
        if image is not self._image:
            self._new_image(image)
        kept = self._entries.get((info.name, version, ops))
        return kept[1] if kept is not None and kept[0] is info else None

    def put(self, info: TopicInfo, version: int, ops: int, entry: bytes) -> None:
        """After a ``get`` of the same image that found nothing."""
        self.encoded += 1
        self._entries[(info.name, version, ops)] = (info, entry)

    def _new_image(self, image: MetadataImage) -> None:
        self._image = image
        live = frozenset(image.brokers)
        if live != self._live:
            self._live = live
            self._entries = {}
        elif len(self._entries) > 4 * len(image.topics) + 64:
            topics = image.topics
            self._entries = {k: e for k, e in self._entries.items() if topics.get(k[0]) is e[0]}
