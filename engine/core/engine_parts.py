"""What the Engine's mixins (engine/core/claim_calls.py, lease_calls.py, management.py) use of it:
the attributes its ``__init__`` sets and the helpers it defines, declared once for the type checker."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import Config
    from .dispatch import Dispatcher
    from .keys import Keys, TaskKeys
    from .registry import Registry
    from .scripts import Scripts


class EngineParts:
    redis: Any
    keys: Keys
    config: Config
    registry: Registry
    scripts: Scripts
    dispatcher: Dispatcher

    if TYPE_CHECKING:

        def _keys(self, task_id: str) -> TaskKeys: ...
        def dispatch(self, task_id: str) -> str | None: ...
        def _dispatch_in(
            self, task_id: str, queue: str, seen_score: float | None = None, passed: str = ""
        ) -> str | None: ...
