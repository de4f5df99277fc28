"""Reading an SSE response of the Flask test client, event by event, with deadlines.

The app's keep-alive interval is short in tests, so each read of the response returns
within it and a deadline can be checked between reads (no sleeping).
"""

from __future__ import annotations

import json
import time


class SSE:
    def __init__(self, response):
        assert response.status_code == 200, response.get_data(as_text=True)
        assert response.mimetype == "text/event-stream"
        self.response = response
        self._chunks = iter(response.response)
        self._text = ""
        self.ended = False
        self.comments = 0

    def _message(self, deadline: float) -> str | None:
        while "\n\n" not in self._text:
            if time.monotonic() > deadline:
                raise AssertionError("timed out waiting for an SSE message")
            try:
                chunk = next(self._chunks)
            except StopIteration:
                self.ended = True
                return None
            self._text += chunk.decode() if isinstance(chunk, bytes) else chunk
        message, self._text = self._text.split("\n\n", 1)
        return message

    def next(self, timeout: float = 5.0) -> dict | None:
        """The next event ({"id", "event", "data"}), skipping comments and retry-only
        messages; None when the stream has ended."""
        deadline = time.monotonic() + timeout
        while True:
            message = self._message(deadline)
            if message is None:
                return None
            event = {}
            for line in message.split("\n"):
                if line.startswith(":"):
                    self.comments += 1
                    continue
                name, _, value = line.partition(": ")
                if name == "data":
                    event["data"] = event.get("data", "") + value
                elif name in ("id", "event"):
                    event[name] = value
            if "data" in event:
                event["data"] = json.loads(event["data"])
                return event

    def take(self, n: int, timeout: float = 5.0) -> list[dict]:
        out = []
        for _ in range(n):
            event = self.next(timeout)
            assert event is not None, f"stream ended after {out}"
            out.append(event)
        return out

    def rest(self, timeout: float = 5.0) -> list[dict]:
        """Every event until the stream ends."""
        out = []
        while (event := self.next(timeout)) is not None:
            out.append(event)
        return out

    def next_comment(self, timeout: float = 5.0) -> str:
        """The next comment (a keep-alive while nothing happens); fails on an event."""
        deadline = time.monotonic() + timeout
        while True:
            message = self._message(deadline)
            assert message is not None, "stream ended"
            if message.startswith(":"):
                return message
            assert "data:" not in message, f"expected a comment, got {message!r}"

    def close(self) -> None:
        self.response.close()


def open_sse(client, url: str, **kwargs) -> SSE:
    return SSE(client.get(url, buffered=False, **kwargs))
