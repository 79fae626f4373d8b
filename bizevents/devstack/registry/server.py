"""The HTTP face of the embedded registry: Confluent's REST API, the subset clients use.

Routes, JSON shapes, the ``application/vnd.schemaregistry.v1+json`` content type,
statuses and error codes match Confluent Schema Registry, so confluent-kafka's
``SchemaRegistryClient`` and serializers work against it unchanged. ``start`` runs it
on the current event loop; ``run_in_thread`` runs it beside synchronous code (tests).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import fcntl
import hmac
import json
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import structlog
from aiohttp import web

from bizevents.contracts.exceptions import RegistryError
from bizevents.devstack.registry import errors
from bizevents.devstack.registry.store import (
    MAX_NESTING,
    SUPPORTED_TYPES,
    RegistryStore,
    StoredSchema,
    SubjectVersion,
    parse_candidate,
    parse_version,
    too_deep,
)
from bizevents.plumbing.errors import ConfigError

log = structlog.get_logger(__name__)

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
#: What a write may send, as Confluent's registry accepts: none of them is a type a web
#: page's form can send, nor one a browser sends across origins without asking first.
WRITE_CONTENT_TYPES = frozenset(
    {CONTENT_TYPE, "application/vnd.schemaregistry+json", "application/json"}
)
#: Error messages are cut here: some quote the schema they refuse.
MAX_MESSAGE = 2000
LOCK_FILE = "registry.lock"

STORE = web.AppKey("store", RegistryStore)
MUTATION_LOCK = web.AppKey("mutation_lock", asyncio.Lock)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class BasicAuth:
    """The one user allowed in; the password stays out of reprs and logs."""

    user: str
    password: str = field(repr=False)

    def accepts(self, header: str | None) -> bool:
        if not header or not header.startswith("Basic "):
            return False
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return False
        user, sep, password = decoded.partition(":")
        # Compare both parts in constant time so timing does not reveal which was wrong.
        ok_user = hmac.compare_digest(user.encode(), self.user.encode())
        ok_password = hmac.compare_digest(password.encode(), self.password.encode())
        return bool(sep) and ok_user and ok_password


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(data).encode("utf-8"), status=status, headers={"Content-Type": CONTENT_TYPE}
    )


def _error(status: int, error_code: int, message: str) -> web.Response:
    if len(message) > MAX_MESSAGE:
        message = message[:MAX_MESSAGE] + f" ... ({len(message) - MAX_MESSAGE} more characters)"
    return _json({"error_code": error_code, "message": message}, status=status)


@web.middleware
async def _errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except RegistryError as exc:
        response = _error(exc.status, exc.error_code, str(exc))
        if exc.status == 401:
            response.headers["WWW-Authenticate"] = 'Basic realm="SchemaRegistry"'
        return response
    except web.HTTPException as exc:
        # Unknown routes and wrong methods answer in the registry's JSON error shape.
        return _error(exc.status, exc.status, f"HTTP {exc.status} {exc.reason}")
    except Exception:
        log.exception("registry.request_failed", method=request.method, path=request.path)
        return _error(500, 500, "Internal Server Error")


@web.middleware
async def _content_type_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Writes carry one of :data:`WRITE_CONTENT_TYPES`. A DELETE without a body needs
    none (clients send none, and no web page can send a DELETE unasked)."""
    bare_delete = (
        request.method == "DELETE"
        and "Content-Type" not in request.headers
        and not request.body_exists
    )
    if (
        request.method in ("POST", "PUT", "DELETE")
        and not bare_delete
        and request.content_type not in WRITE_CONTENT_TYPES
    ):
        raise errors.unsupported_media_type(request.headers.get("Content-Type", "(none)"))
    return await handler(request)


def _auth_middleware(auth: BasicAuth) -> Any:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        # The liveness probe carries no data, and the dev stack polls it without credentials.
        if request.path.rstrip("/") != "/health" and not auth.accepts(
            request.headers.get("Authorization")
        ):
            raise RegistryError("Unauthorized", status=401, error_code=401)
        return await handler(request)

    return middleware


# request helpers ---------------------------------------------------------------------------


def _flag(request: web.Request, *names: str) -> bool:
    return any(request.query.get(name, "").lower() == "true" for name in names)


