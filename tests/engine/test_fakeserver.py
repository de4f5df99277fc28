"""The embedded demo Redis (engine/demo/fakeserver.py) runs the engine's scripts and RQ 3.0 workers."""

import redis
from rq.serializers import JSONSerializer

from ghostless import Engine
from ghostless.demo.fakeserver import serve
from ghostless.execution.worker import GhostlessSimpleWorker, GhostlessWorker
from tests.conftest import register_test_types
from tests.support.redis_server import free_port


def test_fakeserver_runs_scripts_and_rq_workers_start_on_it():
    port = free_port()
    server = serve(port)
    client = redis.Redis(port=port, socket_timeout=5)
    try:
        engine = register_test_types(Engine(client, namespace="fs", dispatcher=None))
        task = engine.submit("render", {"prompt": "p"}, owner="alice")
        engine.complete(engine.claim(task.id, "w1"), {"url": "x"})
        assert engine.get(task.id).status.value == "SUCCESS" and engine.check() == []
        # RQ's worker reads its address from CLIENT INFO, whose fakeredis reply redis-py cannot
        # parse ("addr=('127.0.0.1', 5)"): the engine's worker classes fall back to CLIENT LIST.
        for cls in (GhostlessWorker, GhostlessSimpleWorker):
            worker = cls(["fs.images"], connection=client, serializer=JSONSerializer)
            assert worker.ip_address.startswith("('127.0.0.1'")
    finally:
        client.close()
        server.shutdown()
        server.server_close()


def test_on_real_redis_the_worker_address_still_comes_from_client_info(redis_server):
    client = redis_server.client()
    worker = GhostlessWorker(["fs.images"], connection=client, serializer=JSONSerializer)
    assert worker.ip_address.startswith("127.0.0.1:")
    client.close()
