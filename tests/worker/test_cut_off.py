"""A worker cut off from Redis (a partition between the two: tests/support/proxy.py) stops its
attempt within lease + grace of its last renewal, before or as the sweeper may hand the task to
another worker, not after its client's timeouts and resends (~10 s, whatever the lease)."""

import time

import pytest

from tests.support.procs import running
from tests.support.wait import wait_until
from tests.worker.helpers import LEASE, OWNER, horse_of, wait_logged

pytestmark = pytest.mark.slow

GRACE = LEASE  # the runner's grace is the task type's lease
MARGIN = 0.8  # the heartbeat thread's poll, the function's next line, a busy machine


@pytest.mark.parametrize("worker_class", ["fork", "simple"])
def test_a_cut_off_worker_stops_its_attempt_within_lease_and_grace_of_its_last_renewal(
    engine, procs, proxy, tmp_path, worker_class
):
    worker = procs.worker(worker_class, GHOSTLESS_REDIS_URL=proxy.url)
    sign = tmp_path / "alive"
    task = engine.submit("alive", {"path": str(sign)}, owner=OWNER)  # ignores ctx.cancelled
    wait_logged(engine, task.id, "start")
    horse = horse_of(worker) if worker_class == "fork" else None
    key = engine.keys.task(task.id).task
    claimed = int(engine.redis.hget(key, "lease_until"))
    wait_until(
        lambda: int(engine.redis.hget(key, "lease_until")) > claimed, LEASE * 2, what="a heartbeat through the proxy"
    )

    proxy.cut()
    cut_at = time.time()
    if horse:
        wait_until(lambda: not running(horse), LEASE + GRACE + 20, what="the cut-off work-horse to end")
    else:
        wait_until(
            lambda: "stopped by force" in worker.output(), LEASE + GRACE + 20, what="the cut-off attempt stopped"
        )

    last_renewal = int(engine.redis.hget(key, "lease_until")) / 1000 - LEASE  # Redis TIME: this host's clock
    last_sign = float(sign.read_text())
    assert last_sign > cut_at  # it ran on after the cut until it was stopped
    late = last_sign - (last_renewal + LEASE + GRACE)
    assert late <= MARGIN, f"the attempt ran {late:.2f}s past lease + grace after its last renewal"
