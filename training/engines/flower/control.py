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
    secret, middleware = _secret(), link._get_middleware  # pylint: disable=protected-access
    link._get_middleware = lambda: [Middleware(ControlGate, secret=secret), *middleware()]
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
