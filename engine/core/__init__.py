"""The core: states, keys, Lua scripts, the Engine and its verbs, sweep, stats, check."""
