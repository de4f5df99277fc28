"""Webhook notifications: recorded with the event, handed to delivery tasks, signed, retried."""

import hashlib
import hmac
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from ghostless import State, UnknownTaskType
from ghostless.core.notify import REFUSED, TYPE, hand_off
from ghostless.execution.runner import execute

SECRET = "s3cret-for-tests-0123456789"


@pytest.fixture
def notifying(engine):
    engine.enable_notifications(SECRET, backoff=[0.01], allow_hosts=["127.0.0.1"])
    return engine


@pytest.fixture
def receiver():
    """A local webhook receiver answering with the status the test sets."""
    got, answer = [], {"status": 200}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((dict(self.headers), body))
            self.send_response(answer["status"])
            if "location" in answer:
                self.send_header("Location", answer["location"])
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    # shutdown() waits for the loop's next look: 0.5 s by default, per test
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/hook", got, answer
    server.shutdown()
    server.server_close()


def finish(engine, task_id):
    engine.complete(engine.claim(task_id, "w1"), {"url": "x"})


def test_an_ended_task_gets_one_delivery_task_per_event(notifying):
    task = notifying.submit("render", {}, owner="alice", notify_url="https://example.invalid/hook")
    finish(notifying, task.id)
    assert notifying.sweep().notified == 1
    [delivery] = notifying.notifications(task.id)
    assert delivery.type == TYPE and delivery.owner == "alice"
    event = delivery.args["event"]
    assert (event["task"], event["event"], event["status"]) == (task.id, "terminal", "SUCCESS")
    assert notifying.sweep().notified == 0
    assert notifying.check() == []


def test_a_hand_off_repeated_after_a_crash_makes_no_second_delivery(notifying):
    task = notifying.submit("render", {}, owner="alice", notify_url="https://example.invalid/hook")
    finish(notifying, task.id)
    outbox = notifying.keys.queue_key("images", "outbox")
    entry = notifying.redis.lindex(outbox, 0)
    assert hand_off(notifying, "images") == 1
    notifying.redis.rpush(outbox, entry)  # as if its removal had not happened
    assert hand_off(notifying, "images") == 1
    assert len(notifying.notifications(task.id)) == 1


def test_two_sweepers_handing_off_at_once_lose_no_notification(notifying):
    url = "https://example.invalid/hook"
    a, b, c = (notifying.submit("render", {"n": n}, owner="alice", notify_url=url) for n in "abc")
    notifying.cancel(a.id, by="alice")
    real_submit = notifying.submit

    def meanwhile(*args, **kwargs):  # sweeper 2 reads the outbox; then sweeper 1 hands off, b and c end
        notifying.submit = real_submit
        made = real_submit(*args, **kwargs)
        hand_off(notifying, "images")
        notifying.cancel(b.id, by="alice")
        notifying.cancel(c.id, by="alice")
        return made

    notifying.submit = meanwhile
    hand_off(notifying, "images")  # sweeper 2, which had read only a's entry
    hand_off(notifying, "images")
    assert [len(notifying.notifications(t.id)) for t in (a, b, c)] == [1, 1, 1]
    assert notifying.redis.llen(notifying.keys.queue_key("images", "outbox")) == 0


def test_the_owners_default_webhook_applies_to_their_new_tasks(notifying):
    notifying.set_webhook("alice", "https://example.invalid/alice")
    task = notifying.submit("render", {}, owner="alice")
    assert notifying.get(task.id).notify_url == "https://example.invalid/alice"
    assert notifying.get(notifying.submit("render", {}, owner="bob").id).notify_url == ""


def test_overdue_and_escalated_are_notified_too(notifying):
    from tests.support.wait import wait_for_server_time

    task = notifying.submit("render", {}, owner="alice", notify_url="https://example.invalid/h", due_in=0.01)
    wait_for_server_time(notifying.redis, notifying.get(task.id).due_at * 1000)
    notifying.sweep()
    events = [d.args["event"]["event"] for d in notifying.notifications(task.id)]
    assert events == ["overdue"]


