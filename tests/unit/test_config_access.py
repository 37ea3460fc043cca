"""One way to read config (issue 25 item 5): code outside the config modules never reads a
setting by its name from raw properties (``props.get("min.insync.replicas")``,
``config.get("log.cleaner.threads")``, ``configs["segment.bytes"]``) nor touches
``BrokerConfig.raw``. A component declares the settings it uses as a dataclass of
``configdefs.setting(...)`` fields and reads them through ``BrokerConfig.settings``; a
topic's override goes through ``config.topic_override``, a dynamic broker config through
``config.dynamic_broker_value``: so each setting's name, type and default are written
once, in the table. The scan is of the source's syntax tree (``ast``), not its text, so
strings in docs and log messages do not count."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from odradek.configdefs import BROKER_CONFIGS, TOPIC_CONFIGS

SRC = Path(__file__).resolve().parents[2] / "src" / "odradek"
SETTING_NAMES = frozenset(BROKER_CONFIGS) | frozenset(TOPIC_CONFIGS)
# The config modules themselves: the table (with its area modules, config_tables/), its
# parser and its reference renderer.
CONFIG_MODULES = {"config.py", "configdefs.py", "config_reference.py"}
CONFIG_PACKAGES = ("config_tables/",)

# Places that read a mapping keyed by a setting's name that is NOT this broker's
# configuration, each with the reason (path relative to src/odradek, enclosing function).
ALLOWED: dict[tuple[str, str], str] = {
    (
        "security/client_security.py",
        "ClientSecurity.from_properties",
    ): "a Kafka client's properties (librdkafka / Java client names), not the broker's",
    (
        "cluster/layout.py",
        "zk_identity",
    ): "the operator's partial overrides, checked for presence before a broker exists",
    (
        "cluster/local.py",
        "LocalCluster.up",
    ): "the properties the tool writes for its brokers (setdefault of ZooKeeper auth)",
    (
        "cluster/layout.py",
        "write_broker_config",
    ): "the properties file the tool writes for a broker",
    (
        "cluster/health.py",
        "_min_isr",
    ): "a DescribeConfigs answer from a running broker (admin client)",
    (
        "cli/schemas_cmd.py",
        "_registry_url",
    ): "a DescribeConfigs answer from a running broker (admin client)",
    (
        "cli/topics_cmd.py",
        "_min_isr",
    ): "a DescribeConfigs answer from a running broker (admin client)",
    (
        "schema_registry/kafka_store.py",
        "SchemasTopic._check_topic",
    ): "a DescribeConfigs answer for the _schemas topic (admin client)",
    ("spark/columnar_sink.py", "produce_settings"): "a Spark writer's Kafka producer options",
    ("chaos/scenarios.py", "<module>"): "the broker properties a chaos scenario writes",
}


def _name_arg(node: ast.AST) -> str | None:
    """The setting name ``node`` reads by: ``x.get("n")``/``pop``/``setdefault`` or
    ``x["n"]`` as a value (not an assignment target)."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("get", "pop", "setdefault")
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value in SETTING_NAMES
    ):
        return str(node.args[0].value)
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.ctx, ast.Load)
        and isinstance(node.slice, ast.Constant)
        and node.slice.value in SETTING_NAMES
    ):
        return str(node.slice.value)
    return None


def _walk(node: ast.AST, scope: list[str]) -> Iterator[tuple[ast.AST, str]]:
    """Every node with the qualified name of the class/function it is in."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield child, ".".join(scope) or "<module>"
            yield from _walk(child, [*scope, child.name])
        else:
            yield child, ".".join(scope) or "<module>"
            yield from _walk(child, scope)


def raw_setting_reads(root: Path = SRC) -> list[tuple[str, str, int, str]]:
    """(file, function, line, what) of every raw read of a setting outside the config
    modules and ``ALLOWED``."""
    found: list[tuple[str, str, int, str]] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in CONFIG_MODULES or rel.startswith(CONFIG_PACKAGES):
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node, where in _walk(tree, []):
            name = _name_arg(node)
            what = f"raw read of {name!r}" if name is not None else None
            if isinstance(node, ast.Attribute) and node.attr == "raw":
                what = "BrokerConfig.raw"
            if what is not None and (rel, where) not in ALLOWED:
                found.append((rel, where, getattr(node, "lineno", 0), what))
    return found


def test_no_raw_setting_reads_outside_the_config_module() -> None:
    found = raw_setting_reads()
    assert found == [], (
        "read these through a settings dataclass (configdefs.setting + "
        f"BrokerConfig.settings) or config.topic_override: {found}"
    )


def test_every_allowed_place_still_exists() -> None:
    """An allowance for code that is gone or renamed would silently cover new code."""
    places: set[tuple[str, str]] = set()
    for rel, _ in ALLOWED:
        tree = ast.parse((SRC / rel).read_text())
        places |= {(rel, where) for node, where in _walk(tree, []) if _name_arg(node)}
    assert set(ALLOWED) - places == set()


def test_the_scan_finds_a_raw_read(tmp_path: Path) -> None:
    """The rule bites: a component reading settings the old ways is reported."""
    (tmp_path / "component.py").write_text(
        "def start(config, overrides):\n"
        "    threads = config.get('log.cleaner.threads')\n"
        "    min_isr = overrides['min.insync.replicas']\n"
        "    mine = config.raw\n"
        "    overrides['segment.bytes'] = '1'  # a write, not a read\n"
        "    return config.get('not.a.setting')\n"
    )
    assert raw_setting_reads(tmp_path) == [
        ("component.py", "start", 2, "raw read of 'log.cleaner.threads'"),
        ("component.py", "start", 3, "raw read of 'min.insync.replicas'"),
        ("component.py", "start", 4, "BrokerConfig.raw"),
    ]
