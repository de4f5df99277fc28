"""Redis replies as text, whichever way the client decodes.

A client made without ``decode_responses`` answers bytes, one made with it answers str: every
reader turns what it got into text here.
"""

from __future__ import annotations

import re


def text(v) -> str:
    """``v`` as str: bytes decoded (UTF-8), None as ``""``, anything else through ``str``."""
    if isinstance(v, bytes):
        return v.decode()
    return "" if v is None else str(v)


def text_or_none(v) -> str | None:
    """As ``text``, but None stays None (a missing key or field is not an empty one)."""
    return None if v is None else text(v)


_INT_TEXT = re.compile(r"-?[0-9]+")


def int_or_text(v):
    """``v`` as an int when it is the text of one (ASCII digits, an optional minus), else as it is: a
    stored number read back. ``str.isdigit`` alone is true for "²", which ``int`` refuses."""
    return int(v) if isinstance(v, str) and _INT_TEXT.fullmatch(v) else v


def decoded(v):
    """A script's reply with every bytes in it (nested lists too) decoded; other values as they are."""
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, list):
        return [decoded(x) for x in v]
    return v
