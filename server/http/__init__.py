"""The HTTP management API as synchronous handlers (h11 runs in ``server/net/http_conn.py``)."""

from .api import router
from .console import console_file, console_index, is_console_path
from .routes import HTTPError, Request, Response

router.add("GET", "/", console_index)
router.add("GET", "/console/{name}", console_file)

__all__ = ["HTTPError", "Request", "Response", "is_console_path", "router"]
