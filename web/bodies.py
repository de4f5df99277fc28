"""Request bodies: JSON objects only, parsed so that no body can cause a 5xx.

Flask's ``get_json(silent=True)`` lets a deeply nested array escape as RecursionError (a
500); every view reads its body here instead.
"""

from __future__ import annotations

import json

from flask import request

from .errors import ApiError

FORM_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data"})


def json_body(required: bool = True, fields: frozenset | None = None) -> dict:
    """The request body as a JSON object (a form body: its fields but ``csrf_token``).

    Raises ApiError 400 for anything else, or for a field outside ``fields`` when given;
    werkzeug raises 413 past MAX_CONTENT_LENGTH.
    """
    body = _body(required)
    unknown = sorted(set(body) - fields) if fields is not None else []
    if unknown:
        raise ApiError(400, "invalid", f"unknown field(s): {', '.join(unknown)[:200]}")
    return body


def _body(required: bool) -> dict:
    if request.mimetype in FORM_TYPES:
        # A multipart part without a name= comes as the key None: an unknown field "(unnamed)".
        return {(k if isinstance(k, str) else "(unnamed)"): v for k, v in request.form.items() if k != "csrf_token"}
    data = request.get_data(cache=True)
    if not data.strip():
        if required:
            raise ApiError(400, "invalid", "a JSON object body is required")
        return {}
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):
        raise ApiError(400, "invalid", "the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "invalid", "the body must be a JSON object")
    return body
