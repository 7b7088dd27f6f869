"""The web console's static files, served at ``/`` and ``/console/<file>`` on the HTTP port (sync).

The console is plain HTML, CSS and ES modules shipped inside the package (``console/``): nothing is
built and nothing is fetched from elsewhere. It logs in with HTTP basic against the management API
like any other client, so these files are public (as RabbitMQ's UI files are) and every piece of
data goes through the API's own authorisation. The folder is flat: a name is one path segment out
of a fixed set read at import, so no request can reach another file.
"""

from __future__ import annotations

from importlib import resources

from .routes import Context, HTTPError, Request, Response, Routes

__all__ = ["routes"]

routes = Routes()

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
}
# the files change only with the package: a client revalidates after a short while, no longer
_CACHE = [("cache-control", "public, max-age=300"), ("x-content-type-options", "nosniff")]
_INDEX_HEADERS = [("cache-control", "no-cache"), ("x-content-type-options", "nosniff"),
                  ("x-frame-options", "DENY"),
                  ("content-security-policy", "default-src 'self'; img-src 'self' data:; "
                                              "style-src 'self'; script-src 'self'; connect-src 'self'")]


def _load() -> dict[str, bytes]:
    folder = resources.files(__package__) / "console"
    files: dict[str, bytes] = {}
    for entry in folder.iterdir():
        name = entry.name
        if entry.is_file() and "." + name.rpartition(".")[2] in _TYPES:
            files[name] = entry.read_bytes()
    return files


_FILES = _load()


def _file(name: str) -> Response:
    body = _FILES.get(name)
    if body is None:
        raise HTTPError(404, "not_found", "Object Not Found")
    content_type = _TYPES["." + name.rpartition(".")[2]]
    headers = _INDEX_HEADERS if name == "index.html" else _CACHE
    return Response(200, body, list(headers), content_type=content_type)


# answered without a login (auth=False): the API calls the console makes need one
@routes.get("/", auth=False)
def console_index(ctx: Context, req: Request) -> Response:
    return _file("index.html")


@routes.get("/console/{name}", auth=False)
def console_file(ctx: Context, req: Request, name: str) -> Response:
    return _file(name)
