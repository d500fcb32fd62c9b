"""A run's Control API only for the run's launcher: Flower 1.41's open-source SuperLink
authenticates no Control API caller (``NoOpControlAuthnPlugin``; accounts need Flower's
enterprise OIDC plugin), so any local process that reaches its port could ``flwr stop`` the run,
``flwr ls`` it, or ``flwr supernode register`` a key of its own and join as a SuperNode.

``python -m privzv.training.engines.flower.control superlink ARGS``: ``flower-superlink ARGS``
that answers a request under ``/v1/control/`` only when it carries the header :data:`HEADER` with
the run's control secret (raw bytes in the 0600 file named by ``$PRIVZV_FLOWER_CONTROL``, as hex;
compared in constant time), else 401. ``python -m privzv.training.engines.flower.control flwr
ARGS``: Flower's ``flwr ARGS`` whose Control API client sends that header (over TLS). The
Fleet and Runtime APIs keep their authentication (node and SuperExec authentication guard them);
their pulls are long polls (``waits.SUPERLINK``).

Flower's SuperLink runs every request through nine middleware layers, most of them Starlette
``BaseHTTPMiddleware`` (a task and a stream each), though seven act on one API only and pass the
others on untouched: each of those (:func:`_scopes`) runs here only for its API's paths
(:class:`Scoped`), the same layers in the same order for those paths. The two event-log layers
also pass every request on untouched while the app has no event-log plugin (Flower loads one
only with ``FLWR_ENABLE_EVENT_LOG=1``): they run only while it has one (:func:`_plugins`). FastAPI runs each plain-function dependency of a route in a worker
thread (a hop there and back a dependency, three a Fleet request); the four of Flower's that only
read the request or the app's state run in the event loop (:func:`inline_dependencies`).
"""

from __future__ import annotations

import hmac
import os
import sys
from pathlib import Path

HEADER = "x-privzv-control"
ENV = "PRIVZV_FLOWER_CONTROL"  # the path of the control secret's 0600 file (never the secret)
PREFIX = "/v1/control/"


def _secret() -> str:
    return Path(os.environ[ENV]).read_bytes().hex()


class ControlGate:
    """ASGI middleware: a Control API request without the run's control secret gets 401."""

    def __init__(self, app, secret: str):
        self.app, self.secret = app, secret.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith(PREFIX):
            given = dict(scope["headers"]).get(HEADER.encode(), b"")
            if not hmac.compare_digest(given, self.secret):
                from starlette.responses import PlainTextResponse

                await PlainTextResponse(
                    "this run's Control API needs its launcher's credential", status_code=401
                )(scope, receive, send)
                return
        await self.app(scope, receive, send)


class Inline:
    """ASGI middleware: ``layer`` (a Starlette ``Middleware`` of a ``BaseHTTPMiddleware``) with
    its ``dispatch`` unchanged and its ``call_next`` running the rest of the app inline: the
    request body is cached and replayed as Starlette's ``_CachedRequest`` does, the response is
    collected into a ``Response`` with the same status, headers and body, and an exception the
    app raises reaches ``dispatch`` from ``call_next``, as Starlette's. Starlette's ``call_next``
    runs the app in a task of a task group and streams its response through a memory stream, to
    let the response stream while ``dispatch`` waits; the SuperLink's responses are single
    protobuf bodies, so that machinery (most of a Fleet request's event-loop time) buys nothing."""

    def __init__(self, app, layer):
        from starlette.middleware.base import _CachedRequest
        from starlette.responses import Response

        cls, args, kwargs = layer
        self.app, self.dispatch = app, cls(app, *args, **kwargs).dispatch_func
        self.request, self.response = _CachedRequest, Response

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request, Response = self.request(scope, receive), self.response

        async def call_next(_request):
            start, body = {}, []

            async def collect(message):
                if message["type"] == "http.response.start":
                    start.update(message)
                elif message["type"] == "http.response.body":
                    body.append(message.get("body", b""))

            await self.app(scope, request.wrapped_receive, collect)
            if not start:
                raise RuntimeError("No response returned.")
            response = Response(b"".join(body), status_code=start["status"])
            response.raw_headers = list(start["headers"])
            return response

        response = await self.dispatch(request, call_next)
        await response(scope, request.wrapped_receive, send)


def _layer(app, layer):
    """``layer`` made on ``app``: a ``BaseHTTPMiddleware`` as :class:`Inline`."""
    from starlette.middleware.base import BaseHTTPMiddleware

    cls, args, kwargs = layer
    return Inline(app, layer) if issubclass(cls, BaseHTTPMiddleware) else cls(app, *args, **kwargs)


class Scoped:
    """ASGI middleware: ``layer`` (a Starlette ``Middleware``; a ``BaseHTTPMiddleware`` as
    :class:`Inline`) for the HTTP paths under ``prefix``, while the app's state has the attribute
    ``plugin`` not None (if ``plugin`` is given); any other request goes straight on to ``app``."""

    def __init__(self, app, prefix: str, layer, plugin: str | None = None):
        self.app, self.prefix, self.layer = app, prefix, _layer(app, layer)
        self.plugin = plugin

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and (
            not scope["path"].startswith(self.prefix)
            or (self.plugin is not None and getattr(scope["app"].state, self.plugin, None) is None)
        ):
            await self.app(scope, receive, send)
        else:
            await self.layer(scope, receive, send)


