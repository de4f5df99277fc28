"""Authentication: bearer tokens for API clients, a session cookie for browsers, CSRF.

- ``Authorization: Bearer <token>``: the token is checked against ``engine.users`` on each
  request. Bearer calls need no CSRF token (a browser never attaches one by itself).
- ``POST /login`` with the token sets a signed, HttpOnly, SameSite=Lax session cookie that
  holds the token's SHA-256 digest (never the token), so revoking the user ends the session.
  EventSource then authenticates with the cookie: no token ever goes in a URL.
- Cookie-authenticated state changes (POST) need the session's CSRF token, in the
  ``X-CSRF-Token`` header or a ``csrf_token`` form field (``GET /api/csrf`` returns it).
  ``/login`` itself refuses a cross-origin ``Origin``/``Referer`` (login CSRF).
- ``GET /login/<code>`` (a one-time link) only shows a confirmation page; its form POSTs the code
  back under the same origin check plus a form token kept in the session, and only that POST
  uses the code, so no link or image on another site replaces a logged-in person's session.
- Logout is ``POST /logout`` with the CSRF token; ``GET /logout`` shows a page with the button.
- Failed logins and failed bearer checks are limited per client address (web/limits.py).
- A new login leaves the user's other sessions alone (other browsers); revoking the user ends all.
"""

from __future__ import annotations

import hmac
import secrets
from urllib.parse import urlsplit

from flask import Blueprint, current_app, g, jsonify, redirect, render_template, request, session, url_for

from ghostless.core.text import text_or_none
from ghostless.core.users import User, token_digest

from . import coalesce, limits
from .bodies import json_body
from .deps import get_engine
from .errors import ApiError
from .queries import user_for_digest

bp = Blueprint("auth", __name__)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
UNAUTHORIZED = {"WWW-Authenticate": 'Bearer realm="ghostless"'}


def current_user() -> User | None:
    """The caller (bearer token first, else the session cookie), cached for the request."""
    if "user" not in g:
        g.user, g.auth = None, None
        header = request.headers.get("Authorization")
        if header is not None:
            scheme, _, token = header.strip().partition(" ")
            if scheme.lower() == "bearer":
                g.user, g.auth = get_engine().users.authenticate(token.strip()), "bearer"
                g.credential = (token_digest(token.strip()) if _encodable(token.strip()) else "", None)
                if g.user is None:
                    limits.count_failure("bearer")  # a good token costs no extra call
        elif "digest" in session:
            g.user, g.auth = _session_user(), "cookie"
            g.credential = (session.get("digest"), _session_key(session.get("sid")))
    return g.user


def _session_key(sid: object) -> str | None:
    return get_engine().keys.session(token_digest(sid)) if isinstance(sid, str) and _encodable(sid) else None


def _session_user() -> User | None:
    """The cookie session's user, while the session is live in Redis (not logged out, not expired)."""
    key, digest = _session_key(session.get("sid")), session.get("digest")
    stored = coalesce.read(get_engine(), "GET", key) if key else None
    if stored is None or not isinstance(digest, str) or text_or_none(stored) != digest:
        return None
    return user_for_digest(get_engine(), digest)


def _start_session(digest: str) -> None:
    """A fresh login session (nothing carried over from before: no fixation), recorded in Redis."""
    session.clear()
    session.permanent = True
    sid = secrets.token_urlsafe(32)
    session["sid"], session["digest"], session["csrf"] = sid, digest, secrets.token_urlsafe(32)
    ttl = max(1, int(current_app.permanent_session_lifetime.total_seconds()))
    get_engine().redis.set(_session_key(sid), digest, ex=ttl)


def stream_credential() -> tuple[str, str | None]:
    """(token digest, session key or None) of the caller: what web/guard.py keeps checking for an
    open stream (the token not revoked and, for a cookie, the session not logged out)."""
    current_user()
    return g.get("credential", ("", None))


def require_user() -> User:
    """``before_request`` of every API and SSE blueprint: 401 without a valid caller, 403
    for a cookie-authenticated state change without the session's CSRF token."""
    user = current_user()
    if user is None:
        raise ApiError(401, "unauthorized", "authentication required: a bearer token or a login session", UNAUTHORIZED)
    if g.auth == "cookie" and request.method not in SAFE_METHODS:
        sent = request.headers.get("X-CSRF-Token") or request.form.get("csrf_token") or ""
        if not _same(sent, session.get("csrf")):
            raise ApiError(403, "csrf_failed", "missing or wrong CSRF token (X-CSRF-Token header)")
    return user


def _encodable(text: object) -> bool:
    """A str that UTF-8 can encode (JSON may carry lone surrogates, which hashing refuses)."""
    try:
        return isinstance(text, str) and bool(text.encode())
    except UnicodeEncodeError:
        return False


def _same(sent: object, expected: object) -> bool:
    if not isinstance(sent, str) or not isinstance(expected, str) or not expected:
        return False
    return hmac.compare_digest(sent.encode("utf-8", "surrogatepass"), expected.encode())


def _wants_json() -> bool:
    return (
        request.is_json or request.accept_mimetypes.best_match(["text/html", "application/json"]) == "application/json"
    )


def _local_path(target: object) -> str:
    """``target`` when it is a path on this site (no open redirects), else ``/``."""
    # Printable only: browsers drop tabs and other control characters, so "/\t/evil" would
    # arrive as "//evil" (another site).
    if (
        isinstance(target, str)
        and target.isprintable()
        and target.startswith("/")
        and not target.startswith("//")
        and "\\" not in target
    ):
        return target
    return "/"


