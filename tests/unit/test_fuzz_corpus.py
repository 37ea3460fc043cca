"""The fuzzing harness's corpus and mutator (pure parts of odradek.fuzz)."""

from __future__ import annotations

from odradek.fuzz.corpus import FUZZ_TOPICS, build_corpus
from odradek.fuzz.harness import CANARY_TOPIC
from odradek.fuzz.mutator import MUTATIONS, Mutator
from odradek.protocol.codec import decode_request
from odradek.protocol.versions import SERVED


def test_corpus_covers_every_served_version_and_decodes() -> None:
    corpus = build_corpus(seed=3)
    covered = {(e.api_key, e.api_version) for e in corpus}
    assert covered == {(k, v) for k, (lo, hi) in SERVED.items() for v in range(lo, hi + 1)}
    assert any(e.extreme for e in corpus) and any(not e.extreme for e in corpus)
    for e in corpus:
        header, _ = decode_request(e.payload)
        assert (header.api_key, header.api_version) == (e.api_key, e.api_version)


def test_corpus_never_names_the_liveness_topic() -> None:
    assert CANARY_TOPIC not in FUZZ_TOPICS
    for seed in range(3):
        assert not any(CANARY_TOPIC.encode() in e.payload for e in build_corpus(seed=seed))


def test_mutator_is_seeded_and_uses_every_operator() -> None:
    corpus = [e.payload for e in build_corpus(seed=1)]
    a = Mutator(corpus, seed=5)
    b = Mutator(corpus, seed=5)
    seen: set[str] = set()
    for i in range(2000):
        pa, ops = a.mutate(corpus[i % len(corpus)])
        pb, _ = b.mutate(corpus[i % len(corpus)])
        assert pa == pb
        assert len(pa) >= 8
        seen.update(ops)
    assert seen == {name for name, _ in MUTATIONS}