def _scopes() -> dict:
    """Flower 1.41's SuperLink middleware that act on one API's paths only, with that prefix (each
    checks it itself: ``_is_control_path``, ``startswith("/v1/fleet/")``, the Runtime API's
    ``AcquireTask`` / ``PullTaskInput`` answers)."""
    from flwr.supercore.routers.runtime.tracing import RuntimeTracingMiddleware
    from flwr.superlink.routers.control import middlewares as control
    from flwr.superlink.routers.fleet.middlewares import FleetEventLogMiddleware
    from flwr.superlink.routers.fleet.node_auth import NodeAuthMiddleware

    return {
        control.ControlSensitiveResponseMiddleware: PREFIX,
        control.ControlAuthenticationMiddleware: PREFIX,
        control.ControlLicenseMiddleware: PREFIX,
        control.ControlEventLogMiddleware: PREFIX,
        NodeAuthMiddleware: "/v1/fleet/",
        FleetEventLogMiddleware: "/v1/fleet/",
        RuntimeTracingMiddleware: "/v1/runtime/",
    }


def _plugins() -> dict:
    """Flower 1.41's event-log layers -> the app state's plugin without which each passes every
    request on untouched (``dispatch``: ``if plugin is None ...: return await call_next(request)``)."""
    from flwr.superlink.routers.control.middlewares import ControlEventLogMiddleware
    from flwr.superlink.routers.fleet.middlewares import FleetEventLogMiddleware

    return {
        ControlEventLogMiddleware: "control_event_log_plugin",
        FleetEventLogMiddleware: "fleet_event_log_plugin",
    }


def scoped(layers: list) -> list:
    """``layers`` (Starlette ``Middleware``), each in :func:`_scopes` run for its API's paths only,
    each in :func:`_plugins` only while the app has its plugin, each ``BaseHTTPMiddleware`` as
    :class:`Inline`."""
    from starlette.middleware import Middleware
    from starlette.middleware.base import BaseHTTPMiddleware

    scopes, plugins = _scopes(), _plugins()
    return [
        Middleware(Scoped, prefix=scopes[layer.cls], layer=layer, plugin=plugins.get(layer.cls))
        if layer.cls in scopes
        else Middleware(Inline, layer=layer)
        if issubclass(layer.cls, BaseHTTPMiddleware)
        else layer
        for layer in layers
    ]


def _readers() -> tuple[tuple, tuple]:
    """(functions, classes) of Flower 1.41's route dependencies that only read the request or the
    app's state (no I/O, no lock held): the request's parsed protobuf, the LinkState made at the
    app's start (``create_app`` makes it before serving), whether node authentication is on,
    the peer's version headers."""
    from flwr.supercore.dependencies.version import VersionDependency
    from flwr.supercore.protobuf.translation import get_protobuf_request
    from flwr.superlink.dependencies.linkstate import get_linkstate
    from flwr.superlink.routers.fleet.router import get_enable_supernode_auth

    return (get_protobuf_request, get_linkstate, get_enable_supernode_auth), (VersionDependency,)


def inline_dependencies() -> None:
    """FastAPI's dependency solver (``fastapi.dependencies.utils.run_in_threadpool``) calls the
    dependencies of :func:`_readers` at once, in the event loop; any other plain function as
    before, in a worker thread. The same calls, results and errors, without the hop."""
    import fastapi.dependencies.utils as solver

    functions, classes = _readers()
    hop = solver.run_in_threadpool

    async def run(func, *args, **kwargs):
        if any(func is f for f in functions) or isinstance(func, classes):
            return func(*args, **kwargs)
        return await hop(func, *args, **kwargs)

    solver.run_in_threadpool = run


class _Header:
    """Client interceptor: the control secret on every Control API request."""

    def __init__(self, secret: str):
        self.secret = secret

    def intercept(self, context, call_next):
        context.request.headers[HEADER] = self.secret
        return call_next(context)


def superlink() -> None:
    import flwr.superlink.main as link
    from flwr.superlink.cli.flower_superlink import flower_superlink
    from starlette.middleware import Middleware

    from privzv.training.engines.flower import waits

    waits.long_polls(waits.SUPERLINK)
    inline_dependencies()
    secret, middleware = _secret(), link._get_middleware  # pylint: disable=protected-access
    link._get_middleware = lambda: [Middleware(ControlGate, secret=secret), *scoped(middleware())]
    sys.argv[0] = "flower-superlink"
    flower_superlink()


def flwr() -> None:
    from flwr.cli.app import app
    from flwr.supercore.control import ControlHttpClient

    secret, make = _secret(), ControlHttpClient.from_server_address.__func__

    def from_server_address(cls, server_address, insecure, root_certificates, interceptors, **kwargs):
        return make(
            cls, server_address, insecure, root_certificates, [*interceptors, _Header(secret)], **kwargs
        )

    ControlHttpClient.from_server_address = classmethod(from_server_address)
    sys.argv[0] = "flwr"
    sys.exit(app())


COMMANDS = {"superlink": superlink, "flwr": flwr}

if __name__ == "__main__":
    command = sys.argv.pop(1)
    COMMANDS[command]()
