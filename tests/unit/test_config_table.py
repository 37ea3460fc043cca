"""The settings table is the one source of truth: the code reads every honoured key, the
reference in docs/ is generated from it, and ignored / refused settings say so."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from odradek.config import BrokerConfig, describe_broker_config, validate_topic_configs
from odradek.config_reference import render_reference
from odradek.configdefs import BROKER_CONFIGS, DYNAMIC_BROKER_CONFIGS, TOPIC_CONFIGS, Support
from odradek.errors import KafkaError

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "odradek"
# The table itself (configdefs.py and its area modules in config_tables/) and its
# renderer name every key without reading it.
_NOT_READERS = {"configdefs.py", "config_reference.py"}
_TABLES = SRC / "config_tables"


def _reader(p: Path, also_not: frozenset[str] = frozenset()) -> bool:
    """Could ``p`` read a setting (not the table, not its renderer, not ``also_not``)?"""
    return p.name not in _NOT_READERS | also_not and p.parent != _TABLES


def _code() -> str:
    return "\n".join(p.read_text() for p in SRC.rglob("*.py") if _reader(p))


def _read_by_code(name: str, code: str) -> bool:
    """Read as a string literal (``config.get("x.y")``) or as the typed field ``x_y``."""
    if f'"{name}"' in code or f"'{name}'" in code:
        return True
    return re.search(r"\b" + re.escape(name.replace(".", "_")) + r"\b", code) is not None


def test_every_honoured_topic_config_is_read() -> None:
    code = _code()
    unread = [
        n
        for n, d in TOPIC_CONFIGS.items()
        if d.support is Support.HONOURED and not _read_by_code(n, code)
    ]
    assert unread == [], f"honoured topic configs no code reads: {unread}"


def test_every_honoured_broker_property_is_read() -> None:
    code = _code()
    # A broker property that is an honoured topic config's fallback is read through it.
    fallbacks = {
        s.name for d in TOPIC_CONFIGS.values() if d.support is Support.HONOURED for s in d.synonyms
    }
    unread = [
        n
        for n, d in BROKER_CONFIGS.items()
        if d.support is Support.HONOURED and n not in fallbacks and not _read_by_code(n, code)
    ]
    assert unread == [], f"honoured broker properties no code reads: {unread}"


def test_unsupported_settings_give_a_reason() -> None:
    for d in [*TOPIC_CONFIGS.values(), *BROKER_CONFIGS.values()]:
        assert (d.support is Support.HONOURED) == (d.reason == ""), d.name


def test_reference_is_generated_from_the_table() -> None:
    committed = (ROOT / "docs" / "configuration.md").read_text()
    assert committed == render_reference(), (
        "docs/configuration.md is stale: python -m odradek.config_reference > docs/configuration.md"
    )


_SETTING_ASSIGNMENT = re.compile(r"`([a-z][a-z0-9]*(?:\.[a-z0-9]+)+)=[^`]*`")
# Client-side settings the docs show next to broker settings (they are not the broker's).
_CLIENT_SETTINGS = {
    "bootstrap.servers",
    "group.id",
    "auto.offset.reset",
    "enable.idempotence",
    "linger.ms",
    "batch.size",
    "enable.auto.commit",
    "isolation.level",
    "security.protocol",
    "sasl.mechanism",
    "max.poll.records",
    "fetch.min.bytes",
    "fetch.wait.max.ms",
    "acks",
    "queue.buffering.max.ms",
    "message.send.max.retries",
    "batch.num.messages",
    "client.id",
    "message.timeout.ms",
    "fetch.queue.backoff.ms",
    "test.mock.num.brokers",  # librdkafka mock cluster (benchmarks)
    "odradek.client",  # the Spark source's option (docs/spark.md)
    "odradek.sink.guarantee",  # the Spark sink's option (docs/spark.md)
    # the Spark source's Avro options (docs/spark.md)
    "value.format",
    "value.decode.errors",
    "value.subject",
    "value.schema.version",
    "schema.registry.url",
    # librdkafka's own test suite's test.conf (docs/compatibility.md)
    "test.timeout.multiplier",
    "test.topic.random",
}


def test_every_setting_the_docs_assign_is_in_the_table() -> None:
    known = set(BROKER_CONFIGS) | set(TOPIC_CONFIGS) | _CLIENT_SETTINGS
    missing: list[str] = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for name in _SETTING_ASSIGNMENT.findall(doc.read_text()):
            if name not in known and not name.startswith(("spark.", "kafka.")):
                missing.append(f"{doc.name}: {name}")
    assert missing == [], f"documented settings missing from the table: {missing}"


def _props(**extra: str) -> dict[str, str]:
    return {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181", **extra}


def test_ignored_and_unknown_broker_settings_warn(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="odradek.config"):
        BrokerConfig.from_dict(
            _props(**{"num.io.threads": "16", "no.such.setting": "1", "num.partitions": "3"})
        )
    text = caplog.text
    assert "'num.io.threads' is accepted but ignored" in text
    assert "'no.such.setting' was supplied but isn't a known config" in text
    assert "num.partitions" not in text


def test_refused_settings_are_errors() -> None:
    with pytest.raises(KafkaError, match=r"remote\.storage\.enable"):
        validate_topic_configs({"remote.storage.enable": "true"})
    assert validate_topic_configs({"remote.storage.enable": "false"}) == {
        "remote.storage.enable": "false"
    }


def test_ignored_topic_config_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="odradek.config"):
        validate_topic_configs({"segment.jitter.ms": "100", "retention.ms": "1000"})
    assert "'segment.jitter.ms=100' is accepted but ignored" in caplog.text
    assert "retention.ms" not in caplog.text


def test_describe_configs_documents_support() -> None:
    entries = {e.name: e for e in describe_broker_config(BrokerConfig.from_dict(_props()))}
    assert "IGNORED by Odradek" in (entries["num.replica.fetchers"].documentation or "")
    assert "IGNORED" not in (entries["num.partitions"].documentation or "")


def test_no_ignored_setting_is_read() -> None:
    """The other direction: a setting marked ignored that code reads was implemented and
    must be marked honoured. config.py is left out: it maps every topic config into the
    typed topic settings whatever its support."""
    code = "\n".join(
        p.read_text() for p in SRC.rglob("*.py") if _reader(p, frozenset({"config.py"}))
    )
    read = [
        n
        for n, d in [*TOPIC_CONFIGS.items(), *BROKER_CONFIGS.items()]
        if d.support is Support.IGNORED and (f'"{n}"' in code or f"'{n}'" in code)
    ]
    assert read == [], f"ignored settings the code reads (mark them honoured): {read}"


def _settings_classes() -> list[type]:
    """Every settings dataclass in the source: a class with a ``setting(...)`` field."""
    import dataclasses  # noqa: PLC0415
    import importlib  # noqa: PLC0415

    found: dict[str, type] = {}
    for path in sorted(SRC.rglob("*.py")):
        if not _reader(path) or " = setting(" not in path.read_text():
            continue
        rel = path.relative_to(SRC.parent).with_suffix("")
        module = importlib.import_module(".".join(rel.parts))
        for obj in vars(module).values():
            if (
                isinstance(obj, type)
                and dataclasses.is_dataclass(obj)
                and any("setting" in f.metadata for f in dataclasses.fields(obj))
            ):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return list(found.values())


def test_settings_classes_are_found() -> None:
    names = {c.__name__ for c in _settings_classes()}
    assert {
        "ControllerSettings",
        "FetcherSettings",
        "ReplicaManagerSettings",
        "BrokerSettings",
        "GroupConfig",
        "OffsetsSettings",
        "TxnCoordinatorSettings",
        "ServerSettings",
        "CleanerSettings",
        "SecuritySettings",
    } <= names


def _frozen(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value


def test_settings_objects_are_typed_from_the_table() -> None:
    """Each field of a component's settings object names an honoured table key, has the
    table's type and default, and is filled from a broker's effective values."""
    import dataclasses  # noqa: PLC0415

    from odradek.configdefs import python_type, settings_from  # noqa: PLC0415

    config = BrokerConfig.from_dict(
        _props(**{"replica.fetch.backoff.ms": "250", "auto.leader.rebalance.enable": "false"})
    )
    for cls in _settings_classes():
        assert cls.__dataclass_params__.frozen, cls  # type: ignore[attr-defined]
        built = config.settings(cls)
        defaults = settings_from(cls)
        for f in dataclasses.fields(cls):
            if "setting" not in f.metadata:  # a nested settings object, checked itself
                continue
            name = f.metadata["setting"]
            d = BROKER_CONFIGS[name]
            assert d.support is Support.HONOURED, name
            expected = python_type(d).__name__
            if expected == "list":  # a LIST is a tuple in a (frozen) settings object
                expected = "tuple[str, ...]"
            if d.parsed_default() is None:  # no default: None until set
                expected += " | None"
            assert f.type == expected, (cls.__name__, f.name, f.type)
            assert getattr(defaults, f.name) == _frozen(d.parsed_default())
            assert getattr(built, f.name) == _frozen(config.get(name))
    from odradek.replication.fetcher import FetcherSettings  # noqa: PLC0415
    from odradek.replication.settings import ReplicaManagerSettings  # noqa: PLC0415

    assert FetcherSettings.from_config(config).backoff_ms == 250
    assert FetcherSettings().backoff_ms == 1000
    # The replica manager's settings carry the broker's fetcher settings, not defaults.
    assert ReplicaManagerSettings.from_config(config).fetcher.backoff_ms == 250
    assert ReplicaManagerSettings.defaults().fetcher.backoff_ms == 1000


def test_typed_settings_take_their_defaults_from_the_table() -> None:
    """BrokerConfig and LogConfig write no default of their own: every field's default is
    read from configdefs.py through ``_default`` (or is None / an empty container), so
    the table stays the one place a default lives (issue 16 item 1)."""
    import ast
    import dataclasses

    from odradek import config as config_module
    from odradek.config import BrokerConfig
    from odradek.storage import log_types

    def field_defaults(module: object, cls: str) -> dict[str, ast.expr]:
        tree = ast.parse(Path(module.__file__).read_text())  # type: ignore[attr-defined]
        node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
        return {
            s.target.id: s.value
            for s in node.body
            if isinstance(s, ast.AnnAssign)
            and isinstance(s.target, ast.Name)
            and s.value is not None
        }

    def from_table(value: ast.expr) -> bool:
        if isinstance(value, ast.Constant) and value.value is None:
            return True
        calls = [n for n in ast.walk(value) if isinstance(n, ast.Call)]
        if any(isinstance(c.func, ast.Name) and c.func.id == "_default" for c in calls):
            return True
        # field(default_factory=dict|list): an empty container, not a setting's default
        return (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id == "field"
            and all(
                isinstance(k.value, ast.Name) and k.value.id in ("dict", "list")
                for k in value.keywords
            )
        )

    for module, cls in ((config_module, "BrokerConfig"), (log_types, "LogConfig")):
        written = [name for name, v in field_defaults(module, cls).items() if not from_table(v)]
        assert written == [], f"{cls} writes its own defaults for {written}"

    # And the mapping is right: a BrokerConfig built directly equals one read from an
    # empty properties file (every default through the table's parser).
    direct = BrokerConfig(broker_id=0, zookeeper_connect="zk:2181")
    parsed = BrokerConfig.from_dict({"broker.id": "0", "zookeeper.connect": "zk:2181"})
    for f in dataclasses.fields(BrokerConfig):
        if f.name != "raw":
            assert getattr(direct, f.name) == getattr(parsed, f.name), f.name


def test_operations_guide_lists_the_dynamic_broker_configs() -> None:
    """docs/operations.md's table of dynamic broker configs names exactly the ones
    AlterConfigs accepts on a BROKER resource (it once said there were none)."""
    lines = (ROOT / "docs" / "operations.md").read_text().splitlines()
    start = lines.index("| broker config | takes effect |")
    listed: set[str] = set()
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        listed.update(re.findall(r"`([a-z0-9.]+)`", line.split("|")[1]))
    assert listed == set(DYNAMIC_BROKER_CONFIGS)
