"""``odradek configs``: kafka-configs.sh's options and output format, over the Kafka protocol.

    --entity-type topics  --entity-name T --describe [--all]
    --entity-type topics  --entity-name T --alter --add-config k1=v1,k2=[a,b]
                                                  [--add-config-file F] --delete-config k3
    --entity-type brokers [--entity-name N] --describe [--all]
    --entity-type users   [--entity-name U] --describe
    --entity-type users   --entity-name U --alter
                          --add-config 'SCRAM-SHA-256=[iterations=8192,password=secret]'
                          --delete-config SCRAM-SHA-512

Users' SCRAM credentials go through AlterUserScramCredentials / DescribeUserScramCredentials
(APIs 51/50, KIP-554) with confluent-kafka's AdminClient: the client salts and hashes the
password, which never reaches the broker.
    --entity-type brokers --entity-name N | --entity-default --alter --add-config \
        follower.replication.throttled.rate=1048576 (dynamic broker configs, KIP-226)

Alterations go through confluent-kafka's AdminClient (a real Kafka client sending
IncrementalAlterConfigs, as kafka-configs.sh does since Kafka 2.3). Descriptions send
DescribeConfigs v4 with the project's own client codec: confluent-kafka returns
synonyms as a dict keyed by name, which loses a broker property listed twice (its
STATIC_BROKER_CONFIG and its DEFAULT_CONFIG value), and kafka-configs.sh prints both.

Output lines are Kafka's::

    Dynamic configs for topic T are:
      segment.bytes=1048576 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:segment.bytes=1048576, DEFAULT_CONFIG:log.segment.bytes=1073741824}
    Completed updating config for topic T.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from odradek.cli.common import add_command_config, admin_client, client_security

_TIMEOUT_S = 30.0

# DescribeConfigs v1+ config_source ids -> Kafka's ConfigEntry.ConfigSource names.
SOURCE_NAMES: dict[int, str] = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
    8: "GROUP_CONFIG",
}
_RESOURCE_TYPES = {"topics": 2, "brokers": 4, "users": -1, "clients": -1}
_SINGULAR = {"topics": "topic", "brokers": "broker", "users": "user"}
_SCRAM_DEFAULT_ITERATIONS = 4096  # kafka-configs' default
# What "--describe" (without --all) shows per entity type: its dynamic layer only.
_DYNAMIC_SOURCE = {"topics": 1, "brokers": 2}


class ConfigCommandError(Exception):
    """A user-facing failure: printed to stderr, exit status 1."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One DescribeConfigs entry, client side."""

    name: str
    value: str | None
    source: int
    is_sensitive: bool
    synonyms: tuple[tuple[str, str | None, int], ...]  # (name, value, source)


# =============================================================================== pure
# Kafka's ConfigCommand: a comma or '=' counts only outside [...] brackets.
_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"


def parse_add_config(text: str) -> dict[str, str]:
    """``k1=v1,k2=[a,b]`` -> {"k1": "v1", "k2": "a,b"} (Kafka's parseConfigsToBeAdded).

    Commas inside square brackets belong to the value; the brackets are dropped.
    """
    out: dict[str, str] = {}
    if not text.strip():
        return out
    for item in re.split("," + _OUTSIDE_BRACKETS, text):
        pair = re.split(r"\s*=\s*" + _OUTSIDE_BRACKETS, item, maxsplit=1)
        if len(pair) != 2 or not pair[0].strip():
            raise ConfigCommandError(
                'Invalid entity config: all configs to be added must be in the format "key=val".'
            )
        out[pair[0].strip()] = re.sub(r"[\[\]]", "", pair[1]).strip()
    return out


def parse_delete_config(text: str) -> list[str]:
    return [k.strip() for k in text.split(",") if k.strip()]


