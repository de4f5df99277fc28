"""Task states and the transition table: the single source of truth.

The Lua side never spells a transition out by hand: the script loader turns
``TRANSITIONS`` into a Lua table that every script checks before it writes,
and ``tests/engine/test_lua_headers.py`` checks each script's header against it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class State(str, enum.Enum):
    PENDING = "PENDING"
    QUEUED = "QUEUED"
    PROCESSING = "PROCESSING"
    RETRY_WAITING = "RETRY_WAITING"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    CANCELLED = "CANCELLED"

    def __str__(self) -> str:  # so f-strings and JSON show the bare name
        return self.value

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({State.SUCCESS, State.FAILED, State.TIMEOUT, State.CANCELLED})
NON_TERMINAL = frozenset(State) - TERMINAL

#: Which deadline set holds a task in each non-terminal state (invariant 2).
DEADLINE_SET = {
    State.PENDING: "dispatch",
    State.QUEUED: "dispatch",
    State.PROCESSING: "leases",
    State.RETRY_WAITING: "retries",
}


@dataclass(frozen=True)
class Transition:
    verb: str
    sources: frozenset[State]  # empty for submit (the task does not exist yet)
    targets: frozenset[State]
    who: str
    #: The state changes one call makes, where not every source goes to every target
    #: (None as a source: a task that did not exist).
    edges: tuple[tuple[State | None, State], ...] = ()

    def all_edges(self) -> list[tuple[State | None, State]]:
        if self.edges:
            return list(self.edges)
        return [(s, d) for s in _ordered(self.sources) for d in _ordered(self.targets)] or [
            (None, d) for d in _ordered(self.targets)
        ]


def _ordered(states) -> list[State]:
    return sorted(states, key=list(State).index)


def _t(verb: str, sources, targets, who: str, edges=()) -> Transition:
    return Transition(verb, frozenset(sources), frozenset(targets), who, tuple(edges))


_P, _Q, _R = State.PENDING, State.QUEUED, State.PROCESSING
_W, _S, _F, _T, _C = State.RETRY_WAITING, State.SUCCESS, State.FAILED, State.TIMEOUT, State.CANCELLED

TRANSITIONS: dict[str, Transition] = {
    t.verb: t
    for t in [
        _t("submit", [], [_P], "client"),
        # QUEUED -> QUEUED is a re-dispatch of a task whose RQ job was lost.
        _t("dispatch", [_P, _Q], [_Q], "engine"),
        _t("claim", [_P, _Q], [_R], "worker"),
        _t("heartbeat", [_R], [_R], "lease holder"),
        _t("stage", [_R], [_R], "lease holder"),
        _t("progress", [_R], [_R], "lease holder"),
        _t("checkpoint", [_R], [_R], "lease holder"),
        _t("complete", [_R], [_S], "lease holder"),
        _t("fail", [_R], [_W, _F], "lease holder"),
        _t("release", [_R], [_P], "lease holder"),
        # PROCESSING -> TIMEOUT is always recorded; TIMEOUT -> RETRY_WAITING follows when attempts remain.
        _t("expire", [_R], [_T, _W], "sweeper", edges=[(_R, _T), (_T, _W)]),
        _t("promote", [_W], [_P], "sweeper"),
        # The upstream's circuit breaker is open: wait without consuming an attempt, or fail fast.
        _t("park", [_P, _Q], [_W, _F], "worker"),
        # A task waiting on parents: ready when all succeeded, cancelled when one did not.
        _t("resolve", [_P], [_P, _C], "engine"),
        # Not started by its expiry (submit's expires_in): cancelled, reason expired.
        _t("lapse", [_P, _Q, _W], [_C], "sweeper, or the claim that finds it expired"),
        _t("cancel", NON_TERMINAL, [_C], "owner / admin"),
        # The old task is cancelled; its replacement is a new task in PENDING.
        _t("edit", NON_TERMINAL, [_C, _P], "owner / admin", edges=[(s, _C) for s in (_P, _Q, _R, _W)] + [(None, _P)]),
        _t("retry", [_F, _T], [_P], "owner / admin"),
    ]
}


def mermaid() -> str:
    """The state diagram of docs/lifecycle.md, generated from TRANSITIONS (a test keeps them equal)."""
    lines = ["stateDiagram-v2"]
    for t in TRANSITIONS.values():
        if t.who == "lease holder" and t.sources == t.targets:
            continue  # heartbeat, stage, progress, checkpoint: no state change to draw
        for src, dst in t.all_edges():
            label = t.verb if src is not None or t.verb == "submit" else f"{t.verb} (the new task)"
            lines.append(f"    {src.value if src else '[*]'} --> {dst.value}: {label}")
    lines += [f"    {s.value} --> [*]" for s in _ordered(TERMINAL)]
    return "\n".join(lines)


def table() -> str:
    """The transition table of docs/lifecycle.md, as Markdown."""
    rows = ["| verb | from | to | who |", "|---|---|---|---|"]
    for t in TRANSITIONS.values():
        src = ", ".join(s.value for s in _ordered(t.sources)) or "(none)"
        dst = ", ".join(s.value for s in _ordered(t.targets))
        # expire: TIMEOUT, then on to RETRY_WAITING (a state reached in the call, not started from)
        chained = [d for s, d in t.edges if s in t.targets and s not in t.sources]
        if chained:
            first = [d for s, d in t.edges if s not in t.targets]
            dst = f"{', '.join(x.value for x in first)}, then {', '.join(x.value for x in chained)} (same call)"
        rows.append(f"| {t.verb} | {src} | {dst} | {t.who} |")
    return "\n".join(rows)


def implied(which: str) -> dict[str, str]:
    """Verb -> the one state its transitions leave (``which`` "from") or reach ("to"), for the verbs
    that have one: a history entry leaves it out (engine/core/models.py HISTORY_LAYOUT). Entries
    already stored are read back with it, so a verb given a second source or target must keep its
    old state readable (tests/engine/test_history_format.py pins the table)."""
    out = {}
    for t in TRANSITIONS.values():
        states = t.sources if which == "from" else t.targets
        if len(states) == 1 and t.sources != t.targets:  # not a touch (heartbeat, stage, ...)
            out[t.verb] = next(iter(states)).value
    return out
