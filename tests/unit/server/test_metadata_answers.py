"""Kept Metadata answers and topic entries (issue 29): the same bytes as the answer kio
encodes from the entity, the new request's correlation id, whole answers dropped with
the image and never kept where the answer depends on the principal, a topic's entry
encoded again only when that topic or the live brokers changed."""

from __future__ import annotations

import dataclasses
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from odradek.errors import ErrorCode
from odradek.metadata.image import BrokerInfo, MetadataImage, PartitionInfo, TopicInfo
from odradek.protocol.codec import (
    RequestHeaderInfo,
    encode_response,
    encode_response_body,
    frame_response,
)
from odradek.protocol.responses import response
from odradek.server.handlers.metadata import (
    AUTHORIZED_OPERATIONS_OMITTED,
    _response_shell,
    _topic_entry,
    _topic_error_entry,
    handle_metadata,
)
from odradek.server.metadata_answers import MAX_ANSWERS, MetadataAnswers, TopicEntries


def _image(*topics: str, leader: int = 1) -> MetadataImage:
    return MetadataImage(
        "cluster",
        1,
        {i: BrokerInfo(i, "127.0.0.1", 9090 + i) for i in (1, 2, 3)},
        {
            t: TopicInfo(
                t,
                uuid.uuid4(),
                {p: PartitionInfo(p, (1, 2, 3), leader, 1, (1, 2, 3)) for p in range(3)},
            )
            for t in topics
        },
        True,
    )


def _ctx(image: MetadataImage, authorizer: Any = None) -> Any:
    return SimpleNamespace(
        image=image,
        authorizer=authorizer,
        authorize=lambda *a: True,
        authorize_cluster=lambda *a: True,
        session=SimpleNamespace(listener="PLAINTEXT"),
        settings=SimpleNamespace(auto_create_topics_enable=False),
        metadata_answers=MetadataAnswers(),
        topic_entries=TopicEntries(),
    )


def _header(version: int, correlation_id: int) -> RequestHeaderInfo:
    return RequestHeaderInfo(3, version, correlation_id, "c", 0)


def _request(version: int, topics: list[str] | None = None) -> Any:
    named = None if topics is None else tuple(SimpleNamespace(name=t) for t in topics)
    return SimpleNamespace(
        topics=named,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
        include_cluster_authorized_operations=False,
    )


def _fresh(ctx: Any, h: RequestHeaderInfo, req: Any, names: list[str], denied: set[str]) -> bytes:
    """The answer as kio encodes the whole entity, built topic by topic."""
    v, image = h.api_version, ctx.image
    topics = tuple(
        _topic_error_entry(v, n, set(), denied)
        if n in denied or n not in image.topics
        else _topic_entry(v, image, image.topics[n], AUTHORIZED_OPERATIONS_OMITTED)
        for n in names
    )
    return encode_response(
        h, dataclasses.replace(_response_shell(ctx, v, image, req), topics=topics)
    )


@pytest.mark.parametrize("version", range(13))
def test_a_kept_answer_is_a_fresh_answer_with_the_new_correlation_id(version: int) -> None:
    image = _image("a", "b")
    ctx = _ctx(image)
    asked = [None, None, ["b"], ["b"], None, ["nope", "a"], ["bad name!"]]
    for n, topics in enumerate(asked):
        req = _request(version, topics)
        h = _header(version, 100 + n)
        names = sorted(image.topics) if topics is None else topics
        assert handle_metadata(ctx, h, req) == _fresh(ctx, h, req, names, set())
    assert ctx.metadata_answers.hits == 3
    assert ctx.topic_entries.encoded == 2  # each topic once


@pytest.mark.parametrize("version", [1, 8, 9, 10, 12])
def test_after_a_change_only_the_changed_topic_is_encoded_again(version: int) -> None:
    ctx = _ctx(_image("a", "b", "c"))
    req = _request(version)
    h = _header(version, 1)
    handle_metadata(ctx, h, req)
    old = ctx.image
    moved = TopicInfo("b", old.topics["b"].topic_id, {0: PartitionInfo(0, (1, 2, 3), 3, 2, (3,))})
    ctx.image = MetadataImage("cluster", 1, old.brokers, {**old.topics, "b": moved}, True)
    assert handle_metadata(ctx, h, req) == _fresh(ctx, h, req, ["a", "b", "c"], set())
    assert ctx.topic_entries.encoded == 4
    # A broker gone: every entry may name it offline, so every one is encoded again.
    brokers = {i: b for i, b in old.brokers.items() if i != 3}
    ctx.image = MetadataImage("cluster", 1, brokers, ctx.image.topics, True)
    assert handle_metadata(ctx, h, req) == _fresh(ctx, h, req, ["a", "b", "c"], set())
    assert ctx.topic_entries.encoded == 7


def test_topic_entries_of_deleted_topics_are_dropped() -> None:
    ctx = _ctx(_image(*[f"t{i}" for i in range(40)]))
    for v in range(13):
        handle_metadata(ctx, _header(v, 1), _request(v))
    ctx.image = _image("t0")  # new TopicInfo objects, the same brokers
    handle_metadata(ctx, _header(12, 1), _request(12))
    assert len(ctx.topic_entries._entries) <= 1


def test_a_new_image_drops_every_kept_answer() -> None:
    ctx = _ctx(_image("a"))
    req = _request(12)
    first = handle_metadata(ctx, _header(12, 1), req)
    ctx.image = _image("a", leader=2)  # a leader moved: a new image
    second = handle_metadata(ctx, _header(12, 1), req)
    assert first != second and ctx.metadata_answers.hits == 0
    assert handle_metadata(ctx, _header(12, 1), req) == second


def test_with_an_authorizer_no_answer_is_kept() -> None:
    ctx = _ctx(_image("a"), authorizer=object())
    req = _request(12)
    for n in range(3):
        h = _header(12, n)
        assert handle_metadata(ctx, h, req) == _fresh(ctx, h, req, ["a"], set())
    assert ctx.metadata_answers.hits == 0 and ctx.topic_entries.encoded == 1


def test_a_denied_topic_is_answered_as_denied() -> None:
    ctx = _ctx(_image("a", "secret"), authorizer=object())
    ctx.authorize = lambda op, rtype, name: name != "secret"
    req = _request(12, ["a", "secret"])
    h = _header(12, 5)
    assert handle_metadata(ctx, h, req) == _fresh(ctx, h, req, ["a", "secret"], {"secret"})


def test_answers_per_image_are_bounded() -> None:
    image = _image("a")
    answers = MetadataAnswers()
    assert answers.get(image, 0) is None
    for q in range(MAX_ANSWERS + 10):
        answers.put(image, q, b"x")
    assert answers.get(image, MAX_ANSWERS - 1) == b"x"
    assert answers.get(image, MAX_ANSWERS) is None


def test_frame_response_is_encode_response() -> None:
    for api_key, version, kwargs in (
        (
            3,
            12,
            dict(
                brokers=(),
                cluster_id=None,
                controller_id=-1,
                topics=(),
                cluster_authorized_operations=-2147483648,
            ),
        ),
        (
            18,
            3,
            dict(
                error_code=ErrorCode.none,
                api_keys=(),
                throttle_time=0,
                supported_features=(),
                finalized_features_epoch=-1,
                finalized_features=(),
                zk_migration_ready=False,
            ),
        ),
        (3, 1, dict(brokers=(), controller_id=-1, topics=())),
    ):
        h = RequestHeaderInfo(api_key, version, 42, "c", 0)
        entity = response(api_key, version, **kwargs)
        assert frame_response(h, encode_response_body(h, entity)) == encode_response(h, entity)
