"""Shared Lua helpers, prepended to every script by engine/scripts.py."""
