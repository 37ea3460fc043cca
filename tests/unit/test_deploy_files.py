"""The shipped deployment files (deploy/) are valid for the broker and consistent."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest

from odradek.config import BrokerConfig, parse_properties
from odradek.configdefs import BROKER_CONFIGS

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
HOSTS = sorted((DEPLOY / "hosts").glob("host*"))


def test_three_hosts() -> None:
    assert [h.name for h in HOSTS] == ["host1", "host2", "host3"]


@pytest.mark.parametrize("host", HOSTS, ids=lambda h: h.name)
def test_server_properties_parse_with_only_known_keys(host: Path) -> None:
    props = parse_properties((host / "server.properties").read_text())
    assert set(props) <= set(BROKER_CONFIGS), set(props) - set(BROKER_CONFIGS)
    cfg = BrokerConfig.from_properties_file(host / "server.properties")
    assert cfg.raw["broker.id"] == host.name.removeprefix("host")


def test_hosts_agree_on_zookeeper_and_differ_in_identity() -> None:
    props = [parse_properties((h / "server.properties").read_text()) for h in HOSTS]
    assert len({p["zookeeper.connect"] for p in props}) == 1
    assert len({p["broker.id"] for p in props}) == 3
    assert len({p["listeners"] for p in props}) == 3
    zk_servers = {
        p["zookeeper.connect"].split(",")[i].split(":")[0] for p in props for i in range(3)
    }
    for h in HOSTS:
        zoo = parse_properties((h / "zoo.cfg").read_text())
        assert {zoo[f"server.{i}"].split(":")[0] for i in (1, 2, 3)} == zk_servers
        assert zoo["clientPortAddress"] in zk_servers


@pytest.mark.parametrize("unit", ["odradek-broker.service", "odradek-zookeeper.service"])
def test_systemd_units_have_the_required_sections(unit: str) -> None:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.read(DEPLOY / "systemd" / unit)
    assert {"Unit", "Service", "Install"} <= set(cp.sections())
    assert cp["Service"]["ExecStart"].strip()
    if unit == "odradek-broker.service":
        # Controlled shutdown needs SIGTERM and time before systemd's SIGKILL.
        assert cp["Service"]["KillSignal"] == "SIGTERM"
        assert int(cp["Service"]["TimeoutStopSec"]) >= 60
