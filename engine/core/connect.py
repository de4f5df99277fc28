"""Redis URLs to clients: the one place the core builds a client from a URL.

- ``redis://``, ``rediss://``, ``unix://``: one Redis (redis-py's own URL forms).
- ``redis+cluster://[user:pass@]host:port[,host:port...][?options]``: a Redis Cluster
  (``redis.cluster.RedisCluster``) with those startup nodes; ``rediss+cluster://`` for TLS.
- ``redis+sentinel://[user:pass@]host:port[,host:port...]/<service>[/db][?options]``: the primary
  Sentinel names for ``service`` (``Sentinel.master_for``; it asks the sentinels again after a
  connection error, so a failover is followed); ``rediss+sentinel://`` for TLS to the primary.
  The user and password are the primary's; ``sentinel_username`` / ``sentinel_password`` options
  are the sentinels' own.

``connect_async(url)`` makes the redis.asyncio client of the same forms (the AsyncEngine's):
``redis.asyncio.Redis``, ``redis.asyncio.cluster.RedisCluster`` (which asks for the slot map at
its first command) and ``redis.asyncio.sentinel.Sentinel``'s primary.

Options (query string): ``socket_timeout`` and ``socket_connect_timeout`` (seconds) for every
form; an unknown option is an error, not ignored. ``redact(url)`` hides the password for logs.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.sentinel
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisClusterException
from redis.sentinel import Sentinel

from .errors import BadRedisURL

DEFAULT_URL = "redis://127.0.0.1:6379/0"
TIMEOUTS: dict[str, Any] = {"socket_timeout": 10.0, "socket_connect_timeout": 5.0}
_SECRETS = ("password", "sentinel_password")
_SENTINEL_OPTIONS = ("sentinel_username", "sentinel_password")


def url_from_env(url: str | None = None) -> str:
    """``url``, else ``GHOSTLESS_REDIS_URL``, else the local default."""
    return url or os.environ.get("GHOSTLESS_REDIS_URL") or DEFAULT_URL


def redact(url: str) -> str:
    """``url`` with its password (and a ``sentinel_password`` option) replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<malformed URL>"
    netloc = parts.netloc
    if "://" not in url:  # not a URL: hide whatever stands before an @
        return "***@" + url.rpartition("@")[2] if "@" in url else url
    if "@" in netloc:
        userinfo, _, hosts = netloc.rpartition("@")
        user = userinfo.partition(":")[0]
        netloc = f"{user}:***@{hosts}" if ":" in userinfo else f"{user}@{hosts}"
    query = "&".join(
        f"{k}=***" if k in _SECRETS else f"{k}={v}"
        for k, v in (item.partition("=")[::2] for item in parts.query.split("&") if item)
    )
    return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")


def connect(url: str | None = None):
    """A client for ``url`` (default: ``GHOSTLESS_REDIS_URL``, else the local default).

    Raises BadRedisURL (a ValueError) for a URL it cannot use. A cluster client asks a startup
    node for the slot map at once (redis.ConnectionError when none answers); the others connect
    at their first command.
    """
    return _client(url_from_env(url), aio=False)


def connect_async(url: str | None = None):
    """The redis.asyncio client for ``url`` (the forms and defaults of ``connect``). Every form
    connects at its first command. Raises BadRedisURL."""
    return _client(url_from_env(url), aio=True)


def _client(url: str, aio: bool):
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme in ("redis+cluster", "rediss+cluster"):
        return _cluster(url, tls=scheme.startswith("rediss"), aio=aio)
    if scheme in ("redis+sentinel", "rediss+sentinel"):
        return _sentinel(url, tls=scheme.startswith("rediss"), aio=aio)
    if scheme in ("redis", "rediss", "unix"):
        try:
            return (redis.asyncio.Redis if aio else redis.Redis).from_url(url, **TIMEOUTS)
        except ValueError as e:
            raise BadRedisURL(f"malformed Redis URL {redact(url)}: {_scrub(str(e), url)}") from None
    raise BadRedisURL(
        "Redis URL must specify one of the schemes redis://, rediss://, unix://, redis+cluster:// or "
        f"redis+sentinel:// (got {redact(url)})"
    )


def host_name(host: str) -> str:
    """``host`` as compared between a URL and a client: ``localhost`` is 127.0.0.1."""
    return "127.0.0.1" if host == "localhost" else host


