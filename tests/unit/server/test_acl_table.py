"""The table of which ACL each served API checks (``odradek.server.acl_table``) is
complete, matches the handlers' code, and is what docs/security.md shows (issue 28)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from odradek.security.acl import ResourceType
from odradek.server.acl_table import ACL_CHECKS, markdown_table
from odradek.server.dispatch import HANDLERS

DOC = Path(__file__).resolve().parents[3] / "docs" / "security.md"
BEGIN = "<!-- acl-table: generated from odradek.server.acl_table; do not edit by hand -->"
END = "<!-- /acl-table -->"


def test_every_served_api_says_what_it_checks() -> None:
    missing = sorted(set(HANDLERS) - set(ACL_CHECKS))
    assert missing == [], f"APIs served without a row in ACL_CHECKS: {missing}"


def _checks_in(source: str) -> set[tuple[str, str]]:
    """(operation, resource) pairs the source checks: ``authorize(AclOperation.X,
    ResourceType.Y`` and ``authorize_cluster(AclOperation.X``; a check whose operation
    is a variable (``authorize(op, ResourceType.GROUP``) counts for every operation
    the module names."""
    found = {
        (op, res)
        for op, res in re.findall(
            r"authorize\w*\(\s*AclOperation\.(\w+),\s*ResourceType\.(\w+)", source
        )
    }
    found |= {
        (op, "CLUSTER") for op in re.findall(r"authorize_cluster\(\s*AclOperation\.(\w+)", source)
    }
    named = set(re.findall(r"AclOperation\.(\w+)", source))
    for res in re.findall(r"authorize\w*\(\s*[a-z_]\w*,\s*ResourceType\.(\w+)", source):
        found |= {(op, res) for op in named}
    # WRITE on any topic (the idempotent producer's alternative to IDEMPOTENT_WRITE).
    found |= {
        (op, "TOPIC") for op in re.findall(r"authorize_any_topic\(\s*AclOperation\.(\w+)", source)
    }
    return found


def test_each_row_is_checked_in_its_handlers_module() -> None:
    wrong = []
    for key, handler in HANDLERS.items():
        module = inspect.getmodule(handler)
        assert module is not None
        checks = _checks_in(inspect.getsource(module))
        for c in ACL_CHECKS[key]:
            if (c.operation.name, c.resource.name) not in checks:
                wrong.append((key, c.operation.name, c.resource.name))
    assert wrong == [], f"rows no check in the handler's module matches: {wrong}"


def test_the_rows_name_real_resources() -> None:
    for checks in ACL_CHECKS.values():
        for c in checks:
            assert c.resource not in (ResourceType.ANY, ResourceType.UNKNOWN)


def test_docs_show_the_table() -> None:
    text = DOC.read_text()
    assert BEGIN in text and END in text, f"{DOC} lacks the generated table's markers"
    shown = text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"
    assert shown == markdown_table(list(HANDLERS)), (
        "docs/security.md's ACL table is stale: replace it with "
        "odradek.server.acl_table.markdown_table(list(HANDLERS))"
    )
