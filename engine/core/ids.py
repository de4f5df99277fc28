"""Random names that tasks store: a claim's id and a worker's default name.

Each is stored in every task its holder touches (the task hash keeps both; the history's claim entry
and the queue stream name the worker), for as long as the task is retained, so each is as short as
its purpose allows: 16 hex digits, 64 random bits. A claim id only tells apart two claims of one
task that issued the same fencing token (DESIGN: a claim lost in a failover); a worker name tells
apart the workers of one fleet alive at once (RQ refuses to start a worker whose name is taken).
RQ's own default name, ``uuid4().hex``, is 32 digits: 16 bytes more in each place (docs/performance.md).
"""

from __future__ import annotations

import secrets

RANDOM_BYTES = 8  # 64 bits: two names of a fleet of 10,000 workers are alike once in ~10^11 fleets


def new_claim_id() -> str:
    """A claim's id: unique per claim call (a resent claim reuses it)."""
    return secrets.token_hex(RANDOM_BYTES)


def new_worker_name() -> str:
    """The name a ghostless worker gets when none is given (``ghostless worker --name``)."""
    return secrets.token_hex(RANDOM_BYTES)
