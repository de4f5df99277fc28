"""ghostless: a Redis-native task queue and lease engine."""
from .config import Config
from .engine import Engine
from .errors import (
    Code, GhostlessError, IdempotencyConflict, IllegalTransition, LeaseLost, PermanentError, RedisSetupError,
    TaskCancelled, TaskNotFound, UnknownTaskType, WrongDispatch,
)
from .models import Event, Lease, Task
from .registry import Backoff, TaskType
from .states import State, TERMINAL, TRANSITIONS

__all__ = [
    "Backoff", "Code", "Config", "Engine", "Event", "GhostlessError", "IdempotencyConflict", "IllegalTransition",
    "Lease", "LeaseLost", "PermanentError", "RedisSetupError", "State", "TERMINAL", "TRANSITIONS", "Task",
    "TaskCancelled", "TaskNotFound", "TaskType", "UnknownTaskType", "WrongDispatch",
]