def _cross_origin() -> bool:
    source = request.headers.get("Origin") or request.headers.get("Referer")
    if not source or source == "null":
        return source == "null"
    try:
        return urlsplit(source).netloc.lower() != request.host.lower()
    except ValueError:
        return True


PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; form-action 'self'; frame-ancestors 'none'",
    "Cache-Control": "no-store",
    "Referrer-Policy": "same-origin",
}


def _page(template: str, status: int = 200, headers: dict | None = None, **context):
    """One of the login/logout pages: never framed, never cached."""
    return render_template(template, **context), status, {**PAGE_HEADERS, **(headers or {})}


def _login_form(message: str = "", status: int = 200, headers: dict | None = None):
    """The login page (templates/login.html); a browser's failed login shows it again."""
    return _page(
        "login.html", status, headers, user=None, message=message, next=_local_path(request.values.get("next"))
    )


def _browser_form() -> bool:
    """A form post from a page (Accept names HTML): answer with the page, not JSON."""
    return request.mimetype != "application/json" and request.accept_mimetypes.accept_html and not _wants_json()


def _refused(e: ApiError):
    """A refused login: the login form again (with why) for a browser, else the JSON error."""
    if _browser_form():
        headers = {k: v for k, v in e.headers.items() if k.lower() != "www-authenticate"}
        return _login_form(e.message[:1].upper() + e.message[1:] + ".", e.status, headers)
    raise e


def _under_login_limit(lookup, message: str, headers: dict | None = None):
    """``lookup()``, unless this address is over its failed-login limit; a failure (None) counts
    and is a 401 with ``message``."""
    limits.refuse_if_blocked("login")
    found = lookup()
    if found is None:
        limits.count_failure("login")
        raise ApiError(401, "unauthorized", message, headers)
    return found


def _logged_in(digest: str, user: User, target: str = "/"):
    _start_session(digest)
    if _wants_json():
        return jsonify(user=user.name, admin=user.admin, csrf_token=session["csrf"])
    return redirect(target, code=303)


@bp.get("/login")
def login_page():
    return _login_form()


@bp.post("/login")
def login():
    try:
        if _cross_origin():
            raise ApiError(403, "csrf_failed", "this login came from another site and was refused")
        token = json_body(required=False).get("token")
        user = _under_login_limit(
            lambda: get_engine().users.authenticate(token) if _encodable(token) else None,
            "unknown or revoked token",
            UNAUTHORIZED,
        )
    except ApiError as e:
        return _refused(e)
    return _logged_in(token_digest(token), user, _local_path(request.form.get("next")))


LINK_GONE = "this login link is unknown, used or expired"


@bp.get("/login/<code>")
def login_link(code):
    """A one-time login link (``ghostless user login-link NAME``; the demo prints one) opens a
    page that asks first: the code is used only by that page's POST (no login CSRF by link)."""
    try:
        user = _under_login_limit(lambda: get_engine().users.login_code_user(code), LINK_GONE)
    except ApiError as e:
        return _refused(e)
    if not isinstance(session.get("login_csrf"), str):
        session["login_csrf"] = secrets.token_urlsafe(32)
    current = _session_user() if "digest" in session else None
    return _page(
        "login_link.html",
        user=None,
        name=user.name,
        current=current,
        csrf=session["login_csrf"],
        action=url_for("auth.redeem_login_link", code=code),
    )


@bp.post("/login/<code>")
def redeem_login_link(code):
    """Redeem a one-time code: same-origin only, with the confirmation page's form token."""
    try:
        if _cross_origin():
            raise ApiError(403, "csrf_failed", "this login came from another site and was refused")
        if not _same(request.form.get("csrf_token"), session.get("login_csrf")):
            raise ApiError(403, "csrf_failed", "this login form has expired: open the link again")
        found = _under_login_limit(lambda: get_engine().users.redeem_login_code(code), LINK_GONE)
    except ApiError as e:
        return _refused(e)
    return _logged_in(found[1], found[0])


@bp.get("/logout")
def logout_page():
    """A page with a logout button (a GET never logs out: an ``<img src=/logout>`` must not)."""
    user = current_user() if "sid" in session else None
    if user is None:
        return redirect(url_for("auth.login_page"), code=303)
    return _page("logout.html", user=user)


@bp.post("/logout")
def logout():
    """End the session (with its CSRF token); nothing to do without one."""
    if "sid" in session:
        sent = request.headers.get("X-CSRF-Token") or request.form.get("csrf_token") or ""
        if not _same(sent, session.get("csrf")):
            if _browser_form():
                return _page(
                    "logout.html",
                    403,
                    user=current_user(),
                    message="That logout did not come from this site's page; use the button.",
                )
            raise ApiError(403, "csrf_failed", "missing or wrong CSRF token (X-CSRF-Token header)")
        key = _session_key(session.get("sid"))
        if key:
            get_engine().redis.delete(key)  # a copy of the cookie stops working too
    session.clear()
    if _wants_json():
        return jsonify(ok=True)
    return redirect(url_for("auth.login_page"), code=303)


@bp.get("/api/csrf")
def csrf_token():
    user = require_user()
    if g.auth != "cookie":
        raise ApiError(400, "no_session", "CSRF tokens belong to login sessions; bearer calls need none")
    if not isinstance(session.get("csrf"), str):
        session["csrf"] = secrets.token_urlsafe(32)
    return jsonify(user=user.name, admin=user.admin, csrf_token=session["csrf"])


@bp.get("/api/me")
def me():
    user = require_user()
    return jsonify(user=user.name, admin=user.admin, auth=g.auth)