def url_target(url: str) -> tuple[str, str] | None:
    """Where ``url`` points, without connecting: ("redis", "host:port/db" or "path/db"),
    ("sentinel", "service/db") or ("cluster", "host:port,..." of its startup nodes).

    Raises BadRedisURL for a URL ``connect`` would refuse; None for a form it cannot tell.
    """
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme in ("redis+cluster", "rediss+cluster"):
        return "cluster", ",".join(sorted(f"{host_name(h)}:{p}" for h, p in _split(url)[1]))
    if scheme in ("redis+sentinel", "rediss+sentinel"):
        service, _, db = _split(url)[2].strip("/").partition("/")
        return "sentinel", f"{service}/{db or 0}"
    if scheme not in ("redis", "rediss", "unix"):
        return None
    try:
        kwargs = redis.connection.parse_url(url)
    except ValueError as e:
        raise BadRedisURL(f"malformed Redis URL {redact(url)}: {_scrub(str(e), url)}") from None
    db = kwargs.get("db", 0)
    if kwargs.get("path"):
        return "redis", f"{kwargs['path']}/{db}"
    return "redis", f"{host_name(kwargs.get('host', 'localhost'))}:{kwargs.get('port', 6379)}/{db}"


def _scrub(message: str, url: str) -> str:
    password = _password(url)
    return message.replace(password, "***") if password else message


def _password(url: str) -> str:
    netloc = url.partition("://")[2].partition("/")[0]
    userinfo = netloc.rpartition("@")[0]
    return unquote(userinfo.partition(":")[2]) if ":" in userinfo else ""


def _split(url: str) -> tuple[dict, list[tuple[str, int]], str, dict]:
    """(credentials, host/port pairs, path, options) of a cluster or sentinel URL."""
    rest = url.partition("://")[2]
    rest, _, query = rest.partition("?")
    netloc, _, path = rest.partition("/")
    creds: dict = {}
    if "@" in netloc:
        userinfo, _, netloc = netloc.rpartition("@")
        user, has_password, password = userinfo.partition(":")
        if user:
            creds["username"] = unquote(user)
        if has_password:
            creds["password"] = unquote(password)
    nodes = []
    for item in netloc.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            what = repr(item.strip()) if item.strip() else "an empty address"
            raise BadRedisURL(f"malformed Redis URL {redact(url)}: {what} is not host:port")
        nodes.append((host.strip("[]"), int(port)))
    options: dict = {}
    for name, values in parse_qs(query, keep_blank_values=True, strict_parsing=False).items():
        if name in TIMEOUTS:
            try:
                options[name] = float(values[-1])
            except ValueError:
                raise BadRedisURL(f"malformed Redis URL {redact(url)}: {name} must be a number of seconds") from None
        elif name in _SENTINEL_OPTIONS and url.lower().startswith(("redis+sentinel", "rediss+sentinel")):
            options[name] = values[-1]
        else:
            raise BadRedisURL(f"malformed Redis URL {redact(url)}: unknown option {name!r}")
    return creds, nodes, path, options


def _cluster(url: str, tls: bool, aio: bool = False):
    creds, nodes, path, options = _split(url)
    if path.strip("/") not in ("", "0"):
        raise BadRedisURL(f"malformed Redis URL {redact(url)}: a Redis Cluster has database 0 only")
    kwargs = {"ssl": tls, **creds, **TIMEOUTS, **options}
    if aio:  # asks for the slot map at its first command
        aio_nodes = [redis.asyncio.cluster.ClusterNode(h, p) for h, p in nodes]
        return redis.asyncio.cluster.RedisCluster(startup_nodes=aio_nodes, **kwargs)
    try:  # RedisCluster asks a startup node for the slot map at once
        return RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in nodes], **kwargs)
    except RedisClusterException as e:  # not a RedisError: give callers the error they handle
        raise redis.ConnectionError(f"cannot reach the Redis Cluster at {redact(url)}: {_scrub(str(e), url)}") from None


def _sentinel(url: str, tls: bool, aio: bool = False):
    creds, nodes, path, options = _split(url)
    service, _, db = path.strip("/").partition("/")
    if not service:
        raise BadRedisURL(f"malformed Redis URL {redact(url)}: name the service, redis+sentinel://host:port/<service>")
    if db and not db.isdigit():
        raise BadRedisURL(f"malformed Redis URL {redact(url)}: database {db!r} is not a number")
    sentinel_kwargs = {k.removeprefix("sentinel_"): options.pop(k) for k in _SENTINEL_OPTIONS if k in options}
    timeouts = {**TIMEOUTS, **options}
    cls = redis.asyncio.sentinel.Sentinel if aio else Sentinel
    sentinel = cls(nodes, sentinel_kwargs={**timeouts, **sentinel_kwargs}, **timeouts)
    return sentinel.master_for(service, db=int(db or 0), ssl=tls, **creds)
