"""The service's one reading of a token: the ``Authorization: Bearer <token>`` header, or a
token typed into the login form, compared in constant time."""

from __future__ import annotations

import hmac

from fastapi import Request


def token_matches(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode(), token.encode())


def bearer_matches(request: Request, token: str) -> bool:
    """Whether the request's ``Authorization`` header carries ``Bearer <token>``."""
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and token_matches(given.strip(), token)