def _java_str(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def format_entry(e: Entry) -> str:
    """``  name=value sensitive=false synonyms={SOURCE:name=value, ...}`` (Kafka's line)."""
    syns = ", ".join(f"{SOURCE_NAMES.get(s, str(s))}:{n}={_java_str(v)}" for n, v, s in e.synonyms)
    return (
        f"  {e.name}={_java_str(e.value)} sensitive={_java_str(e.is_sensitive)} synonyms={{{syns}}}"
    )


def describe_lines(
    entity_type: str, entity_name: str, entries: Sequence[Entry], describe_all: bool
) -> list[str]:
    """kafka-configs --describe output for one entity: header, then sorted entries."""
    kind = "All" if describe_all else "Dynamic"
    if entity_type == "brokers" and entity_name == "":
        lines = ["Default configs for brokers in the cluster are:"]
        dynamic = 3  # DYNAMIC_DEFAULT_BROKER_CONFIG
    else:
        lines = [f"{kind} configs for {_SINGULAR[entity_type]} {entity_name} are:"]
        dynamic = _DYNAMIC_SOURCE[entity_type]
    for e in sorted(entries, key=lambda x: x.name):
        if describe_all or e.source == dynamic:
            lines.append(format_entry(e))
    return lines


# =============================================================================== wire
def _addresses(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for hp in bootstrap.split(","):
        host, _, port = hp.strip().rpartition(":")
        out.append((host.strip("[]"), int(port)))
    return out


def _request(addresses: Sequence[tuple[str, int]], entity: Any, security: Any = None) -> Any:
    """Send one request to the first broker that accepts a connection (over the one wire
    client, odradek.client, that the Spark connector uses too; TLS and SASL as the
    --command-config client properties say)."""
    from odradek.client.connection import ConnectionLost, KafkaConnection  # noqa: PLC0415
    from odradek.security.client_security import PLAINTEXT  # noqa: PLC0415

    last: Exception | None = None
    for host, port in addresses:
        try:
            with KafkaConnection(
                host,
                port,
                client_id="odradek-configs",
                timeout_s=_TIMEOUT_S,
                security=security or PLAINTEXT,
            ) as conn:
                return conn.request(entity)
        except ConnectionLost as e:
            last = e
    raise ConfigCommandError(f"no broker reachable in {list(addresses)}: {last}")


def alter_default_broker_configs(
    addresses: Sequence[tuple[str, int]], ops: Sequence[tuple[str, int, str | None]]
) -> None:
    """IncrementalAlterConfigs v1 on the ``<default>`` broker resource (empty name), which
    confluent-kafka's AdminClient cannot name; raises ConfigCommandError on failure."""
    from odradek.errors import error_name  # noqa: PLC0415
    from odradek.protocol.client_codec import nested_request, request_entity  # noqa: PLC0415

    req = request_entity(
        44,
        1,
        validate_only=False,
        resources=(
            nested_request(
                44,
                1,
                "AlterConfigsResource",
                resource_type=4,
                resource_name="",
                configs=tuple(
                    nested_request(44, 1, "AlterableConfig", name=k, config_operation=op, value=v)
                    for k, op, v in ops
                ),
            ),
        ),
    )
    for r in _request(addresses, req).responses:
        if int(r.error_code) != 0:
            raise ConfigCommandError(f"{error_name(int(r.error_code))}: {r.error_message}")


def describe_configs(
    addresses: Sequence[tuple[str, int]],
    resource_type: int,
    names: Sequence[str],
    security: Any = None,
) -> dict[str, list[Entry]]:
    """DescribeConfigs v4 with synonyms; raises ConfigCommandError on a resource error."""
    from odradek.errors import error_name  # noqa: PLC0415
    from odradek.protocol.client_codec import nested_request, request_entity  # noqa: PLC0415

    req = request_entity(
        32,
        4,
        resources=tuple(
            nested_request(
                32,
                4,
                "DescribeConfigsResource",
                resource_type=resource_type,
                resource_name=n,
                configuration_keys=None,
            )
            for n in names
        ),
        include_synonyms=True,
        include_documentation=False,
    )
    resp = _request(addresses, req, security)
    out: dict[str, list[Entry]] = {}
    for r in resp.results:
        if int(r.error_code) != 0:
            raise ConfigCommandError(
                f"{error_name(int(r.error_code))}: "
                f"{r.error_message or 'describing ' + r.resource_name}"
            )
        out[r.resource_name] = [
            Entry(
                c.name,
                c.value,
                int(c.config_source),
                bool(c.is_sensitive),
                tuple((s.name, s.value, int(s.source)) for s in c.synonyms),
            )
            for c in r.configs
        ]
    return out


# =============================================================================== command
def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "configs",
        help="describe and alter topic configs at runtime",
        description="Like kafka-configs.sh.",
    )
    p.add_argument("--bootstrap-server", required=True)
    # Repeatable, in Kafka's order: users and clients pair up into a (user, client-id)
    # quota entity ("--entity-type users --entity-name U --entity-type clients
    # --entity-default").
    p.add_argument(
        "--entity-type", required=True, choices=sorted(_RESOURCE_TYPES), action=_EntityAction
    )
    p.add_argument("--entity-name", action=_EntityAction)
    p.add_argument(
        "--entity-default",
        nargs=0,
        action=_EntityAction,
        help="brokers: the cluster-wide default (/config/brokers/<default>); "
        "users, clients: the default quota entity",
    )
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true")
    action.add_argument("--alter", action="store_true")
    p.add_argument(
        "--all",
        action="store_true",
        help="with --describe: every config, not only the dynamic ones",
    )
    p.add_argument("--add-config", default="", metavar="K=V,K2=[A,B]")
    p.add_argument("--add-config-file", metavar="FILE", help="a .properties file to add")
    p.add_argument("--delete-config", default="", metavar="K1,K2")
    add_command_config(p)
    p.set_defaults(func=_run)


class _EntityAction(argparse.Action):
    """Records --entity-type / --entity-name / --entity-default in command-line order
    (``entity_tokens``), and the first of each in ``entity_type`` / ``entity_name`` /
    ``entity_default`` for the single-entity commands."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        ns: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        tokens = list(getattr(ns, "entity_tokens", None) or [])
        tokens.append((self.dest, values))
        ns.entity_tokens = tokens
        if self.dest == "entity_default":
            if not any(d in ("entity_name", "entity_default") for d, _ in tokens[:-1]):
                ns.entity_default = True
        elif getattr(ns, self.dest, None) is None:
            setattr(ns, self.dest, values)


def entities_of(args: argparse.Namespace) -> list[tuple[str, Any]]:
    """[(entity type, name | quotas_cmd.DEFAULT | None)], the i-th name (or
    --entity-default) paired with the i-th type, as kafka-configs pairs them."""
    from odradek.cli.quotas_cmd import DEFAULT  # noqa: PLC0415

    tokens = getattr(args, "entity_tokens", None) or []
    types = [v for d, v in tokens if d == "entity_type"]
    names = [DEFAULT if d == "entity_default" else v for d, v in tokens if d != "entity_type"]
    return [(t, names[i] if i < len(names) else None) for i, t in enumerate(types)]


def _run(args: argparse.Namespace) -> int:
    args.entity_default = bool(getattr(args, "entity_default", False))
    try:
        entities = entities_of(args)
        if any(t in ("users", "clients") for t, _ in entities):
            return _users_and_clients(args, entities)
        if args.describe:
            return _describe(args)
        return _alter(args)
    except ConfigCommandError as e:
        print(str(e), file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - Kafka's tool prints the failure and exits 1
        print(
            f"Error while executing config command with args '{' '.join(sys.argv[1:])}'",
            file=sys.stderr,
        )
        print(_client_error_text(e), file=sys.stderr)
        return 1


def parse_scram_configs(to_add: dict[str, str]) -> dict[str, tuple[int, str]]:
    """``{"SCRAM-SHA-256": "iterations=8192,password=x"}`` -> {mechanism: (iterations,
    password)} (kafka-configs' syntax for user credentials)."""
    out = {}
    for mech, spec in to_add.items():
        if mech.upper() not in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise ConfigCommandError(
                f"Invalid config(s): {mech} (users take SCRAM-SHA-256 and SCRAM-SHA-512)"
            )
        fields: dict[str, str] = {}
        for kv in spec.split(","):
            k, sep, v = kv.partition("=")
            if not sep:
                raise ConfigCommandError(
                    f"Invalid SCRAM credential {mech}: expected [iterations=N,]password=P"
                )
            fields[k.strip()] = v
        if "password" not in fields:
            raise ConfigCommandError(f"Invalid SCRAM credential {mech}: password is missing")
        out[mech.upper()] = (
            int(fields.get("iterations", _SCRAM_DEFAULT_ITERATIONS)),
            fields["password"],
        )
    return out


def _users_and_clients(args: argparse.Namespace, entities: list[tuple[str, Any]]) -> int:
    """Quotas of users, clients and (user, client-id) (KIP-546), and users' SCRAM
    credentials (KIP-554), as kafka-configs.sh splits them."""
    from odradek.cli import quotas_cmd  # noqa: PLC0415

    types = [t for t, _ in entities]
    one_user = types == ["users"] and entities[0][1] is not quotas_cmd.DEFAULT
    if any(t not in quotas_cmd.ENTITY_TYPES for t in types):
        raise ConfigCommandError("users and clients entity types combine only with each other")
    if args.describe:
        quotas_cmd.run_quota_command(args, entities)
        return _describe_users(args) if one_user else 0
    to_add = parse_add_config(args.add_config)
    to_delete = parse_delete_config(args.delete_config)
    if not to_add and not to_delete:
        raise ConfigCommandError(
            "At least one of --add-config or --delete-config must be specified with --alter"
        )
    scram_add = {k: v for k, v in to_add.items() if k not in quotas_cmd.QUOTA_KEYS}
    scram_delete = [k for k in to_delete if k not in quotas_cmd.QUOTA_KEYS]
    if (scram_add or scram_delete) and not one_user:
        raise ConfigCommandError(f"Invalid config(s): {','.join([*scram_add, *scram_delete])}")
    quotas_cmd.run_quota_command(args, entities)
    if scram_add or scram_delete:
        return _alter_users(args, scram_add, scram_delete)
    return 0


def _describe_users(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    users = [args.entity_name] if args.entity_name else None
    fut = admin.describe_user_scram_credentials(users, request_timeout=_TIMEOUT_S)
    results = (
        {u: f.result(_TIMEOUT_S) for u, f in fut.items()}
        if isinstance(fut, dict)
        else fut.result(_TIMEOUT_S)
    )
    for user in sorted(results):
        desc = results[user]
        infos = ", ".join(
            f"{i.mechanism.name.replace('_', '-')}=iterations={i.iterations}"
            for i in desc.scram_credential_infos
        )
        print(f"SCRAM credential configs for user-principal '{user}' are {infos}")
    return 0


def _alter_users(args: argparse.Namespace, raw_add: dict[str, str], raw_delete: list[str]) -> int:
    import secrets  # noqa: PLC0415

    from confluent_kafka.admin import (  # noqa: PLC0415
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    if not args.entity_name:
        raise ConfigCommandError("an entity name must be specified with --alter of users")
    to_add = parse_scram_configs(raw_add)
    to_delete = [m.upper() for m in raw_delete]
    if not to_add and not to_delete:
        raise ConfigCommandError(
            "At least one of --add-config or --delete-config must be specified with --alter"
        )
    mech = {
        "SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
        "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512,
    }
    alterations: list[Any] = []
    for m, (iterations, password) in to_add.items():
        alterations.append(
            UserScramCredentialUpsertion(
                args.entity_name,
                ScramCredentialInfo(mech[m], iterations),
                password.encode(),
                secrets.token_bytes(32),
            )
        )
    for m in to_delete:
        if m not in mech:
            raise ConfigCommandError(f"Invalid config(s): {m}")
        alterations.append(UserScramCredentialDeletion(args.entity_name, mech[m]))
    admin = admin_client(args)
    for fut in admin.alter_user_scram_credentials(alterations, request_timeout=_TIMEOUT_S).values():
        fut.result(_TIMEOUT_S * 2)
    print(f"Completed updating config for user {args.entity_name}.")
    return 0


def _client_error_text(e: Exception) -> str:
    err = e.args[0] if e.args else None
    if err is not None and hasattr(err, "name") and hasattr(err, "str"):  # KafkaError
        return f"{err.name()}: {err.str()}"
    return f"{type(e).__name__}: {e}"


def _broker_addresses(args: argparse.Namespace) -> dict[str, tuple[str, int]]:
    md = admin_client(args).list_topics(timeout=_TIMEOUT_S)
    return {str(b.id): (b.host, b.port) for b in md.brokers.values()}


def _describe(args: argparse.Namespace) -> int:
    bootstrap = _addresses(args.bootstrap_server)
    et = args.entity_type
    if et == "topics":
        if args.entity_name:
            names = [args.entity_name]
        else:
            md = admin_client(args).list_topics(timeout=_TIMEOUT_S)
            names = sorted(md.topics)
        described = describe_configs(bootstrap, 2, names, client_security(args)) if names else {}
        for n in names:
            print("\n".join(describe_lines(et, n, described.get(n, []), args.all)))
        return 0
    # Brokers: each answers DescribeConfigs only for itself (as in Kafka).
    if args.entity_default:
        entries = describe_configs(bootstrap, 4, [""])[""]
        print("\n".join(describe_lines(et, "", entries, args.all)))
        return 0
    brokers = _broker_addresses(args)
    ids = [args.entity_name] if args.entity_name else sorted(brokers, key=int)
    for bid in ids:
        if bid not in brokers:
            raise ConfigCommandError(f"The broker {bid} is not registered in the cluster.")
        entries = describe_configs([brokers[bid]], 4, [bid], client_security(args))[bid]
        print("\n".join(describe_lines(et, bid, entries, args.all)))
    return 0


def _alter(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import (  # noqa: PLC0415
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    et = args.entity_type
    if args.entity_default and et == "brokers":
        args.entity_name = ""
    elif not args.entity_name:
        raise ConfigCommandError(f"an entity name must be specified with --alter of {et}")
    to_add = parse_add_config(args.add_config)
    if args.add_config_file:
        from odradek.config import parse_properties  # noqa: PLC0415

        to_add.update(parse_properties(Path(args.add_config_file).read_text()))
    to_delete = parse_delete_config(args.delete_config)
    if not to_add and not to_delete:
        raise ConfigCommandError(
            "At least one of --add-config, --add-config-file or "
            "--delete-config must be specified with --alter"
        )
    if et == "topics":
        # Kafka's ConfigCommand refuses to delete what is not set on the entity.
        current = describe_configs(
            _addresses(args.bootstrap_server), 2, [args.entity_name], client_security(args)
        )[args.entity_name]
        dynamic = {e.name for e in current if e.source == _DYNAMIC_SOURCE[et]}
        missing = [k for k in to_delete if k not in dynamic]
        if missing:
            raise ConfigCommandError(f"Invalid config(s): {','.join(missing)}")
    if et == "brokers" and args.entity_name == "":
        alter_default_broker_configs(
            _addresses(args.bootstrap_server),
            [(k, 0, v) for k, v in to_add.items()] + [(k, 1, None) for k in to_delete],
        )
        print("Completed updating default config for brokers in the cluster.")
        return 0
    rtype = ResourceType.TOPIC if et == "topics" else ResourceType.BROKER
    ops = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in to_add.items()
    ] + [ConfigEntry(k, "", incremental_operation=AlterConfigOpType.DELETE) for k in to_delete]
    resource = ConfigResource(rtype, args.entity_name, incremental_configs=ops)
    admin = admin_client(args)  # keep a reference: a collected client fails its futures
    futures = admin.incremental_alter_configs([resource], request_timeout=_TIMEOUT_S)
    for fut in futures.values():
        fut.result(_TIMEOUT_S * 2)
    if et == "brokers" and args.entity_name == "":
        print("Completed updating default config for brokers in the cluster.")
    else:
        print(f"Completed updating config for {_SINGULAR[et]} {args.entity_name}.")
    return 0
