"""How one script reaches Redis: as a Redis Function (FCALL) where it can, else by EVALSHA.

A function library (engine/core/lua_source.py ``library``) is loaded once and kept in Redis's data:
persisted with it, replicated, and so still there on a replica promoted by a failover. Its
constants and helpers are built when it loads; a script sent by EVALSHA builds them again on every
call (docs/performance.md: the part each lifecycle saves).

Calls go by EVALSHA instead
- on a Redis Cluster client: redis-py sends ``COMMAND GETKEYS`` before each FCALL to find its slot
  (an extra round trip per call), where it reads EVALSHA's keys itself;
- on a server without functions (Redis 6.2 answers FCALL with "unknown command");
- once a library could not be loaded (FUNCTION LOAD is refused at maxmemory, SCRIPT LOAD is not;
  a library Redis rejects is logged): that script, for the rest of the process.

A call that did not run because its server lacks what it names (a function after FUNCTION FLUSH
or on a new, empty server; a script after SCRIPT FLUSH or a restart) is loaded and sent again:
``missing`` tells such a reply, ``load`` loads. This module and engine/core/scripts.py are the only
ones that send Lua.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from redis.exceptions import NoScriptError, ResponseError

from .cluster import Call, is_cluster
from .lua_source import READ_ONLY, SCRIPTS, library, source
from .text import text

log = logging.getLogger("ghostless")


class LuaCall:
    """Script ``name`` on ``client`` (redis-py): ``call(keys, args)`` for its reply, ``command`` and
    ``missing`` / ``load`` for a caller that sends it in a pipeline of its own."""

    def __init__(self, client, name: str):
        self.redis, self.name = client, name
        self.function, self.library = library(name)
        #: redis-py's Script of the same text: EVALSHA, and SCRIPT LOAD on NOSCRIPT
        self.script = client.register_script(source(name))
        self.fcall = not is_cluster(client)
        self._verb = "FCALL_RO" if name in READ_ONLY else "FCALL"

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
        function or script it names, or has no functions at all."""
        if isinstance(reply, NoScriptError):
            return True
        text = str(reply).lower() if isinstance(reply, ResponseError) else ""
        return text.startswith("function not found") or (text.startswith("unknown command") and "fcall" in text)

    def load(self, server) -> None:
        """Load what ``command`` names into ``server``, so that it runs there when sent again: the
        library, or the script once the library cannot be loaded (then EVALSHA from now on)."""
        if self.fcall:
            try:
                server.function_load(self.library)
                return
            except ResponseError as e:
                if "already exists" in str(e):  # loaded meanwhile by another process
                    return
                self._by_evalsha(e)
        server.script_load(self.script.script)

    def _by_evalsha(self, error: Exception) -> None:
        self.fcall = False
        known = str(error).lower().startswith(("unknown command", "oom"))
        log.log(logging.INFO if known else logging.WARNING, "%s goes by EVALSHA: %s", self.function, error)

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
            if not self.missing(e):
                raise
            self.load(client)
        if not self.fcall:
            return self.script(keys=keys, args=args, client=client)
        return client.execute_command(*self.command(keys, args))


class AsyncLuaCall(LuaCall):
    """``LuaCall`` on redis.asyncio (or fakeredis.aioredis): ``await call(keys, args)``."""

    async def aload(self, server) -> None:
        if self.fcall:
            try:
                await server.function_load(self.library)
                return
            except ResponseError as e:
                if "already exists" in str(e):
                    return
                self._by_evalsha(e)
        await server.script_load(self.script.script)

    async def __call__(self, keys: Sequence = (), args: Sequence = (), client=None):
        client = self.redis if client is None else client
        keys, args = list(keys), list(args)
        if not self.fcall:
            return await self.script(keys=keys, args=args, client=client)
        try:
            return await client.execute_command(*self.command(keys, args))
        except ResponseError as e:
            if not self.missing(e):
                raise
            await self.aload(client)
        if not self.fcall:
            return await self.script(keys=keys, args=args, client=client)
        return await client.execute_command(*self.command(keys, args))


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

    def load(self, server, script) -> None:
        script.load(server)


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
