"""Who may see the dashboard: everyone when no read token is configured, else whoever
sends ``Authorization: Bearer <token>`` or holds the cookie that /login sets.

The cookie holds the time it was issued and an HMAC of that time keyed by the token,
not the token itself, so a leaked cookie does not leak the API token; the server
refuses a cookie older than COOKIE_MAX_AGE whatever the browser keeps, and changing the
token ends every session. Every comparison is constant-time, and the token never
reaches a log line, a redirect or a page.
"""

from __future__ import annotations

import hashlib
import hmac
import time

from fastapi import Request

from ..tokens import bearer_matches

COOKIE = "cachewatch_dashboard"
COOKIE_MAX_AGE = 7 * 24 * 3600


def session_value(token: str, issued: int | None = None) -> str:
    issued = int(time.time()) if issued is None else issued
    mac = hmac.new(token.encode(), f"cachewatch dashboard session v2 {issued}".encode(), hashlib.sha256)
    return f"{issued}.{mac.hexdigest()}"


def session_valid(cookie: str, token: str, now: float | None = None) -> bool:
    issued, _, _mac = cookie.partition(".")
    if not issued.isdigit() or len(issued) > 12:
        return False
    expected = session_value(token, int(issued))
    age = (time.time() if now is None else now) - int(issued)
    return hmac.compare_digest(cookie.encode(), expected.encode()) and -60 <= age <= COOKIE_MAX_AGE


def allowed(request: Request) -> bool:
    token = request.app.state.settings.read_secret()
    if token is None:
        return True
    if bearer_matches(request, token):
        return True
    cookie = request.cookies.get(COOKIE)
    return cookie is not None and session_valid(cookie, token)


def safe_next(target: str | None) -> str:
    """Only a path on this site: an open redirect would turn the login form into a phishing aid."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target
