"""Webhook notifications, delivered as ghostless tasks themselves.

A task with a ``notify_url`` (given at submit, or its owner's default webhook)
gets a notification when it ends (SUCCESS, FAILED, TIMEOUT, CANCELLED) and when
it is recorded overdue or escalated. The script that records the event appends
it to its queue's outbox, in the same call; the sweeper hands each outbox entry
to the built-in task type ``ghostless.notify`` (idempotency key per event, so a
retried hand-off makes one task). Delivery therefore has the engine's retries
with backoff, ends FAILED ("dead") after its attempts, and never blocks the
task's own flow. Each request is signed: ``X-Ghostless-Signature:
sha256=<hex HMAC-SHA256 of "<timestamp>.<body>" with the shared secret>``, with
the timestamp in ``X-Ghostless-Timestamp`` (receivers should refuse old ones).
"""
from __future__ import annotations

import hashlib
import hmac
import json
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from .errors import PermanentError
from .registry import Backoff

TYPE = "ghostless.notify"
MAX_URL = 2048
OWNER_CACHE_SECONDS = 10.0


def check_url(url: object) -> str:
    if not isinstance(url, str) or len(url) > MAX_URL:
        raise ValueError(f"notify_url must be a string of at most {MAX_URL} characters")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("notify_url must be an http(s) URL with a host")
    return url


def sign(secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


class DeliveryFailed(Exception):
    """The receiver did not answer 2xx: retried with the notification type's backoff."""


def enable(engine, secret: str, queue: str = "notifications", max_attempts: int = 8, timeout: float = 10.0,
           backoff: Backoff | None = None) -> None:
    """Register the delivery task type (workers must run the same app to deliver)."""
    if not isinstance(secret, str) or len(secret) < 16:
        raise ValueError("the webhook signing secret must be a string of at least 16 characters")

    @engine.task(name=TYPE, queue=queue, lease=max(10.0, timeout * 2), timeout=timeout * 3,
                 max_attempts=max_attempts, backoff=backoff or Backoff.exponential(base=5, factor=3, cap=3600))
    def deliver(ctx, url, event):
        body = json.dumps(event, sort_keys=True).encode()
        stamp = str(int(time.time()))
        request = urllib.request.Request(url, data=body, method="POST", headers={
            "Content-Type": "application/json", "User-Agent": "ghostless-webhook",
            "X-Ghostless-Event": event["event"], "X-Ghostless-Delivery": ctx.task_id,
            "X-Ghostless-Timestamp": stamp, "X-Ghostless-Signature": sign(secret, stamp, body)})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return {"status": response.status}
        except urllib.error.HTTPError as e:
            if e.code == 410:  # the receiver says: never again
                raise PermanentError("receiver answered 410 Gone", kind="webhook_gone") from None
            raise DeliveryFailed(f"receiver answered {e.code}") from None
        except (urllib.error.URLError, OSError) as e:
            raise DeliveryFailed(f"cannot reach the receiver: {e}") from None

    engine._notify_queue = queue


def owner_webhook(engine, owner: str) -> str | None:
    """The owner's default webhook (cached a few seconds per process)."""
    now = time.monotonic()
    cache = engine._webhook_cache
    if cache is None or now - cache[0] > OWNER_CACHE_SECONDS:
        raw = engine.redis.hgetall(engine.keys.webhooks())
        cache = engine._webhook_cache = (now, {_s(k): _s(v) for k, v in raw.items()})
    return cache[1].get(owner)


def hand_off(engine, queue: str, batch: int = 100) -> int:
    """Turn a queue's outbox entries into delivery tasks (the sweeper calls this). Returns how many."""
    if TYPE not in engine.registry:
        return 0
    outbox = engine.keys.queue_key(queue, "outbox")
    entries = engine.redis.lrange(outbox, 0, batch - 1)
    for raw in entries:
        event = json.loads(raw)
        key = f"notify:{event['task']}:{event['event']}:{event['version']}"
        task = engine.submit(TYPE, {"url": event.pop("url"), "event": event}, owner=event["owner"],
                             idempotency_key=key)
        if not task.replayed:  # a hand-off cut short before its removal is made again: list it once
            engine.redis.rpush(engine.keys.task(event["task"]).notifications, task.id)
    if entries:
        # Exactly the entries handed off: another sweeper may have taken the head meanwhile, and
        # trimming "the first N" would then drop entries nobody read.
        pipe = engine.redis.pipeline(transaction=False)
        for raw in entries:
            pipe.lrem(outbox, 1, raw)
        pipe.execute()
    return len(entries)


def _s(v):
    return v.decode() if isinstance(v, bytes) else v
