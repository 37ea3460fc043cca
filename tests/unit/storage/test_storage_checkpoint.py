"""storage.checkpoint: Kafka's text checkpoint files."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.errors import ErrorCode, KafkaError
from odradek.storage.checkpoint import read_checkpoint, write_checkpoint


def test_round_trip_and_format(tmp_path: Path) -> None:
    p = tmp_path / "recovery-point-offset-checkpoint"
    assert read_checkpoint(p) == {}
    data = {("orders", 1): 99, ("orders", 0): 1234, ("a.b-c_d", 7): 0}
    write_checkpoint(p, data)
    assert read_checkpoint(p) == data
    assert p.read_text() == "0\n3\na.b-c_d 7 0\norders 0 1234\norders 1 99\n"
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()
    write_checkpoint(p, {})
    assert read_checkpoint(p) == {} and p.read_text() == "0\n0\n"


@pytest.mark.parametrize("text", ["1\n0\n", "0\n2\nt 0 1\n", "0\n1\nt x 1\n", "", "0\n1\nt 0\n"])
def test_malformed_is_storage_error(tmp_path: Path, text: str) -> None:
    p = tmp_path / "cp"
    p.write_text(text)
    with pytest.raises(KafkaError) as ei:
        read_checkpoint(p)
    assert ei.value.code == ErrorCode.kafka_storage_error
