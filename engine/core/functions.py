"""How one script reaches Redis: as a Redis Function (FCALL) where it can, else by EVALSHA.

A function library (engine/core/lua_source.py ``library``) is loaded once and kept in Redis's data:
persisted with it, replicated, and so still there on a replica promoted by a failover. Its
constants and helpers are built when it loads; a script sent by EVALSHA builds them again on every
call (docs/performance.md: the part each lifecycle saves).

Calls go by EVALSHA instead
- on a Redis Cluster client: redis-py sends ``COMMAND GETKEYS`` before each FCALL to find its slot
  (an extra round trip per call), where it reads EVALSHA's keys itself;
- on a server without functions (Redis 6.2 answers FCALL with "unknown command");
- for a user whose ACL allows EVALSHA but not FCALL or FUNCTION LOAD;
- for one call, at maxmemory: a function that may write is refused before it runs, where by
  EVALSHA a call that ends up writing nothing (a replay, a refusal) still answers (``fallback``);
  and FUNCTION LOAD is refused there too, where SCRIPT LOAD is not.

A call that did not run because its server lacks what it names (a function after FUNCTION FLUSH
or on a new, empty server; a script after SCRIPT FLUSH or a restart) is loaded and sent again:
``missing`` tells such a reply, ``load`` loads. This module and engine/core/scripts.py are the only
ones that send Lua.
"""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Sequence

from redis.exceptions import NoPermissionError, NoScriptError, OutOfMemoryError, ResponseError

from .cluster import Call, is_cluster
from .lua_source import READ_ONLY, SCRIPTS, library, source
from .text import text

log = logging.getLogger("ghostless")


class LuaCall:
    """Script ``name`` on ``client`` (redis-py): ``call(keys, args)`` for its reply; ``command``,
    ``missing`` / ``load`` and ``fallback`` for a caller that sends it in a pipeline of its own."""

    def __init__(self, client, name: str):
        self.redis, self.name = client, name
        self.function, self.library = library(name)
        #: redis-py's Script of the same text: EVALSHA, and SCRIPT LOAD on NOSCRIPT
        self.script = client.register_script(source(name))
        self.fcall = not is_cluster(client)
        self._verb = "FCALL_RO" if name in READ_ONLY else "FCALL"
        self._twin: LuaCall | None = None

    @property
    def sha(self) -> str:
        return self.script.sha

    def command(self, keys: Sequence, args: Sequence) -> tuple:
        """The command that runs the script with ``keys`` and ``args``."""
        if self.fcall:
            return (self._verb, self.function, len(keys), *keys, *args)
        return ("EVALSHA", self.script.sha, len(keys), *keys, *args)

    @staticmethod
    def missing(reply) -> bool:
        """Whether ``reply`` is the error of a call that did not run because its server lacks the
        function or script it names, or has no functions (or lets this user call none)."""
        if isinstance(reply, NoScriptError):
            return True
        text = str(reply).lower() if isinstance(reply, ResponseError) else ""
        return text.startswith("function not found") or ("fcall" in text and _no_functions(reply))

    def fallback(self, reply):
        """The call to send instead when ``reply`` refused this one before it ran, else None.

        A function that may write is refused whole at maxmemory; by EVALSHA the same script runs
        until its first write, so a call that writes nothing (a replay, a refusal) still answers,
        as it did before scripts were functions."""
        if self.fcall and isinstance(reply, OutOfMemoryError):
            return self.by_evalsha()
        return None

    def by_evalsha(self):
        """This script, sent by EVALSHA."""
        if self._twin is None:
            self._twin = copy.copy(self)
            self._twin.fcall = False
        return self._twin

    def load(self, server):
        """Load what ``command`` names into ``server``; returns the call to send again there: this
        one, or by EVALSHA when the server refuses the library for now (maxmemory). On a server
        without functions, or a user who may not load or call them, every later call of this
        script goes by EVALSHA. Other refusals (a library Redis rejects) are raised."""
        if self.fcall:
            try:
                server.function_load(self.library)
                return self
            except ResponseError as e:
                if self._loaded_anyway(e):
                    return self
        server.script_load(self.script.script)
        return self._by_script()

    def _loaded_anyway(self, error: ResponseError) -> bool:
        """After FUNCTION LOAD refused with ``error``: True when the library is there all the same
        (another process loaded it meanwhile); False when the script is to go by EVALSHA (at
        maxmemory for this call, on a server without functions for good). Raises any other."""
        if "already exists" in str(error):
            return True
        if not isinstance(error, OutOfMemoryError):
            if not _no_functions(error):
                raise error
            self.fcall = False
            log.info("%s goes by EVALSHA from now on: %s", self.function, error)
        return False

    def _by_script(self):
        """The call to send once its script is loaded: this one, or by EVALSHA while it is a function."""
        return self.by_evalsha() if self.fcall else self

    def __call__(self, keys: Sequence = (), args: Sequence = (), client=None):
        """The reply of the script run on ``client`` (this one's by default); on a pipeline or a
        ScriptBatch the call is only queued (the pipeline is returned)."""
        client = self.redis if client is None else client
        keys, args = list(keys), list(args)
        if hasattr(client, "add_call"):  # a ScriptBatch (engine/core/cluster.py)
            return client.add_call(self, keys, args)
        if not self.fcall:
            return self.script(keys=keys, args=args, client=client)
        try:
            return client.execute_command(*self.command(keys, args))
        except ResponseError as e:
            again = self.fallback(e) or (self.load(client) if self.missing(e) else None)
            if again is None:
                raise
        if not again.fcall:
            return again.script(keys=keys, args=args, client=client)
        return client.execute_command(*again.command(keys, args))


