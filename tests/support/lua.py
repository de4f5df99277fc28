"""What a server holds of the engine's Lua: its function libraries and its script cache."""

from __future__ import annotations

import hashlib

from ghostless.core.lua_source import library, source


def forget_lua(client) -> None:
    """Drop every function library and cached script, as a restart that lost Redis's data would."""
    client.function_flush()
    client.script_flush()


def function_loaded(client, name: str) -> bool:
    """Whether script ``name``'s function library is loaded (engine/core/functions.py sends FCALL)."""
    return bool(client.function_list(library(name)[0]))


def script_cached(client, name: str) -> bool:
    """Whether script ``name``'s EVALSHA text is in the script cache."""
    return bool(client.script_exists(hashlib.sha1(source(name).encode()).hexdigest())[0])


def loaded(engine, name: str) -> bool:
    """Whether the server holds script ``name`` as ``engine`` sends it: its function, or (on a
    cluster, or a server without functions) its cached script."""
    if engine.scripts._scripts[name].fcall:
        return function_loaded(engine.redis, name)
    return script_cached(engine.redis, name)