def _page(items: list[Any], request: web.Request) -> list[Any]:
    try:
        offset = int(request.query.get("offset", "0"))
        limit = int(request.query.get("limit", "-1"))
    except ValueError:
        raise errors.bad_request("offset and limit must be integers") from None
    items = items[max(offset, 0) :]
    return items if limit < 0 else items[:limit]


async def _body(request: web.Request) -> Any:
    raw = await request.read()
    if too_deep(raw.decode("utf-8", "replace")):
        raise errors.bad_request(
            f"the request body nests deeper than {MAX_NESTING} JSON objects and arrays"
        )
    try:
        return json.loads(raw or b"null")
    except ValueError:
        raise errors.bad_request("the request body is not valid JSON") from None


def _schema_id(request: web.Request) -> int:
    try:
        return int(request.match_info["id"])
    except ValueError:
        raise errors.schema_not_found() from None


def _store(request: web.Request) -> RegistryStore:
    return request.app[STORE]


def _version_doc(subject: str, version: SubjectVersion, stored: StoredSchema) -> dict[str, Any]:
    return {
        "subject": subject,
        "version": version.version,
        "id": stored.id,
        "schemaType": stored.schema_type,
        "schema": stored.schema,
    }


# handlers ----------------------------------------------------------------------------------


async def root(_request: web.Request) -> web.Response:
    return _json({})


async def health(_request: web.Request) -> web.Response:
    return _json({"status": "ok"})


async def schema_types(_request: web.Request) -> web.Response:
    return _json(list(SUPPORTED_TYPES))


async def schema_by_id(request: web.Request) -> web.Response:
    stored = _store(request).schema_by_id(_schema_id(request))
    return _json({"schemaType": stored.schema_type, "schema": stored.schema})


async def schema_text_by_id(request: web.Request) -> web.Response:
    stored = _store(request).schema_by_id(_schema_id(request))
    return web.Response(body=stored.schema.encode("utf-8"), headers={"Content-Type": CONTENT_TYPE})


async def schema_subjects(request: web.Request) -> web.Response:
    usages = _store(request).usages(_schema_id(request), deleted=_flag(request, "deleted"))
    wanted = request.query.get("subject")
    subjects = list(dict.fromkeys(s for s, _ in usages if wanted is None or s == wanted))
    return _json(_page(subjects, request))


async def schema_versions(request: web.Request) -> web.Response:
    usages = _store(request).usages(_schema_id(request), deleted=_flag(request, "deleted"))
    wanted = request.query.get("subject")
    pairs = [{"subject": s, "version": v} for s, v in usages if wanted is None or s == wanted]
    return _json(_page(pairs, request))


async def list_subjects(request: web.Request) -> web.Response:
    subjects = _store(request).subjects(
        prefix=request.query.get("subjectPrefix", ""),
        deleted=_flag(request, "deleted"),
        deleted_only=_flag(request, "deleted_only", "deletedOnly"),
    )
    return _json(_page(subjects, request))


async def lookup(request: web.Request) -> web.Response:
    subject = request.match_info["subject"]
    candidate = parse_candidate(await _body(request))
    store = _store(request)
    version = store.lookup(subject, candidate, deleted=_flag(request, "deleted"))
    return _json(_version_doc(subject, version, store.schema_by_id(version.schema_id)))


async def list_versions(request: web.Request) -> web.Response:
    versions = _store(request).versions(
        request.match_info["subject"],
        deleted=_flag(request, "deleted"),
        deleted_only=_flag(request, "deleted_only", "deletedOnly"),
    )
    return _json(_page(versions, request))


async def register(request: web.Request) -> web.Response:
    subject = request.match_info["subject"]
    body = await _body(request)
    if isinstance(body, dict) and (body.get("id") is not None or body.get("version") is not None):
        raise errors.not_permitted(
            "Choosing the schema id or version (import mode) is not supported by this registry"
        )
    candidate = parse_candidate(body)
    async with request.app[MUTATION_LOCK]:
        schema_id, _added = _store(request).register(subject, candidate)
    return _json({"id": schema_id})


