"""Fault rule specs are built exactly (pure; issue 6 item 1, docs/platform-notes.md, network faults)."""

from __future__ import annotations

import os

import pytest

from odradek.chaos.faults import (
    TAG_PREFIX,
    HtbLink,
    IptRule,
    htb_major,
    htb_root_add_cmd,
    htb_root_del_cmd,
    new_tag,
    partition_rules,
)


def test_partition_both_directions_drops_each_way_with_one_tag() -> None:
    rules = partition_rules("127.0.5.2", "127.0.5.3", "odradek-chaos-1-1")
    assert [(r.chain, r.src, r.dst) for r in rules] == [
        ("INPUT", "127.0.5.2", "127.0.5.3"),
        ("INPUT", "127.0.5.3", "127.0.5.2"),
    ]
    assert rules[0].add_cmd() == [
        "iptables",
        "-w",
        "5",
        "-I",
        "INPUT",
        "-s",
        "127.0.5.2/32",
        "-d",
        "127.0.5.3/32",
        "-m",
        "comment",
        "--comment",
        "odradek-chaos-1-1",
        "-j",
        "DROP",
    ]
    # Deleted by its exact spec (never a flush, never a rule number).
    assert rules[0].delete_cmd()[:5] == ["iptables", "-w", "5", "-D", "INPUT"]
    assert rules[0].delete_cmd()[5:] == rules[0].add_cmd()[5:]


def test_one_direction_and_lossy() -> None:
    rules = partition_rules("127.0.5.2", "127.0.5.3", "t", direction="a->b", probability=0.3)
    assert len(rules) == 1
    spec = rules[0].spec()
    assert spec[spec.index("--probability") + 1] == "0.30000"
    assert "statistic" in spec and spec[spec.index("--mode") + 1] == "random"
    (r,) = partition_rules("127.0.5.2", "127.0.5.3", "t", direction="b->a")
    assert (r.src, r.dst) == ("127.0.5.3", "127.0.5.2")


def test_cgroup_rule_for_a_process_that_cannot_bind() -> None:
    rules = partition_rules("127.0.5.1", "127.0.5.2", "t", a_cgroup="odradek/zk-127.0.5.1-2181")
    cg = [r for r in rules if r.cgroup]
    assert len(cg) == 1 and cg[0].chain == "OUTPUT" and cg[0].dst == "127.0.5.2"
    spec = cg[0].spec()
    assert spec[spec.index("--path") + 1] == "odradek/zk-127.0.5.1-2181"
    with pytest.raises(ValueError):
        IptRule("INPUT", "t", dst="127.0.5.2", cgroup="x")


@pytest.mark.parametrize("addr", ["10.0.0.1", "192.168.1.5", "8.8.8.8"])
def test_only_loopback_addresses(addr: str) -> None:
    with pytest.raises(ValueError):
        partition_rules(addr, "127.0.5.3", "t")
    with pytest.raises(ValueError):
        HtbLink(0xD001, 0x10, addr)


def test_rule_needs_an_address_and_distinct_ends() -> None:
    with pytest.raises(ValueError):
        IptRule("INPUT", "t")
    with pytest.raises(ValueError):
        partition_rules("127.0.5.2", "127.0.5.2", "t")
    with pytest.raises(ValueError):
        IptRule("INPUT", "t", src="127.0.5.2", probability=1.5)


def test_htb_link_commands() -> None:
    link = HtbLink(0xD123, 0x11, "127.0.5.4", "1mbit")
    assert link.classid == "d123:11"
    assert link.class_add_cmd()[:9] == [
        "tc",
        "class",
        "add",
        "dev",
        "lo",
        "parent",
        "d123:",
        "classid",
        "d123:11",
    ]
    f = link.filter_add_cmd()
    assert f[f.index("prio") + 1] == "17" and f[-2:] == ["flowid", "d123:11"]
    assert ["match", "ip", "dst", "127.0.5.4/32"] == f[f.index("u32") + 1 : f.index("u32") + 5]
    # The filter is removed by its own priority, the class by its id.
    assert link.filter_del_cmd() == [
        "tc",
        "filter",
        "del",
        "dev",
        "lo",
        "parent",
        "d123:",
        "protocol",
        "ip",
        "prio",
        "17",
    ]
    assert link.class_del_cmd() == ["tc", "class", "del", "dev", "lo", "classid", "d123:11"]
    assert htb_root_add_cmd(0xD123)[-3:] == ["handle", "d123:", "htb"]
    assert htb_root_del_cmd(0xD123)[-3:] == ["handle", "d123:", "htb"]


def test_handles_and_tags_are_per_process() -> None:
    assert 0xD000 <= htb_major(12345) < 0xE000
    assert htb_major(1) != htb_major(2)
    a, b = new_tag(), new_tag()
    assert a != b and a.startswith(f"{TAG_PREFIX}-{os.getpid()}-")


def test_record_values_name_their_send() -> None:
    pytest.importorskip("pyarrow", reason="histories are Parquet (pip install .[spark])")
    from odradek.chaos.workload import decode_seq, encode_value

    v = encode_value("scn", 42, 100)
    assert len(v) == 100 and decode_seq(v) == 42
    assert decode_seq(b"foreign") == -1 and decode_seq(None) == -1
