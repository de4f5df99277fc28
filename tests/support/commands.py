"""Counting the commands a client sends (each one a round trip, outside pipelines)."""

from __future__ import annotations

import threading


def sent_commands(monkeypatch, client) -> list[str]:
    """The names of the commands ``client`` sends from now on, from this thread only (the patch is
    on the client's class: other threads' calls, a guard's or a broker's, are left out)."""
    sent: list[str] = []
    me, real = threading.get_ident(), type(client).execute_command

    def counting(self, *args, **kwargs):
        if threading.get_ident() == me:
            sent.append(args[0])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(type(client), "execute_command", counting)
    return sent