async def get_version(request: web.Request) -> web.Response:
    subject = request.match_info["subject"]
    number = parse_version(request.match_info["version"])
    store = _store(request)
    version = store.version(subject, number, deleted=_flag(request, "deleted"))
    return _json(_version_doc(subject, version, store.schema_by_id(version.schema_id)))


async def get_version_schema(request: web.Request) -> web.Response:
    number = parse_version(request.match_info["version"])
    store = _store(request)
    version = store.version(
        request.match_info["subject"], number, deleted=_flag(request, "deleted")
    )
    text = store.schema_by_id(version.schema_id).schema
    return web.Response(body=text.encode("utf-8"), headers={"Content-Type": CONTENT_TYPE})


async def delete_version(request: web.Request) -> web.Response:
    number = parse_version(request.match_info["version"])
    async with request.app[MUTATION_LOCK]:
        deleted = _store(request).delete_version(
            request.match_info["subject"], number, permanent=_flag(request, "permanent")
        )
    return _json(deleted)


async def delete_subject(request: web.Request) -> web.Response:
    async with request.app[MUTATION_LOCK]:
        deleted = _store(request).delete_subject(
            request.match_info["subject"], permanent=_flag(request, "permanent")
        )
    return _json(deleted)


async def _compatibility(request: web.Request, *, all_versions: bool) -> web.Response:
    subject = request.match_info["subject"]
    number = None if all_versions else parse_version(request.match_info["version"])
    verbose = _flag(request, "verbose")
    try:
        candidate = parse_candidate(await _body(request))
    except RegistryError as exc:
        # Like Confluent: an invalid schema is an answer when verbose, an error otherwise.
        if verbose and exc.error_code == errors.INVALID_SCHEMA:
            return _json({"is_compatible": False, "messages": [str(exc)]})
        raise
    result = _store(request).check(subject, candidate, number, all_versions=all_versions)
    answer: dict[str, Any] = {"is_compatible": result.is_compatible}
    if verbose:
        answer["messages"] = list(result.messages)
    return _json(answer)


async def compatibility_one(request: web.Request) -> web.Response:
    return await _compatibility(request, all_versions=False)


async def compatibility_all(request: web.Request) -> web.Response:
    return await _compatibility(request, all_versions=True)


async def get_config(request: web.Request) -> web.Response:
    subject = request.match_info.get("subject")
    store = _store(request)
    if subject is None:
        level = store.global_level()
    else:
        level = store.subject_level(subject, default_to_global=_flag(request, "defaultToGlobal"))
    return _json({"compatibilityLevel": level.value})


async def put_config(request: web.Request) -> web.Response:
    body = await _body(request)
    if not isinstance(body, dict):
        raise errors.bad_request("the request body must be a JSON object")
    async with request.app[MUTATION_LOCK]:
        level = _store(request).set_level(
            request.match_info.get("subject"), body.get("compatibility")
        )
    return _json({"compatibility": level.value})


async def delete_config(request: web.Request) -> web.Response:
    async with request.app[MUTATION_LOCK]:
        level = _store(request).delete_level(request.match_info.get("subject"))
    return _json({"compatibilityLevel": level.value})


READWRITE = "READWRITE"


async def get_mode(request: web.Request) -> web.Response:
    """Every subject is writable: the embedded registry has no other mode."""
    return _json({"mode": READWRITE})


async def put_mode(request: web.Request) -> web.Response:
    body = await _body(request)
    mode = body.get("mode") if isinstance(body, dict) else None
    # Confluent reads the mode case-insensitively.
    if not isinstance(mode, str) or mode.upper() != READWRITE:
        raise errors.invalid_mode(mode)
    return _json({"mode": READWRITE})


