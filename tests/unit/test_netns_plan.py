"""Pure parts of odradek.cluster.netns: names, addresses, setup and teardown plans."""

from __future__ import annotations

import pytest

from odradek.cluster import netns


def test_addresses_mirror_the_loopback_layout() -> None:
    assert netns.host_address(7, "zk1") == "10.209.7.1"
    assert netns.host_address(7, "zk3") == "10.209.7.203"
    assert netns.host_address(7, "b1") == "10.209.7.2"
    assert netns.host_address(7, "b3") == "10.209.7.4"
    assert netns.host_address(7, "c2") == "10.209.7.182"


@pytest.mark.parametrize("role", ["x1", "b0", "zk0", "zk10", "c0", "c20", "b", "b1 ", "B1"])
def test_bad_roles_are_rejected(role: str) -> None:
    with pytest.raises(ValueError):
        netns.role_octet(role)


@pytest.mark.parametrize("block", [0, 255, -1])
def test_block_out_of_range(block: int) -> None:
    with pytest.raises(ValueError):
        netns.namespace_name(block, "b1")


def test_interface_names_fit_the_kernel_limit() -> None:
    for role in ("b178", "zk9", "c19"):
        for name in (*netns.veth_names(254, role), netns.bridge_name(254)):
            assert len(name) <= 15, name


def test_setup_never_touches_other_interfaces_or_routes() -> None:
    cmds = netns.setup_commands(3, ["zk1", "b1", "c1"])
    flat = [" ".join(c) for c in cmds]
    assert not any("route" in c or "eth0" in c or "default" in c for c in flat)
    # every link or namespace argument carries the block's prefix
    for c in cmds:
        for word in c:
            if word.startswith("odx"):
                assert word.startswith("odx3"), word
    assert ["ip", "-n", "odx3-b1", "addr", "add", "10.209.3.2/24", "dev", "odx3pb1"] in cmds
    assert ["ip", "link", "set", "odx3vb1", "master", "odx3br"] in cmds


def test_teardown_removes_only_this_blocks_objects() -> None:
    namespaces = ["odx3-b1", "odx3-zk2", "odx33-b1", "odx3-b1x", "other", "odx3-c1"]
    links = ["lo", "eth0", "odx3br", "odx3vb1", "odx3vzk2", "odx31br", "odx3vb1x", "odx3pb1"]
    cmds = netns.teardown_commands(3, namespaces, links)
    assert cmds == [
        ["ip", "netns", "del", "odx3-b1"],
        ["ip", "netns", "del", "odx3-c1"],
        ["ip", "netns", "del", "odx3-zk2"],
        ["ip", "link", "del", "odx3vb1"],
        ["ip", "link", "del", "odx3vzk2"],
        ["ip", "link", "del", "odx3br"],  # the bridge last
    ]


def test_a_cut_drops_on_the_receiving_side_inside_the_namespaces() -> None:
    cmds = netns.cut_commands(3, "b1", "zk1", op="-I", comment="t1")
    assert cmds == [
        [
            "ip",
            "netns",
            "exec",
            "odx3-zk1",
            "iptables",
            "-w",
            "5",
            "-I",
            "INPUT",
            "-s",
            "10.209.3.2/32",
            "-m",
            "comment",
            "--comment",
            "t1",
            "-j",
            "DROP",
        ],
        [
            "ip",
            "netns",
            "exec",
            "odx3-b1",
            "iptables",
            "-w",
            "5",
            "-I",
            "INPUT",
            "-s",
            "10.209.3.1/32",
            "-m",
            "comment",
            "--comment",
            "t1",
            "-j",
            "DROP",
        ],
    ]
    # Healing deletes exactly those rules.
    heal = netns.cut_commands(3, "b1", "zk1", op="-D", comment="t1")
    assert [[("-I" if w == "-D" else w) for w in c] for c in heal] == cmds
    # Never a rule in the host's own tables: every command runs inside a namespace.
    for c in cmds + netns.cut_commands(3, "b2", netns.MANAGER, op="-I"):
        assert c[:3] == ["ip", "netns", "exec"] and c[3].startswith("odx3-")


def test_one_way_and_lossy_cuts() -> None:
    (only,) = netns.cut_commands(3, "b1", "b2", op="-I", direction="a->b")
    assert only[3] == "odx3-b2" and "10.209.3.2/32" in only  # b1's packets dropped at b2
    (back,) = netns.cut_commands(3, "b1", "b2", op="-I", direction="b->a")
    assert back[3] == "odx3-b1" and "10.209.3.3/32" in back
    (lossy, _) = netns.cut_commands(3, "b1", "b2", op="-I", probability=0.25)
    assert lossy[-8:-2] == ["-m", "statistic", "--mode", "random", "--probability", "0.25000"]


def test_the_manager_side_is_cut_in_the_hosts_namespace() -> None:
    """The scenarios' clients live in the manager's namespace (behind the bridge, .254):
    packets to it are dropped on the way out of the broker's namespace."""
    to_broker, to_manager = netns.cut_commands(3, netns.MANAGER, "b1", op="-I")
    assert to_broker[3:] == [
        "odx3-b1",
        "iptables",
        "-w",
        "5",
        "-I",
        "INPUT",
        "-s",
        "10.209.3.254/32",
        "-j",
        "DROP",
    ]
    assert to_manager[3:] == [
        "odx3-b1",
        "iptables",
        "-w",
        "5",
        "-I",
        "OUTPUT",
        "-d",
        "10.209.3.254/32",
        "-j",
        "DROP",
    ]


@pytest.mark.parametrize(
    "kw",
    [{"op": "-A"}, {"op": "-F"}, {"op": "-I", "direction": "up"}, {"op": "-I", "probability": 0.0}],
)
def test_bad_cuts_are_refused(kw: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        netns.cut_commands(3, "b1", "b2", **kw)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        netns.cut_commands(3, "b1", "b1", op="-I")


def test_rates_in_kbit() -> None:
    from odradek.chaos.netns_faults import rate_kbit

    assert rate_kbit("400kbit") == 400
    assert rate_kbit("1mbit") == 1000
    assert rate_kbit("2.5Mbit") == 2500
    assert rate_kbit("100bit") == 1
    with pytest.raises(ValueError):
        rate_kbit("fast")
