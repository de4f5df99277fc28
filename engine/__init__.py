"""ghostless: a Redis-native task queue and lease engine."""

from ghostless.core.aio import AsyncEngine
from ghostless.core.config import Config
from ghostless.core.engine import Engine
from ghostless.core.errors import (
    BadArgs,
    BadRate,
    BadRedisURL,
    BreakerOpen,
    Code,
    GhostlessError,
    IdempotencyConflict,
    IllegalTransition,
    LeaseLost,
    PermanentError,
    QuotaExceeded,
    RateLimited,
    RedisFull,
    RedisSetupError,
    ReplicationTimeout,
    TaskCancelled,
    TaskExpired,
    TaskFailed,
    TaskNotFound,
    UnknownParent,
    UnknownTaskType,
    UpstreamBusy,
    WaitTimeout,
    WrongDispatch,
)
from ghostless.core.models import Event, Lease, Task
from ghostless.core.quota import Quota
from ghostless.core.rates import Rate
from ghostless.core.registry import Backoff, Breaker, TaskType
from ghostless.core.states import TERMINAL, TRANSITIONS, State

# isort: split
# The layers above the core supply what it names but does not import: the "rq" dispatcher that
# Engine(redis) defaults to, and engine.periodic(...). Importing any ghostless module runs this first.
import ghostless.execution.rq_dispatch
import ghostless.periodic.schedules  # noqa: F401

__all__ = [
    "TERMINAL",
    "TRANSITIONS",
    "AsyncEngine",
    "Backoff",
    "BadArgs",
    "BadRate",
    "BadRedisURL",
    "Breaker",
    "BreakerOpen",
    "Code",
    "Config",
    "Engine",
    "Event",
    "GhostlessError",
    "IdempotencyConflict",
    "IllegalTransition",
    "Lease",
    "LeaseLost",
    "PermanentError",
    "Quota",
    "QuotaExceeded",
    "Rate",
    "RateLimited",
    "RedisFull",
    "RedisSetupError",
    "ReplicationTimeout",
    "State",
    "Task",
    "TaskCancelled",
    "TaskExpired",
    "TaskFailed",
    "TaskNotFound",
    "TaskType",
    "UnknownParent",
    "UnknownTaskType",
    "UpstreamBusy",
    "WaitTimeout",
    "WrongDispatch",
]
