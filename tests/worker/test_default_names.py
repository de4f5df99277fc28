"""What a task stores of the worker that ran it with the names ghostless gives by default
(engine/core/ids.py): a worker's name and its claim's id of 16 hex digits each, where RQ's own
default, ``uuid4().hex``, has 32."""

import re

from ghostless import State
from ghostless.core.text import text
from ghostless.execution.worker import build_worker
from tests.worker.helpers import OWNER

HEX16 = re.compile(r"[0-9a-f]{16}")


def stored(engine, task_id) -> dict:
    return {text(k): text(v) for k, v in engine.redis.hgetall(engine.keys.task(task_id).task).items()}


def test_a_worker_named_by_default_stores_short_names(engine):
    task = engine.submit("render", {"prompt": "cat", "steps": 1}, owner=OWNER)
    worker = build_worker(engine, worker_class="simple")
    assert HEX16.fullmatch(worker.name)
    worker.work(burst=True, logging_level="CRITICAL")

    done, hash_ = engine.get(task.id), stored(engine, task.id)
    assert (done.status, done.worker, hash_["worker"]) == (State.SUCCESS, worker.name, worker.name)
    assert HEX16.fullmatch(hash_["claim_id"])
    assert engine.check() == []


def test_a_name_given_is_kept(engine):
    assert build_worker(engine, worker_class="simple", name="render-1").name == "render-1"