class AsyncLuaCall(LuaCall):
    """``LuaCall`` on redis.asyncio (or fakeredis.aioredis): ``await call(keys, args)``."""

    async def aload(self, server):
        """``load`` on redis.asyncio."""
        if self.fcall:
            try:
                await server.function_load(self.library)
                return self
            except ResponseError as e:
                if self._loaded_anyway(e):
                    return self
        await server.script_load(self.script.script)
        return self._by_script()

    async def __call__(self, keys: Sequence = (), args: Sequence = (), client=None):
        client = self.redis if client is None else client
        keys, args = list(keys), list(args)
        if not self.fcall:
            return await self.script(keys=keys, args=args, client=client)
        try:
            return await client.execute_command(*self.command(keys, args))
        except ResponseError as e:
            again = self.fallback(e) or (await self.aload(client) if self.missing(e) else None)
            if again is None:
                raise
        if not again.fcall:
            return await again.script(keys=keys, args=args, client=client)
        return await client.execute_command(*again.command(keys, args))


def _no_functions(error) -> bool:
    """Whether ``error`` says the server has no functions (Redis 6.2) or this user may not use them."""
    return isinstance(error, NoPermissionError) or str(error).lower().startswith("unknown command")


def ensure_loaded(client, calls: list[LuaCall]) -> list[str]:
    """Load what ``calls`` need that the server lacks (on every primary of a cluster): the names of
    the scripts loaded. Raises redis errors."""
    loaded: set[str] = set()
    for server in _servers(client):
        if any(c.fcall for c in calls):
            try:
                have = _library_names(server.function_list("gl_*"))
            except ResponseError as e:  # no functions (Redis 6.2): each call goes by EVALSHA
                if not LuaCall.missing(e):
                    raise
                have = set()
            for c in calls:
                if c.fcall and c.function not in have:
                    c.load(server)
                    loaded.add(c.name)
        scripts = [c for c in calls if not c.fcall]
        present = server.script_exists(*(c.sha for c in scripts)) if scripts else []
        for c, ok in zip(scripts, present):
            if not ok:
                c.load(server)
                loaded.add(c.name)
    return [name for name in SCRIPTS if name in loaded]


def prune_libraries(client, calls: list[LuaCall]) -> list[str]:
    """Delete the function libraries of other ghostless releases from the server (every primary of a
    cluster), keeping those of ``calls``: the names deleted. A library is this engine's by its name
    (``gl_<script>_<digest>``, engine/core/lua_source.py ``library``); others are left alone. A
    process of an older release that still runs loads its own again on its next call. A server
    without functions (Redis 6.2) has nothing to delete."""
    ours = re.compile("gl_(" + "|".join(SCRIPTS) + ")_[0-9a-f]{16}")
    keep = {c.function for c in calls}
    deleted = []
    for server in _servers(client):
        try:
            names = _library_names(server.function_list("gl_*"))
        except ResponseError as e:  # a server without functions has none to delete
            if not _no_functions(e):
                raise
            continue
        for name in sorted(names):
            if ours.fullmatch(name) and name not in keep:
                server.function_delete(name)
                deleted.append(name)
    return deleted


class _Lua:
    """The raw Lua calls of cluster.run_then_wait (cluster.Lua), made here."""

    def send(self, server, calls: list[Call], asking: bool, wait: tuple) -> list:
        pipe = server.pipeline(transaction=False)
        for script, keys, args in calls:
            if asking:
                pipe.execute_command("ASKING")
            pipe.execute_command(*script.command(keys, args))
        pipe.execute_command(*wait)
        replies = pipe.execute(raise_on_error=False)
        return replies[1::2] + replies[-1:] if asking else replies

    def load(self, server, script):
        return script.load(server)


def _servers(client) -> list:
    """The client of every server the scripts run on: each primary of a cluster, else ``client``."""
    if is_cluster(client):
        return [client.get_redis_connection(node) for node in client.get_primaries()]
    return [client]


def _library_names(reply) -> set[str]:
    """The library names of a FUNCTION LIST reply (each library a flat list of names and values)."""
    names = set()
    for lib in reply:
        fields = (
            dict(zip(map(text, lib[::2]), lib[1::2])) if isinstance(lib, list) else {text(k): v for k, v in lib.items()}
        )
        names.add(text(fields["library_name"]))
    return names


LUA = _Lua()
