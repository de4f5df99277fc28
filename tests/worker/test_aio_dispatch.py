"""A task submitted through the AsyncEngine reaches an RQ worker: its submit dispatched it (the RQ
enqueue in a worker thread), and its result is awaited on the queue's stream."""

import pytest

from ghostless import Engine, State
from ghostless.execution.worker import build_worker
from tests.support.aio import run_async


@pytest.mark.slow
def test_an_async_submit_is_queued_for_rq_and_run_by_a_worker(redis_server):
    client = redis_server.client()
    client.flushall()
    engine = Engine(client, namespace="aio")  # the RQ dispatcher

    @engine.task(queue="images", lease=30)
    def render(ctx, prompt):
        return {"url": f"s3://{prompt}.png"}

    async def submit(aengine):
        return await aengine.submit("render", {"prompt": "cat"}, owner="alice")

    task = run_async(engine, submit)
    assert task.status == State.QUEUED and engine.get(task.id).status == State.QUEUED
    assert build_worker(engine, worker_class="simple").work(burst=True, logging_level="WARNING")

    async def result(aengine):
        return await aengine.result(task.id, timeout=10, owner="alice")

    assert run_async(engine, result) == {"url": "s3://cat.png"}