def test_delivery_is_signed_and_a_receiver_error_is_retried(notifying, receiver):
    url, got, answer = receiver
    task = notifying.submit("render", {}, owner="alice", notify_url=url)
    finish(notifying, task.id)
    notifying.sweep()
    [delivery] = notifying.notifications(task.id)
    answer["status"] = 500
    execute(notifying, notifying.claim(delivery.id, "w1"))
    assert notifying.get(delivery.id).status == State.RETRY_WAITING
    headers, body = got[-1]
    stamp = headers["X-Ghostless-Timestamp"]
    mac = hmac.new(SECRET.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    assert headers["X-Ghostless-Signature"] == f"sha256={mac}"
    assert json.loads(body)["task"] == task.id and headers["X-Ghostless-Event"] == "terminal"


def test_a_receiver_answering_410_stops_the_deliveries(notifying, receiver):
    url, _got, answer = receiver
    answer["status"] = 410
    task = notifying.submit("render", {}, owner="alice", notify_url=url)
    finish(notifying, task.id)
    notifying.sweep()
    [delivery] = notifying.notifications(task.id)
    execute(notifying, notifying.claim(delivery.id, "w1"))
    assert (notifying.get(delivery.id).status, notifying.get(delivery.id).error_kind) == (State.FAILED, "webhook_gone")


@pytest.mark.parametrize(
    "url", ["ftp://x/y", "file:///etc/passwd", "gopher://127.0.0.1:6379/_x", "not a url", "http://", 42]
)
def test_bad_webhook_urls_are_value_errors(notifying, url):
    with pytest.raises(ValueError):
        notifying.submit("render", {}, owner="alice", notify_url=url)


def test_webhooks_need_notifications_enabled(engine):
    with pytest.raises(ValueError, match="enable_notifications"):
        engine.submit("render", {}, owner="alice", notify_url="https://example.invalid/h")


# -- internal types and where deliveries may go ------------------------------------------------------


def test_the_delivery_type_cannot_be_submitted_by_an_ordinary_submit(notifying, receiver):
    url, _got, _ = receiver
    with pytest.raises(UnknownTaskType):
        notifying.submit(TYPE, {"url": url, "event": {"event": "terminal"}}, owner="mallory")
    assert notifying.list_tasks("mallory")[0] == []


def test_a_type_the_app_marks_internal_is_submitted_only_by_engine_code(engine):
    engine.task(name="housekeeping", queue="images", internal=True)(lambda ctx: None)
    with pytest.raises(UnknownTaskType):
        engine.submit("housekeeping", {}, owner="mallory")
    assert engine.submit("housekeeping", {}, owner="engine", internal=True).type == "housekeeping"


def test_a_delivery_task_cannot_be_edited_into_another_destination(notifying):
    task = notifying.submit("render", {}, owner="alice", notify_url="https://example.invalid/hook")
    finish(notifying, task.id)
    notifying.sweep()
    [delivery] = notifying.notifications(task.id)
    with pytest.raises(UnknownTaskType):
        notifying.edit(delivery.id, {"url": "http://127.0.0.1:1/", "event": {"event": "terminal"}}, by="alice")
    assert notifying.get(delivery.id).status == State.PENDING


def deliver_to(engine, url: str):
    """Run one delivery of a made-up event to ``url`` (as the sweeper's hand-off would make it)."""
    task = engine.submit(TYPE, {"url": url, "event": {"event": "terminal", "task": "x"}}, owner="alice", internal=True)
    execute(engine, engine.claim(task.id, "w1"))
    return engine.get(task.id)


@pytest.fixture
def guarded(engine):
    """Notifications with the default destinations: public addresses only."""
    engine.enable_notifications(SECRET, backoff=[0.01])
    return engine


@pytest.fixture
def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_loopback_private_link_local_and_other_schemes_are_refused_alike(guarded, receiver, closed_port):
    url, got, _ = receiver
    refused = [
        deliver_to(guarded, u)
        for u in (
            url,
            f"http://127.0.0.1:{closed_port}/hook",
            "file:///etc/passwd",
            "ftp://127.0.0.1/x",
            "http://10.1.2.3/h",
            "http://169.254.169.254/latest/meta-data",
            "http://[::1]:8080/",
            "http://[::ffff:127.0.0.1]/",
            "http://0.0.0.0/",
            "http://224.0.0.1/",
            "https://localhost/",
            "http://127.0.0.1:99999/",
        )
    ]
    assert got == []  # nothing was sent
    assert {(t.status, t.error_kind, t.reason) for t in refused} == {(State.FAILED, "webhook_refused", REFUSED)}


def test_an_allowlisted_host_is_delivered_to(notifying, receiver):
    url, got, _ = receiver
    assert deliver_to(notifying, url).status == State.SUCCESS and len(got) == 1


def test_a_redirect_is_not_followed(notifying, receiver):
    url, got, answer = receiver
    answer.update(status=302, location="http://169.254.169.254/latest/meta-data")
    task = deliver_to(notifying, url)
    assert (task.status, task.reason) == (State.RETRY_WAITING, "receiver answered 302 (redirects are not followed)")
    assert len(got) == 1


def test_the_connection_goes_to_the_address_that_was_checked(notifying, receiver, monkeypatch):
    """A DNS answer that changes after the check (rebinding) cannot move the connection."""
    url, got, _ = receiver
    real, answers = socket.getaddrinfo, []

    def rebinding(host, port, *args, **kwargs):
        if host != "hook.rebind.test":
            return real(host, port, *args, **kwargs)
        answers.append(host)
        address = "127.0.0.1" if len(answers) == 1 else "10.255.255.1"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    task = deliver_to(notifying, url.replace("127.0.0.1", "hook.rebind.test"))
    assert task.status == State.SUCCESS and len(got) == 1 and answers == ["hook.rebind.test"]
    assert got[0][0]["Host"].startswith("hook.rebind.test:")


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.invalid/x", "javascript:alert(1)"])
def test_an_owners_default_webhook_must_be_http_or_https(notifying, url):
    with pytest.raises(ValueError, match="http"):
        notifying.set_webhook("alice", url)
    assert notifying.submit("render", {}, owner="alice").notify_url == ""
