"""Start-up checks of the Redis server the engine runs on."""
from __future__ import annotations

import logging
import warnings

import redis as redis_lib

from .errors import RedisSetupError

log = logging.getLogger("ghostless")
MIN_VERSION = (6, 2)


def check_server(client, strict: bool = False) -> list[str]:
    """Raise RedisSetupError for a Redis too old; warn (or raise when strict) on eviction.

    Returns the warnings given. Servers that refuse INFO or CONFIG (fakeredis,
    some managed services) are reported as unverifiable, never as errors.
    """
    found: list[str] = []
    try:
        version = client.info("server").get("redis_version", "0")
    except redis_lib.ResponseError:
        return ["server refuses INFO: version and eviction policy not verified"]
    parts = tuple(int(p) for p in str(version).split(".")[:2] if p.isdigit())
    if parts < MIN_VERSION:
        raise RedisSetupError(f"Redis {version} is too old: ghostless needs Redis >= 6.2 (Lua TIME, ZADD GT)")
    try:
        policy = client.config_get("maxmemory-policy").get("maxmemory-policy", "")
    except redis_lib.ResponseError:
        policy = None
        found.append("CONFIG GET refused: cannot verify maxmemory-policy is noeviction")
    if policy not in (None, "noeviction"):
        msg = (f"Redis maxmemory-policy is {policy!r}: under memory pressure Redis may evict task keys "
               "and tasks would vanish. Set maxmemory-policy noeviction.")
        if strict:
            raise RedisSetupError(msg)
        found.append(msg)
    for msg in found:
        warnings.warn(msg, RuntimeWarning, stacklevel=3)
    return found