def create_app(store: RegistryStore, *, basic_auth: BasicAuth | None = None) -> web.Application:
    """The aiohttp application serving ``store``."""
    middlewares = [_errors_middleware]
    if basic_auth is not None:
        middlewares.append(_auth_middleware(basic_auth))
    middlewares.append(_content_type_middleware)
    app = web.Application(middlewares=middlewares)
    app[STORE] = store
    app[MUTATION_LOCK] = asyncio.Lock()
    subject = "/subjects/{subject}"
    routes = [
        web.get("/", root),
        web.get("/health", health),
        web.get("/schemas/types", schema_types),
        web.get("/schemas/ids/{id}", schema_by_id),
        web.get("/schemas/ids/{id}/schema", schema_text_by_id),
        web.get("/schemas/ids/{id}/subjects", schema_subjects),
        web.get("/schemas/ids/{id}/versions", schema_versions),
        web.get("/subjects", list_subjects),
        web.post(subject, lookup),
        web.delete(subject, delete_subject),
        web.get(f"{subject}/versions", list_versions),
        web.post(f"{subject}/versions", register),
        web.get(f"{subject}/versions/{{version}}", get_version),
        web.get(f"{subject}/versions/{{version}}/schema", get_version_schema),
        web.delete(f"{subject}/versions/{{version}}", delete_version),
        web.post(f"/compatibility{subject}/versions", compatibility_all),
        web.post(f"/compatibility{subject}/versions/{{version}}", compatibility_one),
        web.delete("/mode/{subject}", get_mode),  # the subject falls back to READWRITE
    ]
    for scope in ("", "/{subject}"):  # the registry's, or one subject's
        routes += [
            web.get(f"/config{scope}", get_config),
            web.put(f"/config{scope}", put_config),
            web.delete(f"/config{scope}", delete_config),
            web.get(f"/mode{scope}", get_mode),
            web.put(f"/mode{scope}", put_mode),
        ]
    # Confluent's registry answers every path with or without a trailing slash, and
    # clients send both (python-schema-registry-client asks for ``/config/``).
    slashed = [
        web.route(r.method, r.path + "/", r.handler, **r.kwargs) for r in routes if r.path != "/"
    ]
    app.add_routes(routes + slashed)
    return app


# running -----------------------------------------------------------------------------------


class RunningRegistry:
    """A registry serving on a loopback (or given) address until ``close``."""

    def __init__(self, runner: web.AppRunner, url: str, lock: IO[str]) -> None:
        self._runner = runner
        self._lock = lock
        self.url = url

    async def close(self) -> None:
        await self._runner.cleanup()
        self._lock.close()  # closing the file releases the data directory's lock
        log.info("registry.stopped", url=self.url)


def _lock_data_dir(data_dir: Path) -> IO[str]:
    data_dir.mkdir(parents=True, exist_ok=True)
    handle = (data_dir / LOCK_FILE).open("a")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ConfigError(f"another registry is already using {data_dir}") from None
    return handle


async def start(
    data_dir: Path | str,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    basic_auth: BasicAuth | None = None,
) -> RunningRegistry:
    """Serve a registry persisted in ``data_dir``; port 0 picks a free port."""
    data = Path(data_dir)
    lock = _lock_data_dir(data)
    try:
        runner = web.AppRunner(create_app(RegistryStore(data), basic_auth=basic_auth))
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
    except BaseException:
        lock.close()
        raise
    bound_port = runner.addresses[0][1]
    shown_host = f"[{host}]" if ":" in host else host
    url = f"http://{shown_host}:{bound_port}"
    log.info("registry.started", url=url, data_dir=str(data), basic_auth=basic_auth is not None)
    return RunningRegistry(runner, url, lock)


class RegistryThread:
    """A registry on its own event loop in a daemon thread; ``stop`` ends both."""

    def __init__(self, loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
        self._loop = loop
        self._thread = thread
        self._running: RunningRegistry | None = None
        self.url = ""

    def stop(self) -> None:
        if self._running is not None:
            running, self._running = self._running, None
            asyncio.run_coroutine_threadsafe(running.close(), self._loop).result(timeout=30)
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)

    def __enter__(self) -> RegistryThread:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def run_in_thread(
    data_dir: Path | str,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    basic_auth: BasicAuth | None = None,
) -> RegistryThread:
    """Start a registry in a background thread and return once it accepts requests."""
    loop = asyncio.new_event_loop()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_forever()
        loop.close()

    thread = threading.Thread(target=serve, name="bizevents-registry", daemon=True)
    thread.start()
    handle = RegistryThread(loop, thread)
    future = asyncio.run_coroutine_threadsafe(
        start(data_dir, host, port, basic_auth=basic_auth), loop
    )
    try:
        handle._running = future.result(timeout=30)
    except BaseException:
        with contextlib.suppress(Exception):
            handle.stop()
        raise
    handle.url = handle._running.url
    return handle
