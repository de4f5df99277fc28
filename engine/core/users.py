"""Users and API tokens, kept in Redis. Tokens are shown once and stored only as SHA-256 digests."""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeGuard

from redis.exceptions import WatchError

from .quota import parse_overrides
from .text import text, text_or_none

UPDATE_TRIES = 100
_NAME_RE = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")


@dataclass(frozen=True)
class User:
    name: str
    admin: bool = False
    created_at: float = 0.0
    tokens: int = 0


def token_digest(token: str) -> str:
    """What Redis keeps of a token, login code or session id: its SHA-256 (hex), never the secret."""
    return hashlib.sha256(token.encode()).hexdigest()


def _code_shaped(code: object) -> TypeGuard[str]:
    return isinstance(code, str) and 8 <= len(code) <= 128 and code.isascii()


class Users:
    """``scripts``: the engine's Scripts on the same client (a token's user in one round trip:
    lua/user.lua)."""

    def __init__(self, redis, keys, scripts):
        self.redis, self.keys, self.scripts = redis, keys, scripts

    def add(self, name: str, admin: bool = False) -> str:
        """Create the user (or keep it) and issue a new API token; returns the token (shown once)."""
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
            raise ValueError("user name must be 1-64 letters, digits or . _ @ -")
        token = "gl_" + secrets.token_urlsafe(32)
        digest = token_digest(token)

        def change(record):
            record = record or {"admin": bool(admin), "created_at": time.time(), "tokens": []}
            record["admin"] = bool(admin) or record["admin"]
            record["tokens"].append(digest)
            return record

        self._update(name, change, lambda pipe: pipe.hset(self.keys.tokens(), digest, name))
        return token

    def set_quota(self, name: str, overrides: dict | None) -> None:
        """Store the user's own submit limits (engine/core/quota.py fields; None = no limit), replacing
        any before; ``{}`` or None goes back to the web app's defaults. Raises ValueError (no such
        user, a bad field or value)."""
        overrides = parse_overrides(overrides or {})

        def change(record):
            if record is None:
                raise ValueError(f"no user {name!r}")
            record["quota"] = overrides
            return record

        self._update(name, change)

    def quota_overrides(self, name: str) -> dict:
        """The user's own submit limits (empty: the web app's defaults apply)."""
        raw = self.redis.hget(self.keys.users(), name) if isinstance(name, str) else None
        return dict(json.loads(raw).get("quota") or {}) if raw else {}

    def _update(self, name: str, change, also=None) -> None:
        """Read, change, write the user's record under WATCH: two changes at once must both land
        (a token missing from the record would escape a later revoke). ``also(pipe)`` adds writes."""
        with self.redis.pipeline(transaction=True) as pipe:
            for _ in range(UPDATE_TRIES):
                try:
                    pipe.watch(self.keys.users())
                    raw = pipe.hget(self.keys.users(), name)
                    record = change(json.loads(raw) if raw else None)
                    pipe.multi()
                    pipe.hset(self.keys.users(), name, json.dumps(record))
                    if also is not None:
                        also(pipe)
                    pipe.execute()
                    return
                except WatchError:
                    continue
        raise WatchError(f"the users hash kept changing: {UPDATE_TRIES} tries to update {name!r} failed")

    def list(self) -> list[User]:
        out = []
        for name, raw in sorted(self.redis.hgetall(self.keys.users()).items()):
            r = json.loads(raw)
            out.append(User(text(name), r["admin"], r["created_at"], len(r["tokens"])))
        return out

    def get(self, name: str) -> User | None:
        raw = self.redis.hget(self.keys.users(), name) if isinstance(name, str) else None
        if not raw:
            return None
        r = json.loads(raw)
        return User(name, r["admin"], r["created_at"], len(r["tokens"]))

    def revoke(self, name: str) -> bool:
        """Remove the user and every token of theirs. Returns False when there was no such user."""
        raw = self.redis.hget(self.keys.users(), name)
        if not raw:
            return False
        # Every token naming them, listed on the record or not (one lost by an older, unguarded add).
        digests = set(json.loads(raw)["tokens"]) | {
            text(d) for d, owner in self.redis.hscan_iter(self.keys.tokens()) if text(owner) == name
        }
        pipe = self.redis.pipeline(transaction=True)
        for digest in digests:
            pipe.hdel(self.keys.tokens(), digest)
        pipe.hdel(self.keys.users(), name)
        pipe.execute()
        return True

    def login_code(self, name: str, ttl: float = 600) -> str:
        """A one-time code that logs a browser in as ``name`` (the demo's one-click link).

        Not an API token: it works once, for ``ttl`` seconds, and only to open a session.
        """
        if self.get(name) is None:
            raise ValueError(f"no user {name!r}")
        code = secrets.token_urlsafe(24)
        self.redis.set(self.keys.login_code(token_digest(code)), name, px=int(ttl * 1000))
        return code

    def login_code_user(self, code: object) -> User | None:
        """The user a valid one-time code would log in (a confirmation page), without using it up."""
        name = self.redis.get(self.keys.login_code(token_digest(code))) if _code_shaped(code) else None
        user = self.get(text(name)) if name else None
        return user if user is not None and user.tokens else None

    def redeem_login_code(self, code: object) -> tuple[User, str] | None:
        """(user, digest of their newest token) for a valid code, used up by this call; else None."""
        if not _code_shaped(code):
            return None
        name = self.redis.getdel(self.keys.login_code(token_digest(code)))
        raw = self.redis.hget(self.keys.users(), text(name)) if name else None
        if not raw or not json.loads(raw)["tokens"]:
            return None
        user = self.get(text(name))
        return (user, json.loads(raw)["tokens"][-1]) if user is not None else None

    def authenticate(self, token: object) -> User | None:
        """The user a token belongs to, or None (also for malformed input)."""
        if not isinstance(token, str) or not 8 <= len(token) <= 256 or not token.isascii():
            return None
        return self.for_digest(token_digest(token))

    def valid_digests(self, digests: Iterable[str]) -> set[str]:
        """Those of ``digests`` that still belong to a user (``for_digest`` of many at once): two
        pipelined round trips however many (web/guard.py asks this for every open stream)."""
        digests = list(dict.fromkeys(digests))
        if not digests:
            return set()
        names = [text_or_none(n) for n in self.redis.hmget(self.keys.tokens(), digests)]
        owners = sorted({n for n in names if n})
        records = dict(zip(owners, self.redis.hmget(self.keys.users(), owners))) if owners else {}
        tokens = {n: set(json.loads(raw)["tokens"]) for n, raw in records.items() if raw}
        return {d for d, n in zip(digests, names) if n and d in tokens.get(n, ())}

    def for_digest(self, digest: str) -> User | None:
        """The user a token digest belongs to: only while the user's record lists it. Every
        authenticated request and stream opening asks this: one round trip."""
        name, raw = self.scripts.user(self.keys.tokens(), self.keys.users(), digest) or (None, None)
        if not raw:
            return None
        r = json.loads(raw)
        return User(text(name), r["admin"], r["created_at"], len(r["tokens"])) if digest in r["tokens"] else None
