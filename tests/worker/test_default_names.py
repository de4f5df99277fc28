"""What a task stores of the worker that ran it with the names ghostless gives by default
(engine/core/ids.py): a worker's name and its claim's id of 16 hex digits each, where RQ's own
default, ``uuid4().hex``, has 32; and none of its dispatch's fields once a worker has claimed it."""

import re

from rq.serializers import JSONSerializer

from ghostless import Engine, State
from ghostless.execution.worker import build_worker

HEX16 = re.compile(r"[0-9a-f]{16}")


def test_a_worker_named_by_default_stores_short_names_and_no_dispatch_fields(redis_server):
    client = redis_server.client()
    client.flushall()
    engine = Engine(client, namespace="nm")

    @engine.task(queue="names", lease=30)
    def fine(ctx):
        return {"ok": True}

    task = engine.submit("fine", {}, owner="alice")
    queued = client.hgetall(engine.keys.task(task.id).task)
    assert {b"dispatch_id", b"dispatched_at", b"queued_at"} <= set(queued)  # while QUEUED
    assert engine.get(task.id).queued_at is not None

    worker = build_worker(engine, worker_class="simple")
    assert worker.serializer is JSONSerializer and HEX16.fullmatch(worker.name)
    worker.work(burst=True, logging_level="CRITICAL")

    done = engine.get(task.id)
    stored = {k.decode(): v.decode() for k, v in client.hgetall(engine.keys.task(task.id).task).items()}
    assert (done.status, done.worker, stored["worker"]) == (State.SUCCESS, worker.name, worker.name)
    assert HEX16.fullmatch(stored["claim_id"])
    assert not {"dispatch_id", "dispatched_at", "queued_at"} & set(stored)
    assert done.queued_at is None
    assert engine.check() == []


def test_a_name_given_is_kept(redis_server):
    engine = Engine(redis_server.client(), namespace="nm")

    @engine.task(queue="names", lease=30)
    def fine(ctx):
        return {"ok": True}

    assert build_worker(engine, worker_class="simple", name="render-1").name == "render-1"
