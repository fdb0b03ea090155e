"""Who may see the dashboard: everyone when no read token is configured, else whoever
sends ``Authorization: Bearer <token>`` or holds the cookie that /login sets.

The cookie holds a value derived from the token (an HMAC), not the token itself, so
a leaked cookie does not leak the API token. Every comparison is constant-time, and
the token never reaches a log line, a redirect or a page.
"""

from __future__ import annotations

import hashlib
import hmac

from fastapi import Request

COOKIE = "cachewatch_dashboard"
COOKIE_MAX_AGE = 7 * 24 * 3600


def session_value(token: str) -> str:
    return hmac.new(token.encode(), b"cachewatch dashboard session v1", hashlib.sha256).hexdigest()


def token_matches(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode(), token.encode())


def allowed(request: Request) -> bool:
    token = request.app.state.settings.read_secret()
    if token is None:
        return True
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token_matches(given.strip(), token):
        return True
    cookie = request.cookies.get(COOKIE)
    return cookie is not None and hmac.compare_digest(cookie.encode(), session_value(token).encode())


def safe_next(target: str | None) -> str:
    """Only a path on this site: an open redirect would turn the login form into a phishing aid."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target
