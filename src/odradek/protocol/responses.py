"""Build kio response entities for any version from one set of keyword arguments.

kio generates one dataclass per (API, version) and each version has only its own fields,
so a handler that serves v0–v12 would otherwise need a branch per version. ``build``
drops the fields a version does not have, converts plain ints to ``timedelta`` where the
schema says so, and resolves nested classes of the same version by name.
"""

from __future__ import annotations

import datetime
import sys
from dataclasses import fields
from functools import cache
from typing import Any

from odradek.protocol.codec import response_class

_ZERO = datetime.timedelta(0)


@cache
def _field_info(cls: type) -> dict[str, str]:
    return {f.name: f.metadata.get("kafka_type", "") for f in fields(cls)}


@cache
def nested(api_key: int, version: int, name: str) -> type:
    """The nested response class ``name`` of (api_key, version)."""
    module = sys.modules[response_class(api_key, version).__module__]
    return getattr(module, name)


def build(cls: type, /, **kwargs: Any) -> Any:
    info = _field_info(cls)
    args: dict[str, Any] = {}
    for name, value in kwargs.items():
        kind = info.get(name)
        if kind is None:
            continue
        if kind.startswith("timedelta") and isinstance(value, int):
            value = datetime.timedelta(milliseconds=value)
        args[name] = value
    for name in info:
        if name not in args and name == "throttle_time":
            args[name] = _ZERO
    return cls(**args)


def response(api_key: int, version: int, /, **kwargs: Any) -> Any:
    return build(response_class(api_key, version), **kwargs)


def part(api_key: int, version: int, name: str, /, **kwargs: Any) -> Any:
    return build(nested(api_key, version, name), **kwargs)
