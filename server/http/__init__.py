"""The HTTP management API as synchronous handlers (h11 runs in ``server/net/http_conn.py``)."""

from .api import router
from .routes import HTTPError, Request, Response

__all__ = ["HTTPError", "Request", "Response", "router"]
