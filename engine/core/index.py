"""Task indexes read across their pages (lua/lib/index.lua writes them).

A queue's index and each owner's are a head zset (the key ``Keys.queue_index`` or
``Keys.owner_index`` names), a directory of older pages (page name -> bound) and the pages, each
holding the tasks created before its bound and at or after the next older page's. The pages and the
head never overlap, so the index read newest first is the head, then each page in turn.

``rows`` is ZREVRANGEBYSCORE over the whole index; ``route_command`` finds the page of a creation
time (the sweeper's purge); ``count`` and ``scan`` read every page (``check``).
"""

from __future__ import annotations

from typing import NamedTuple

from .keys import INDEX_PAGE, index_page, index_pages
from .steps import Call, Command, Commands
from .text import text


class Route(NamedTuple):
    """Where an index holds the tasks of one creation time: ``key`` (the head or a page), its page
    ``name`` ('' for the head), and the index's directory ``pages``."""

    key: str
    name: str
    pages: str


def route_command(index: str, at: str | int) -> Command:
    """The read that finds the page of a time (lib/index.lua index_route): the oldest page whose
    bound is above it; none for the head."""
    return Command("zrangebyscore", (index_pages(index), f"({at}", "+inf"), {"start": 0, "num": 1})


def head(index: str) -> Route:
    """The Route of a time at or after an index's newest bound: its head."""
    return Route(index, "", index_pages(index))


def route_of(index: str, reply) -> Route:
    """The Route of ``route_command``'s reply."""
    name = text(reply[0]) if reply else ""
    return Route(index_page(index, name), name, index_pages(index)) if name else head(index)


def rows(index: str, top: str | int, offset: int, num: int) -> Call[list[tuple[int, str]]]:
    """(score, id) of ``ZREVRANGEBYSCORE index top -inf LIMIT offset num`` over the head and pages.

    One pipeline reads the head, then the directory: a submit that moves the head into a page in
    between leaves its tasks in both reads (kept once), never in neither. A second reads the pages
    that may hold what the head lacks (more rounds only where purges left pages thin). An offset
    is skipped where it falls, by counts (a head or a page of one millisecond may hold many tasks).
    """
    pages = index_pages(index)
    chunk = num // INDEX_PAGE + 2  # pages read per round: enough for ``num`` rows from full pages
    in_head, head, newer, older = yield Commands(
        (
            Command("zcount", (index, "-inf", top)),
            _read(index, top, offset, num),
            route_command(index, top),  # the one page that may hold tasks at and after top
            _older(pages, top, chunk),
        )
    )
    found, skip = _rows({}, head), max(0, offset - in_head)
    names = [text(n) for n in newer] + [text(n) for n, _ in older]
    while len(found) < num and names:
        keys, starts = [index_page(index, n) for n in names], [0] * len(names)
        if skip:  # the pages the offset passes over, by their counts
            counts = yield Commands(tuple(Command("zcount", (key, "-inf", top)) for key in keys))
            for i, count in enumerate(counts):
                starts[i] = min(skip, count)
                skip -= starts[i]
        read = yield Commands(tuple(_read(key, top, at, num - len(found)) for key, at in zip(keys, starts)))
        for page in read:
            _rows(found, page)
        if len(found) >= num or len(older) < chunk:
            break
        # On from the last bound read, not by an offset: a purge may empty a page read already.
        older = yield _older(pages, f"({older[-1][1]:.0f}", chunk)
        names = [text(n) for n, _ in older]
    return sorted(((s, m) for m, s in found.items()), key=newest_first)[:num]


def _older(pages: str, below: str | int, num: int) -> Command:
    """The next ``num`` pages, newest first, whose bound is at or below ``below`` (bounds only grow
    from one page to the next newer one: lib/index.lua index_roll)."""
    return Command("zrevrangebyscore", (pages, below, "-inf"), {"start": 0, "num": num, "withscores": True})


def _read(key: str, top: str | int, start: int, num: int) -> Command:
    return Command("zrevrangebyscore", (key, top, "-inf"), {"start": start, "num": num, "withscores": True})


def _rows(found: dict[str, int], reply) -> dict[str, int]:
    """``found`` (id -> score) with a ``_read`` reply's rows added."""
    found.update((text(m), int(s)) for m, s in reply)
    return found


def newest_first(row: tuple[int, str]) -> tuple[int, tuple[int, ...]]:
    """Sort key of (score, id) rows, newest first; ties in the order ZREVRANGEBYSCORE returns them
    (by id, descending)."""
    return -row[0], tuple(-b for b in row[1].encode())


def keys_of(client, index: str) -> list[str]:
    """Every key of an index: its head and its pages, newest first (one read of the directory)."""
    names = client.zrevrange(index_pages(index), 0, -1)
    return [index, *(index_page(index, text(n)) for n in names)]


def count(client, index: str) -> int:
    """The tasks an index lists (a read of its directory, then one ZCARD per page, pipelined)."""
    pipe = client.pipeline(transaction=False)
    for key in keys_of(client, index):
        pipe.zcard(key)
    return sum(pipe.execute())


def scan(client, index: str, tries: int = 5) -> tuple[dict[str, float], list[str]]:
    """Every task of an index (id -> score), and what is wrong with its pages: a task outside its
    page's bounds (index_route would not find it), a page named in the directory but empty.

    The directory is read again after the pages, and the scan made again (up to ``tries`` times)
    while it changed: a submit that moved the head, or a purge that emptied a page, meanwhile."""
    bounds = client.zrange(index_pages(index), 0, -1, withscores=True)
    for _ in range(tries):
        found, problems = _scan(client, index, [(text(n), b) for n, b in bounds])
        bounds, before = client.zrange(index_pages(index), 0, -1, withscores=True), bounds
        if bounds == before:
            break
    return found, problems


def _scan(client, index: str, bounds: list[tuple[str, float]]) -> tuple[dict[str, float], list[str]]:
    found: dict[str, float] = {}
    problems: list[str] = []
    low = float("-inf")
    for name, high in [*bounds, ("", float("inf"))]:
        key = index_page(index, name) if name else index
        rows = [(text(m), s) for m, s in client.zrange(key, 0, -1, withscores=True)]
        if name and not rows:
            problems.append(f"{index}: page {name} is in the directory but empty")
        for tid, score in rows:
            found[tid] = score
            if not low <= score < high:
                problems.append(f"{tid}: in page {name or '(head)'} of {index}, outside its bounds [{low}, {high})")
        low = high
    return found, problems
