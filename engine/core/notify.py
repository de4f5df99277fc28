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

The delivery type is internal: only the engine submits it (users would otherwise have the
workers sign forged events to any address). ``deliver`` POSTs over http(s) only, to a host
whose every resolved address is public (loopback, link-local, private, multicast, unspecified
and reserved ones are refused unless ``allow_hosts`` names the host or a network holding the
address), and connects to the address it checked, so a DNS answer that changes in between
cannot swap it. Redirects are never followed: a 3xx is a failed attempt. Every refused
destination fails for good with one and the same reason, whatever is listening there.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import ipaddress
import json
import socket
import time
from collections.abc import Iterable
from urllib.parse import urlsplit

from .errors import PermanentError
from .registry import Backoff
from .text import text

TYPE = "ghostless.notify"
MAX_URL = 2048
OWNER_CACHE_SECONDS = 10.0


def submit_url(engine, type_name: str, owner: str, notify_url: str | None) -> str | None:
    """The webhook a new task of ``type_name`` notifies: ``notify_url`` (checked), else its owner's
    default (if any); None without notifications. ValueError for a URL without notifications."""
    if notify_url is not None:
        if TYPE not in engine.registry:
            raise ValueError("notify_url needs engine.enable_notifications(secret) in the app")
        return check_url(notify_url)
    return owner_webhook(engine, owner) if TYPE in engine.registry and type_name != TYPE else None


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


REFUSED = "destination refused: webhooks go to public http(s) addresses only"


class Destinations:
    """Where deliveries may go: public addresses, plus the hosts and networks of ``allow_hosts``
    (host names, IP addresses or CIDR networks such as ``10.0.0.0/8``)."""

    def __init__(self, allow_hosts: Iterable[str] = ()):
        if isinstance(allow_hosts, str):
            raise ValueError("allow_hosts must be a list of host names, addresses or networks")
        self.hosts: set[str] = set()
        self.networks = []
        for entry in allow_hosts:
            try:
                self.networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                self.hosts.add(str(entry).lower())

    def check(self, url: str) -> tuple[str, str, int, list[str]]:
        """(scheme, host, port, the addresses to connect to) of an allowed URL. Raises
        PermanentError(REFUSED) for any refused one, DeliveryFailed when the host does not resolve."""
        parts = urlsplit(url)
        try:
            host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:  # a port that is not a number or out of range
            host = None
        if parts.scheme not in ("http", "https") or not host:
            raise PermanentError(REFUSED, kind="webhook_refused")
        try:
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            raise DeliveryFailed("cannot resolve the receiver's host") from None
        addresses = [str(info[4][0]) for info in found]
        if not addresses or not all(self._allowed(host, a) for a in addresses):
            raise PermanentError(REFUSED, kind="webhook_refused")
        return parts.scheme, host, port, addresses

    def _allowed(self, host: str, address: str) -> bool:
        ip = ipaddress.ip_address(address.split("%")[0])  # an IPv6 zone id is no part of it
        if host.lower() in self.hosts or any(ip in net for net in self.networks):
            return True
        ip = getattr(ip, "ipv4_mapped", None) or ip  # ::ffff:127.0.0.1 is loopback too
        return ip.is_global and not (
            ip.is_loopback
            or ip.is_link_local
            or ip.is_private
            or ip.is_multicast
            or ip.is_unspecified
            or ip.is_reserved
        )


def post(destinations: Destinations, url: str, body: bytes, headers: dict, timeout: float) -> int:
    """POST to ``url`` if it is an allowed destination, connected to the address that was checked;
    returns the status (a redirect is not followed)."""
    scheme, host, port, addresses = destinations.check(url)
    parts = urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    last: Exception | None = None
    for address in addresses:
        cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
        conn = cls(host, port, timeout=timeout)  # TLS checks the certificate against the host name
        # http.client's own hook (not in its stubs): connect to the address checked, not a new lookup
        conn._create_connection = (  # type: ignore[attr-defined]
            lambda _, *a, ip=address, **kw: socket.create_connection((ip, port), *a, **kw)
        )
        try:
            conn.request("POST", path, body=body, headers=headers)
            return conn.getresponse().status
        except (OSError, http.client.HTTPException) as e:
            last = e
        finally:
            conn.close()
    raise DeliveryFailed(f"cannot reach the receiver: {type(last).__name__}")


def enable(
    engine,
    secret: str,
    queue: str = "notifications",
    max_attempts: int = 8,
    timeout: float = 10.0,
    backoff: Backoff | None = None,
    allow_hosts: Iterable[str] = (),
) -> None:
    """Register the delivery task type (workers must run the same app to deliver).

    ``allow_hosts`` opens destinations that are refused by default (loopback, private, ...): host
    names, addresses or networks, for tests and single-host setups.
    """
    if not isinstance(secret, str) or len(secret) < 16:
        raise ValueError("the webhook signing secret must be a string of at least 16 characters")
    destinations = Destinations(allow_hosts)

    @engine.task(
        name=TYPE,
        queue=queue,
        lease=max(10.0, timeout * 2),
        timeout=timeout * 3,
        max_attempts=max_attempts,
        backoff=backoff or Backoff.exponential(base=5, factor=3, cap=3600),
    )
    def deliver(ctx, url, event):
        body = json.dumps(event, sort_keys=True).encode()
        stamp = str(int(time.time()))
        status = post(
            destinations,
            url,
            body,
            {
                "Content-Type": "application/json",
                "User-Agent": "ghostless-webhook",
                "X-Ghostless-Event": event["event"],
                "X-Ghostless-Delivery": ctx.task_id,
                "X-Ghostless-Timestamp": stamp,
                "X-Ghostless-Signature": sign(secret, stamp, body),
            },
            timeout,
        )
        if 200 <= status < 300:
            return {"status": status}
        if status == 410:  # the receiver says: never again
            raise PermanentError("receiver answered 410 Gone", kind="webhook_gone")
        if 300 <= status < 400:
            raise DeliveryFailed(f"receiver answered {status} (redirects are not followed)")
        raise DeliveryFailed(f"receiver answered {status}")


def owner_webhook(engine, owner: str) -> str | None:
    """The owner's default webhook (cached a few seconds per process)."""
    now = time.monotonic()
    cache = engine._webhook_cache
    if cache is None or now - cache[0] > OWNER_CACHE_SECONDS:
        raw = engine.redis.hgetall(engine.keys.webhooks())
        cache = engine._webhook_cache = (now, {text(k): text(v) for k, v in raw.items()})
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
        task = engine.submit(
            TYPE, {"url": event.pop("url"), "event": event}, owner=event["owner"], idempotency_key=key, internal=True
        )
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
