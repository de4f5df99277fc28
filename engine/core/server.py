"""Start-up checks of the Redis server the engine runs on."""

from __future__ import annotations

import logging
import warnings

import redis as redis_lib

from .cluster import is_cluster
from .errors import RedisSetupError

log = logging.getLogger("ghostless")
MIN_VERSION = (6, 2)


def check_server(client, strict: bool = False, node: str = "") -> list[str]:
    """Raise RedisSetupError for a Redis too old; warn (or raise when strict) on eviction.

    Returns the warnings given. Servers that refuse INFO or CONFIG (fakeredis,
    some managed services) are reported as unverifiable, never as errors. On a cluster every
    primary is checked, each message starting with its ``host:port``.
    """
    if is_cluster(client):
        return [m for n, c in _primaries(client) for m in check_server(c, strict, f"{n}: ")]
    found: list[str] = []
    try:
        version = client.info("server").get("redis_version", "0")
    except redis_lib.ResponseError:
        return [f"{node}server refuses INFO: version and eviction policy not verified"]
    parts = tuple(int(p) for p in str(version).split(".")[:2] if p.isdigit())
    if parts < MIN_VERSION:
        raise RedisSetupError(f"{node}Redis {version} is too old: ghostless needs Redis >= 6.2 (Lua TIME, ZADD GT)")
    try:
        policy = client.config_get("maxmemory-policy").get("maxmemory-policy", "")
    except redis_lib.ResponseError:
        policy = None
        found.append(f"{node}CONFIG GET refused: cannot verify maxmemory-policy is noeviction")
    if policy not in (None, "noeviction"):
        msg = (
            f"{node}Redis maxmemory-policy is {policy!r}: under memory pressure Redis may evict task keys "
            "and tasks would vanish. Set maxmemory-policy noeviction."
        )
        if strict:
            raise RedisSetupError(msg)
        found.append(msg)
    for msg in found:
        warnings.warn(msg, RuntimeWarning, stacklevel=3)
    log.debug("Redis %s, maxmemory-policy %s", version, policy)
    for level, msg in persistence_notes(client):
        log.log(level, node + msg)
    return found


def _primaries(cluster) -> list[tuple[str, redis_lib.Redis]]:
    """(``host:port``, its client) for every primary of a cluster."""
    return [(n.name, cluster.get_redis_connection(n)) for n in cluster.get_primaries()]


def persistence_notes(client) -> list[tuple[int, str]]:
    """What a crash of Redis would lose with its persistence settings: (logging level, message).

    WARNING when AOF is off (or ``appendfsync no``); INFO for ``everysec`` and ``always``.
    Logged at start-up (not a Python warning: a test Redis without AOF is fine) and shown
    by ``ghostless check``. On a cluster, a note per primary, each starting with its ``host:port``.
    """
    if is_cluster(client):
        return [(level, f"{n}: {msg}") for n, c in _primaries(client) for level, msg in persistence_notes(c)]
    try:
        info = client.info("persistence")
        fsync = client.config_get("appendfsync").get("appendfsync")
        save = client.config_get("save").get("save")
    except redis_lib.ResponseError:
        return [(logging.INFO, "persistence not verified: the server refuses INFO or CONFIG GET")]
    if "aof_enabled" not in info:
        return [(logging.INFO, "persistence not verified: INFO persistence has no aof_enabled")]
    if not int(info["aof_enabled"]):
        if save:
            lost = f"every transition since the last RDB snapshot (snapshot rule 'save {save}': minutes of work)"
        else:
            lost = "every task (RDB snapshots are off too)"
        return [
            (
                logging.WARNING,
                f"Redis AOF is off (appendonly no): a crash or restart of Redis loses {lost}; tasks then "
                "reappear in earlier states or not at all. Set appendonly yes with appendfsync everysec.",
            )
        ]
    if fsync == "everysec":
        return [
            (
                logging.INFO,
                "Redis AOF is on with appendfsync everysec: a crash of the machine (power, kernel) "
                "may lose up to about 1 s of acknowledged transitions (the sweeper re-runs what "
                "reappears in an earlier state); a crash of Redis alone loses nothing.",
            )
        ]
    if fsync == "always":
        return [
            (
                logging.INFO,
                "Redis AOF is on with appendfsync always: every acknowledged transition survives "
                "a crash (each write waits for fsync).",
            )
        ]
    return [
        (
            logging.WARNING,
            f"Redis AOF is on with appendfsync {fsync}: the OS decides when to write (often "
            "every 30 s), so a crash of the machine may lose that much. Prefer everysec.",
        )
    ]
