"""Lua sources of the transition scripts (data, loaded by engine/scripts.py)."""
