"""Confluent's REST API v1 on aiohttp: paths, query parameters, the error body
``{"error_code", "message"}`` and the ``application/vnd.schemaregistry.v1+json`` type.

Writes on a secondary instance are forwarded to the primary over HTTP (as Confluent's
followers do); the secondary then reads the topic up to now so its own next read sees the
write. Registry calls block on the topic, so they run in threads.

With ``security`` (a secured cluster) every request needs HTTP basic authentication, and
each call needs an ACL: ``_need`` and ``_may`` below name the operation and resource of
each path (the table is in docs/schema-registry.md). A secondary authenticates a write and
forwards it with the client's ``Authorization`` header; the primary authenticates and
authorizes it again, so the forwarding header grants nothing by itself."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from odradek.schema_registry import errors
from odradek.schema_registry.protobuf_descriptor import serialized_form
from odradek.schema_registry.registry import Registry
from odradek.schema_registry.schemas import SCHEMA_TYPES
from odradek.schema_registry.security import (
    PRINCIPAL_KEY,
    REGISTRY_RESOURCE,
    RegistrySecurity,
    denied,
)
from odradek.security.acl import AclOperation, ResourceType

__all__ = ["make_app", "CONTENT_TYPE", "MAX_BODY"]

logger = logging.getLogger(__name__)

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
MAX_BODY = 4 * 1024 * 1024  # a request body larger than this gets 413
_FORWARD_TIMEOUT = aiohttp.ClientTimeout(total=60)
_FORWARDED_HEADER = "X-Odradek-Forwarded"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _reply(payload: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status, text=json.dumps(payload), content_type=CONTENT_TYPE.split(";")[0]
    )


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() == "true"


def _formatted(request: web.Request, schema: dict[str, Any]) -> dict[str, Any]:
    """``?format=serialized``: a Protobuf schema as base64 FileDescriptorProto (what
    confluent-kafka's ProtobufDeserializer asks for), whichever form it was registered in."""
    if schema.get("schemaType") == "PROTOBUF" and request.query.get("format") == "serialized":
        try:
            return {**schema, "schema": serialized_form(schema["schema"])}
        except (ValueError, IndexError) as e:
            raise errors.invalid_schema(str(e)) from e
    return schema


async def _body(request: web.Request) -> Any:
    raw = await request.read()  # bounded by the app's client_max_size
    try:
        return json.loads(raw) if raw else None
    except RecursionError:
        # json's C decoder recurses per nesting level: a body of "[[[[..." would be a 500.
        raise errors.RegistryError(400, 400, "The body is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise errors.RegistryError(400, 400, f"Unexpected character in the body: {e}") from e


def make_app(
    registry: Registry,
    *,
    primary_url: Callable[[], str | None] = lambda: None,
    catch_up: Callable[[], None] = lambda: None,
    security: RegistrySecurity | None = None,
    forward_ssl: ssl.SSLContext | None = None,
) -> web.Application:
    """``primary_url()``: None when this instance is the primary, else where to forward
    writes; ``catch_up()``: read the topic up to now (after a forwarded write);
    ``security``: authenticate and authorize every request; ``forward_ssl``: how to
    verify an https primary."""

    @web.middleware
    async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except errors.RegistryError as e:
            response = _reply(e.body(), e.status)
            response.headers.update(e.headers)
            return response
        except web.HTTPRequestEntityTooLarge:
            return _reply({"error_code": 413, "message": "Request body too large"}, 413)
        except web.HTTPException as e:
            if e.status >= 400:
                return _reply({"error_code": e.status, "message": e.reason}, e.status)
            raise

    @web.middleware
    async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        assert security is not None
        header = request.headers.get("Authorization", "")
        request[PRINCIPAL_KEY] = await security.authenticate(header)
        return await handler(request)

    def _may(request: web.Request, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        if security is None:
            return True
        return security.allowed(request[PRINCIPAL_KEY], request.remote or "", op, rtype, name)

    def _need(
        request: web.Request,
        op: AclOperation,
        subject: str | None,
    ) -> None:
        """``op`` on the subject, or on the registry (``subject`` None: a global call)."""
        if subject is None:
            rtype, name = ResourceType.REGISTRY, REGISTRY_RESOURCE
        else:
            rtype, name = ResourceType.SUBJECT, subject
        if not _may(request, op, rtype, name):
            raise denied(op, rtype, name)

    def _need_schema(request: web.Request, schema_id: int) -> None:
        """Confluent's SCHEMA_READ: READ on at least one subject the id is registered
        under (deleted versions included, as the lookup serves them); an unknown id is
        left to the lookup's 404."""
        if security is None:
            return
        users = registry.view.subjects_of(schema_id, include_deleted=True)
        if users and not any(
            _may(request, AclOperation.READ, ResourceType.SUBJECT, u.subject) for u in users
        ):
            raise denied(AclOperation.READ, ResourceType.SUBJECT, users[0].subject)

    async def call(fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    def write(handler: Handler) -> Handler:
        async def wrapped(request: web.Request) -> web.StreamResponse:
            target = primary_url()
            if target is None or request.headers.get(_FORWARDED_HEADER):
                return await handler(request)
            body = await request.read()
            headers = {"Content-Type": CONTENT_TYPE, _FORWARDED_HEADER: "1"}
            if "Authorization" in request.headers:  # the primary checks it again
                headers["Authorization"] = request.headers["Authorization"]
            try:
                async with (
                    aiohttp.ClientSession(timeout=_FORWARD_TIMEOUT) as session,
                    session.request(
                        request.method,
                        target.rstrip("/") + request.path_qs,
                        data=body,
                        headers=headers,
                        ssl=forward_ssl if forward_ssl is not None else True,
                    ) as resp,
                ):
                    text = await resp.text()
                    status = resp.status
            except (aiohttp.ClientError, TimeoutError) as e:
                # Confluent's 50003: the primary is gone or unreachable (an election follows).
                raise errors.RegistryError(
                    500, 50003, f"Error while forwarding the request to the primary: {e!r}"
                ) from e
            if status < 300:
                await call(catch_up)
            return web.Response(status=status, text=text, content_type=CONTENT_TYPE)

        return wrapped

    async def root(request: web.Request) -> web.Response:
        return _reply({})

    async def subjects(request: web.Request) -> web.Response:
        prefix = request.query.get("subjectPrefix", "")
        listed = registry.list_subjects(_flag(request, "deleted"), prefix)
        # Confluent's GLOBAL_SUBJECTS_READ, per subject: only those the user may describe
        # (any of READ, WRITE, DELETE on it implies DESCRIBE, as in Kafka).
        return _reply(
            [s for s in listed if _may(request, AclOperation.DESCRIBE, ResourceType.SUBJECT, s)]
        )

    async def versions(request: web.Request) -> web.Response:
        s = request.match_info["subject"]
        _need(request, AclOperation.READ, s)
        return _reply(registry.list_versions(s, _flag(request, "deleted")))

    async def register(request: web.Request) -> web.Response:
        s = request.match_info["subject"]
        _need(request, AclOperation.WRITE, s)
        return _reply(await call(registry.register, s, await _body(request)))

    async def lookup(request: web.Request) -> web.Response:
        s = request.match_info["subject"]
        _need(request, AclOperation.READ, s)
        body = await _body(request)
        return _reply(await call(registry.lookup, s, body, _flag(request, "deleted")))

    async def delete_subject(request: web.Request) -> web.Response:
        s = request.match_info["subject"]
        _need(request, AclOperation.DELETE, s)
        return _reply(await call(registry.delete_subject, s, _flag(request, "permanent")))

    async def get_version(request: web.Request) -> web.Response:
        m = request.match_info
        _need(request, AclOperation.READ, m["subject"])
        v = registry.get_version(m["subject"], m["version"], _flag(request, "deleted"))
        return _reply(_formatted(request, v))

    async def get_version_schema(request: web.Request) -> web.Response:
        m = request.match_info
        _need(request, AclOperation.READ, m["subject"])
        v = registry.get_version(m["subject"], m["version"], _flag(request, "deleted"))
        return web.Response(text=v["schema"], content_type=CONTENT_TYPE)

    async def referenced_by(request: web.Request) -> web.Response:
        m = request.match_info
        _need(request, AclOperation.READ, m["subject"])
        return _reply(registry.referenced_by(m["subject"], m["version"]))

    async def delete_version(request: web.Request) -> web.Response:
        m = request.match_info
        _need(request, AclOperation.DELETE, m["subject"])
        fn = registry.delete_version
        return _reply(await call(fn, m["subject"], m["version"], _flag(request, "permanent")))

    def _id(request: web.Request) -> int:
        try:
            return int(request.match_info["id"])
        except ValueError:
            raise errors.schema_not_found(f"Schema {request.match_info['id']} not found") from None

    def _schema_id(request: web.Request) -> int:
        schema_id = _id(request)
        subject = request.query.get("subject")
        if subject:
            _need(request, AclOperation.READ, subject)
        else:
            _need_schema(request, schema_id)
        return schema_id

    async def schema_by_id(request: web.Request) -> web.Response:
        got = registry.schema_by_id(_schema_id(request), request.query.get("subject"))
        return _reply(_formatted(request, got))

    async def schema_by_id_text(request: web.Request) -> web.Response:
        got = registry.schema_by_id(_schema_id(request), request.query.get("subject"))
        return web.Response(text=got["schema"], content_type=CONTENT_TYPE)

    def _readable_versions(request: web.Request) -> list[dict[str, Any]]:
        rows = registry.id_versions(_schema_id(request), _flag(request, "deleted"))
        read = AclOperation.READ
        return [r for r in rows if _may(request, read, ResourceType.SUBJECT, r["subject"])]

    async def id_versions(request: web.Request) -> web.Response:
        return _reply(_readable_versions(request))

    async def id_subjects(request: web.Request) -> web.Response:
        return _reply(sorted({r["subject"] for r in _readable_versions(request)}))

    async def types(request: web.Request) -> web.Response:
        return _reply(list(SCHEMA_TYPES))

    def _subject(request: web.Request) -> str | None:
        return request.match_info.get("subject")

    # Configuration and mode: DESCRIBE_CONFIGS to read, ALTER_CONFIGS to change, on the
    # subject (Confluent's SUBJECT_COMPATIBILITY_*) or on the registry (GLOBAL_*).
    async def get_config(request: web.Request) -> web.Response:
        _need(request, AclOperation.DESCRIBE_CONFIGS, _subject(request))
        default = _flag(request, "defaultToGlobal")
        return _reply(registry.get_config(_subject(request), default))

    async def put_config(request: web.Request) -> web.Response:
        _need(request, AclOperation.ALTER_CONFIGS, _subject(request))
        body = await _body(request)
        return _reply(await call(registry.set_config, _subject(request), body))

    async def delete_config(request: web.Request) -> web.Response:
        _need(request, AclOperation.ALTER_CONFIGS, _subject(request))
        return _reply(await call(registry.delete_config, _subject(request)))

    async def get_mode(request: web.Request) -> web.Response:
        _need(request, AclOperation.DESCRIBE_CONFIGS, _subject(request))
        default = _flag(request, "defaultToGlobal")
        return _reply(registry.get_mode(_subject(request), default))

    async def put_mode(request: web.Request) -> web.Response:
        _need(request, AclOperation.ALTER_CONFIGS, _subject(request))
        body = await _body(request)
        fn = registry.set_mode
        return _reply(await call(fn, _subject(request), body, _flag(request, "force")))

    async def delete_mode(request: web.Request) -> web.Response:
        subject = _subject(request)
        assert subject is not None
        _need(request, AclOperation.ALTER_CONFIGS, subject)
        return _reply(await call(registry.delete_mode, subject))

    async def compatibility(request: web.Request) -> web.Response:
        m = request.match_info
        # Confluent's table puts the compatibility check under SUBJECT_WRITE: it is the
        # dry run of a registration.
        _need(request, AclOperation.WRITE, m["subject"])
        body = await _body(request)
        verbose = _flag(request, "verbose")
        fn = registry.check
        return _reply(await call(fn, m["subject"], m.get("version"), body, verbose))

    middlewares = [errors_middleware] + ([auth_middleware] if security is not None else [])
    app = web.Application(client_max_size=MAX_BODY, middlewares=middlewares)
    r = app.router
    r.add_get("/", root)
    r.add_get("/subjects", subjects)
    r.add_get("/subjects/{subject}/versions", versions)
    r.add_post("/subjects/{subject}/versions", write(register))
    r.add_get("/subjects/{subject}/versions/{version}", get_version)
    r.add_get("/subjects/{subject}/versions/{version}/schema", get_version_schema)
    r.add_get("/subjects/{subject}/versions/{version}/referencedby", referenced_by)
    r.add_delete("/subjects/{subject}/versions/{version}", write(delete_version))
    r.add_post("/subjects/{subject}", lookup)
    r.add_delete("/subjects/{subject}", write(delete_subject))
    r.add_get("/schemas/types", types)
    r.add_get("/schemas/ids/{id}", schema_by_id)
    r.add_get("/schemas/ids/{id}/schema", schema_by_id_text)
    r.add_get("/schemas/ids/{id}/versions", id_versions)
    r.add_get("/schemas/ids/{id}/subjects", id_subjects)
    r.add_get("/config", get_config)
    r.add_put("/config", write(put_config))
    r.add_delete("/config", write(delete_config))
    r.add_get("/config/{subject}", get_config)
    r.add_put("/config/{subject}", write(put_config))
    r.add_delete("/config/{subject}", write(delete_config))
    r.add_get("/mode", get_mode)
    r.add_put("/mode", write(put_mode))
    r.add_get("/mode/{subject}", get_mode)
    r.add_put("/mode/{subject}", write(put_mode))
    r.add_delete("/mode/{subject}", write(delete_mode))
    r.add_post("/compatibility/subjects/{subject}/versions", compatibility)
    r.add_post("/compatibility/subjects/{subject}/versions/{version}", compatibility)
    return app
