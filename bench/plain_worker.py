"""A plain RQ 3.0 worker for the baselines: ``python bench/plain_worker.py URL QUEUE [--class fork|simple]``.

RQ defaults throughout (job monitoring interval, maintenance interval, no retries unless the job
asks), except the JSON serializer, which ghostless also uses.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
from rq import SimpleWorker, Worker
from rq.serializers import JSONSerializer

import bench.plain_jobs  # noqa: F401  (imported once in the parent, as ghostless imports its app)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("queues", nargs="+")
    p.add_argument("--class", dest="cls", choices=["fork", "simple"], default="fork")
    p.add_argument("--log-level", default="INFO")
    p.add_argument(
        "--resolve-driver-info",
        action="store_true",
        help="resolve redis-py's DriverInfo once for the pool (what ghostless's worker does), not per connection",
    )
    a = p.parse_args()
    conn = redis.Redis.from_url(a.url)
    if a.resolve_driver_info:
        from redis.driver_info import resolve_driver_info

        conn.connection_pool.connection_kwargs["driver_info"] = resolve_driver_info()
    cls = Worker if a.cls == "fork" else SimpleWorker
    cls(a.queues, connection=conn, serializer=JSONSerializer).work(logging_level=a.log_level, with_scheduler=False)


if __name__ == "__main__":
    main()
