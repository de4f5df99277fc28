"""ghostless: a Redis-native task queue and lease engine."""
from .config import Config
from .engine import Engine
from .errors import (
    BadArgs, BreakerOpen, Code, GhostlessError, IdempotencyConflict, IllegalTransition, LeaseLost, PermanentError,
    QuotaExceeded, RedisFull, RedisSetupError, TaskCancelled, TaskNotFound, UnknownParent, UnknownTaskType, WrongDispatch,
)
from .quota import Quota
from .models import Event, Lease, Task
from .registry import Backoff, Breaker, TaskType
from .states import State, TERMINAL, TRANSITIONS

__all__ = [
    "BadArgs", "Backoff", "Breaker", "BreakerOpen", "Code", "Config", "Engine", "Event", "GhostlessError", "IdempotencyConflict", "IllegalTransition",
    "Lease", "LeaseLost", "PermanentError", "Quota", "QuotaExceeded", "RedisFull", "RedisSetupError", "State", "TERMINAL", "TRANSITIONS", "Task",
    "TaskCancelled", "TaskNotFound", "TaskType", "UnknownParent", "UnknownTaskType", "WrongDispatch",
]
