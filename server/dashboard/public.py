"""What the dashboard serves without a token: the login form, and its static assets
(our CSS and JS, and plotly.js read from the installed ``plotly`` package, so pages
work with no internet and the repository carries no copy of it)."""

from __future__ import annotations

import functools
import gzip
import hashlib
import urllib.parse
from importlib import resources

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from ..tokens import token_matches
from . import auth
from .pages import page
from .render import PLOTLY_PATH

router = APIRouter(include_in_schema=False)

_OWN_ASSETS = {"dashboard.css": "text/css; charset=utf-8", "dashboard.js": "text/javascript; charset=utf-8"}


class Asset:
    """One static file held in memory with its ETag and a gzip copy (plotly.min.js is
    about 5 MB, 1.4 MB compressed): read and compressed once, on first use."""

    def __init__(self, data: bytes, media_type: str):
        self.data = data
        self.gzipped = gzip.compress(data, compresslevel=6, mtime=0)
        self.etag = '"' + hashlib.sha256(data).hexdigest()[:20] + '"'
        self.media_type = media_type

    def response(self, request: Request) -> Response:
        # A versioned URL (?v=...) never changes content: let the browser keep it.
        cache = "public, max-age=31536000, immutable" if "v" in request.query_params else "no-cache"
        headers = {
            "ETag": self.etag,
            "Cache-Control": cache,
            "Vary": "Accept-Encoding",
            "X-Content-Type-Options": "nosniff",
        }
        if self.etag in [t.strip() for t in request.headers.get("if-none-match", "").split(",")]:
            return Response(status_code=304, headers=headers)
        if "gzip" in request.headers.get("accept-encoding", ""):
            return Response(self.gzipped, media_type=self.media_type, headers={**headers, "Content-Encoding": "gzip"})
        return Response(self.data, media_type=self.media_type, headers=headers)


@functools.cache
def _own_asset(name: str) -> Asset:
    return Asset((resources.files("cachewatch_server.dashboard") / "static" / name).read_bytes(), _OWN_ASSETS[name])


@functools.cache
def _plotly_asset() -> Asset | None:
    try:
        data = (resources.files("plotly") / "package_data" / "plotly.min.js").read_bytes()
    except (ModuleNotFoundError, FileNotFoundError):
        return None
    return Asset(data, "text/javascript; charset=utf-8")


@router.get(PLOTLY_PATH)
def plotly_js(request: Request) -> Response:
    asset = _plotly_asset()
    if asset is None:
        return Response("plotly.js is not installed: pip install plotly", status_code=404, media_type="text/plain")
    return asset.response(request)


@router.get("/static/{name}")
def static_file(name: str, request: Request) -> Response:
    if name not in _OWN_ASSETS:
        return Response("not found", status_code=404, media_type="text/plain")
    return _own_asset(name).response(request)


# ------------------------------------------------------------------ the token form


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, next: str = "/") -> Response:
    target = auth.safe_next(next)
    if request.app.state.settings.read_secret() is None:
        return RedirectResponse(target, status_code=303)
    return page(request, "login.html", view=None, title="Sign in", next=target, failed=False)


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    # A urlencoded form, parsed by hand: two fields do not justify a multipart dependency.
    form = urllib.parse.parse_qs((await request.body()).decode("utf-8", "replace"), max_num_fields=10)
    given = (form.get("token") or [""])[0].strip()
    target = auth.safe_next((form.get("next") or ["/"])[0])
    token = request.app.state.settings.read_secret()
    if token is None:
        return RedirectResponse(target, status_code=303)
    if not token_matches(given, token):
        return page(request, "login.html", status=401, view=None, title="Sign in", next=target, failed=True)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        auth.COOKIE,
        auth.session_value(token),
        max_age=auth.COOKIE_MAX_AGE,
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


@router.post("/logout")
def logout() -> Response:
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(auth.COOKIE, path="/")
    return response
