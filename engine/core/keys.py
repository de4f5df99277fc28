"""The one place that builds Redis key names.

Every key of a queue shares the hash tag ``{queue}`` so each script touches a
single slot (Redis Cluster ready). A task id carries its queue
(``<queue>.<20 hex>``), so any task's keys can be built from its id alone.
Keys of no queue that are new (the web's rate limits) share the global tag ``{@global}``
(``@`` is outside the queue alphabet, so no queue's tag can equal it).

On a Redis Cluster (``Keys(ns, cluster=True)``) every key of no queue is under ``{@global}``:
users and tokens change together in one transaction, which a cluster runs on one slot only.
On one Redis they keep their untagged names, so a deployment's users and schedules survive an
upgrade; a cluster deployment is new, with no older names to keep.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from typing import NamedTuple

_QUEUE_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_ID_RE = re.compile(r"^([A-Za-z0-9_-]{1,64})\.([0-9a-f]{20})$")


def valid_queue(name: str) -> bool:
    return isinstance(name, str) and bool(_QUEUE_RE.fullmatch(name))


def new_task_id(queue: str) -> str:
    return f"{queue}.{secrets.token_hex(10)}"


def parse_task_id(task_id: object) -> str | None:
    """Return the queue of a well-formed task id, or None."""
    if not isinstance(task_id, str):
        return None
    m = _ID_RE.fullmatch(task_id)
    return m.group(1) if m else None


def queue_tag(queue: str) -> str:
    """The hash tag of every key of a queue: its Redis Cluster slot (``{images}``)."""
    return f"{{{queue}}}"


# RQ's names for a queue's jobs (engine/execution/rq_dispatch.py, rq_cluster.py). On a standalone
# Redis they are RQ's own: queue ``gl.images`` (key ``rq:queue:gl.images``), job id = the
# dispatch id. On a Cluster ("tagged") they carry the queue's hash tag, so every RQ key of a
# queue's jobs is in that queue's slot: queue ``gl.{images}``, job id ``images-<dispatch id>``
# (RQ allows no braces in a job id) whose key is ``rq:job:{images}-<dispatch id>``.
# One RQ queue per queue: a job's claim may start the head of the queue's ready line (lua/claim.lua).


def rq_queue_name(namespace: str, queue: str, tagged: bool = False) -> str:
    """The RQ queue of a queue: ``gl.images``; tagged: ``gl.{images}``."""
    return f"{rq_queue_prefix(namespace)}{queue_tag(queue) if tagged else queue}"


def rq_legacy_queue(name: str) -> bool:
    """Whether an RQ queue name is one of a queue's per-priority lists from before one RQ queue
    per queue (``gl.images@+5``): no worker serves them any more (rq_dispatch.py job_exists)."""
    return "@" in name


def rq_queue_prefix(namespace: str) -> str:
    """What every RQ queue name of a namespace's queues starts with: ``gl.``."""
    return f"{namespace}."


def rq_job_id(queue: str, dispatch_id: str) -> str:
    """The RQ job id of a dispatch on a Cluster: ``images-<dispatch id>``."""
    return f"{queue}-{dispatch_id}"


def rq_dispatch_id(job_id: str) -> str:
    """The dispatch id an RQ job id carries (a standalone job's id is its dispatch id)."""
    return job_id.rpartition("-")[2] if rq_job_tagged(job_id) else job_id


def rq_job_tagged(job_id: str) -> str | None:
    """``{images}-<dispatch id>``, the tagged part of a Cluster job's keys; None for an id of
    another form (a standalone job's, RQ's own uuid4 ids)."""
    queue, sep, dispatch_id = job_id.rpartition("-")
    if not sep or not valid_queue(queue) or not re.fullmatch(r"[0-9a-f]{32}", dispatch_id):
        return None
    return f"{queue_tag(queue)}-{dispatch_id}"


def rq_wake_channel(namespace: str) -> str:
    """Pub/sub channel on which the RQ dispatcher on a Cluster announces each enqueue, so that
    workers serving queues on several shards look at their lists at once (rq_cluster.py)."""
    return f"{namespace}:rq:enqueued"


def _owner_digest(owner: str) -> str:
    # Hashed: owner names are user input of any length and alphabet.
    return hashlib.sha256(owner.encode()).hexdigest()[:32]


#: The index of a task body's first history entry: a body is [args JSON, result JSON, history...]
#: (TaskKeys.body; lua/lib/task.lua).
BODY_HISTORY = 2


#: How many tasks an index's head holds before a submit moves them into a page of their own: Redis
#: keeps a zset of at most 128 members (zset-max-listpack-entries) as one listpack, about 42 B a
#: member, and a bigger one as a skiplist, about 129 B. Half of that: a ZADD walks the listpack, and
#: a head of 64 made a lifecycle's server instructions 1.038 x of before pages against 1.056 x at
#: 128, for 3 B more a task (lua/lib/index.lua, docs/performance.md).
INDEX_PAGE = 64


#: The keys of one task (the others in TaskKeys are its queue's): field -> suffix after
#: ``<queue prefix>:task:<id>``. The one table both Keys.task and Lua's keys_of (engine/core/lua_source.py) build from.
TASK_OWN_KEYS = {
    "task": "",
    "body": ":body",
    "args": ":args",
    "result": ":result",
    "history": ":history",
    "checkpoints": ":checkpoints",
    "children": ":children",
    "notifications": ":notifications",
}


def index_pages(index: str) -> str:
    """Zset: the older pages of a task index (``index`` is its head), page name -> bound: each
    page holds the index's tasks created before its bound and at or after the next older page's
    (lua/lib/index.lua)."""
    return f"{index}:pages"


def index_page(index: str, name: str) -> str:
    """Zset: one page of a task index, named after the task whose submit made it."""
    return f"{index}:p:{name}"


class IndexKeys(NamedTuple):
    """A task index as a submit passes it: its head, its pages, and the page the submit moves a
    full head into (named after the new task)."""

    head: str
    pages: str
    page: str

    @classmethod
    def of(cls, index: str, task_id: str) -> IndexKeys:
        return cls(index, index_pages(index), index_page(index, task_id))


class TaskKeys(NamedTuple):
    """The keys every task script receives, in this order (KEYS[1..T], T = len(TaskKeys._fields)).

    The loader hands the field order to Lua, so scripts name keys (``K.task``)
    instead of counting.
    """

    task: str  # hash: the task's fields
    body: str  # list: args JSON, result JSON ('' until SUCCESS), then the capped history (lua/lib/task.lua)
    args: str  # string: args JSON of a task from before the body (read only: lib/task.lua body_args)
    result: str  # string: result JSON of a task from before the body (written only for one)
    history: str  # list: the history of a task from before the body (JSON entries; written only for one)
    checkpoints: str  # hash: checkpoint key -> JSON value, kept across attempts
    events: str  # stream: the queue's capped event stream
    counts: str  # hash: state -> number of tasks in it
    stats: str  # hash: time in state, failure reasons, stale rejections
    dispatch: str  # zset: PENDING/QUEUED tasks, scored by re-dispatch deadline (ms)
    leases: str  # zset: PROCESSING tasks, scored by min(lease, stage, attempt deadline)
    retries: str  # zset: RETRY_WAITING tasks, scored by next_retry_at
    expiry: str  # zset: terminal tasks that ended before the ended line, scored by when the sweeper deletes them
    index: str  # type: ignore[assignment]  # zset: the head of the queue's task index (lib/index.lua; shadows tuple.index)
    index_pages: str  # zset: the older pages of the queue's task index, by the bound they lie below
    index_page: str  # zset: the page this task's submit moves the queue index's full head into
    ready: str  # zset: QUEUED tasks in the order workers take them (priority, then dispatch order)
    watch: str  # zset: unfinished tasks with a due time, scored by when to record overdue/escalated
    children: str  # set: ids of the tasks waiting on this one (submit's depends_on)
    waiting: str  # zset: PENDING tasks waiting on parents, scored by when to look at their parents
    outbox: str  # list: webhook notifications to hand to the notifier (JSON entries)
    notifications: str  # list: ids of the notification tasks made for this task
    owners: str  # hash: per owner, unfinished tasks ('n:<owner>') and their args bytes ('b:<owner>')
    start_by: str  # zset: tasks never started that expire (submit's expires_in), scored by when (ms)
    pending_since: str  # zset: PENDING tasks ready to run, scored by when they began to wait (ms)
    queued_since: str  # zset: QUEUED tasks, scored by when they began to wait (ms; lib/record: wait_lines)
    ended: str  # list: '<id> <ended ms>[ <kept until ms>]' per ending, oldest first: what the sweeper purges


class Keys:
    """Key names for one namespace."""

    def __init__(self, namespace: str = "gl", cluster: bool = False):
        if not valid_queue(namespace):
            raise ValueError(f"namespace must match {_QUEUE_RE.pattern}, got {namespace!r}")
        self.ns = namespace
        self.cluster = cluster

    def _untagged(self, name: str) -> str:
        """A key of no queue from before the global tag: untagged on one Redis, under
        ``{@global}`` on a cluster."""
        return self.global_key(name) if self.cluster else f"{self.ns}:{name}"

    def queue_prefix(self, queue: str) -> str:
        return f"{self.ns}:{{{queue}}}"

    def queue_key(self, queue: str, name: str) -> str:
        return f"{self.queue_prefix(queue)}:{name}"

    def task(self, task_id: str) -> TaskKeys:
        queue = parse_task_id(task_id)
        if queue is None:
            raise ValueError(f"malformed task id {task_id!r}")
        q = self.queue_prefix(queue)
        t = f"{q}:task:{task_id}"
        own = {field: t + suffix for field, suffix in TASK_OWN_KEYS.items()}
        return TaskKeys(
            **own,
            events=f"{q}:events",
            counts=f"{q}:counts",
            stats=f"{q}:stats",
            dispatch=f"{q}:dispatch",
            leases=f"{q}:leases",
            retries=f"{q}:retries",
            expiry=f"{q}:expiry",
            index=f"{q}:index",
            index_pages=index_pages(f"{q}:index"),
            index_page=index_page(f"{q}:index", task_id),
            ready=f"{q}:ready",
            watch=f"{q}:watch",
            waiting=f"{q}:waiting",
            outbox=f"{q}:outbox",
            owners=f"{q}:owners",
            start_by=f"{q}:start_by",
            pending_since=f"{q}:pending_since",
            queued_since=f"{q}:queued_since",
            ended=f"{q}:ended",
        )

    def idempotency(self, queue: str, owner: str, key: str) -> str:
        # Hashed: owner and key are user input of any length and alphabet.
        digest = hashlib.sha256(f"{owner}\0{key}".encode()).hexdigest()[:32]
        return self.queue_key(queue, f"idem:{digest}")

    def owner_index(self, queue: str, owner: str) -> str:
        """Zset: the head of one owner's task index in a queue, scored by creation time (ms);
        its older pages are ``index_pages`` of it (lua/lib/index.lua)."""
        return self.queue_key(queue, f"owner:{_owner_digest(owner)}")

    def owner_index_keys(self, queue: str, owner: str, task_id: str) -> IndexKeys:
        """An owner's task index as the submit of task ``task_id`` passes it."""
        return IndexKeys.of(self.owner_index(queue, owner), task_id)

    def queue_index(self, queue: str) -> str:
        """Zset: the head of a queue's task index (every task of the queue), by creation time (ms)."""
        return self.queue_key(queue, "index")

    def submit_rate(self, queue: str, owner: str) -> str:
        """String: one owner's submit-rate state in a queue (the time its quota's bucket is empty
        until, ms), expiring with it."""
        return self.queue_key(queue, f"rate:{_owner_digest(owner)}")

    def breaker(self, queue: str, upstream: str) -> str:
        """Hash: one upstream's circuit breaker state and outcome counts, in one queue."""
        return self.queue_key(queue, f"breaker:{upstream}")

    def rate_log(self, queue: str, upstream: str) -> str:
        """Zset: one upstream's attempt starts in its rate limit's current window, by start time
        (ms), in the queue its types share (lua/lib/limit.lua)."""
        return self.queue_key(queue, f"limit:log:{upstream}")

    def rate_parked(self, queue: str, upstream: str) -> str:
        """Zset: tasks parked by one upstream's rate limit, by when their park ends (ms)."""
        return self.queue_key(queue, f"limit:parked:{upstream}")

    def webhooks(self) -> str:
        """Hash: owner -> default webhook URL for their tasks' notifications."""
        return self._untagged("webhooks")

    def login_code(self, digest: str) -> str:
        """String: a one-time login code's user (by the code's SHA-256), with a short TTL."""
        return self._untagged(f"login:{digest}")

    def users(self) -> str:
        """Hash: user name -> JSON record (admin flag, creation time, token digests)."""
        return self._untagged("users")

    def session(self, digest: str) -> str:
        """String: a web login session's token digest (by the session id's SHA-256), with the
        session's lifetime as TTL; deleted at logout, so a copied cookie stops working."""
        return self._untagged(f"session:{digest}")

    def global_key(self, name: str) -> str:
        """A key of no queue, under the global hash tag (one Cluster slot for all of them)."""
        return f"{self.ns}:{{@global}}:{name}"

    def rate_limit(self, kind: str, address: str) -> str:
        """String: failed attempts of one kind (``login``, ``bearer``) from one client address in
        the current window, with the window's remainder as TTL (web/limits.py)."""
        digest = hashlib.sha256(address.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return self.global_key(f"ratelimit:{kind}:{digest}")

    def tokens(self) -> str:
        """Hash: sha256 of an API token -> user name (tokens themselves are never stored)."""
        return self._untagged("tokens")

    def queues(self) -> str:
        """Set of every queue name that has seen a task (outside any hash tag on one Redis)."""
        return self._untagged("queues")

    def data_epoch(self) -> str:
        """String: the data epoch marker (a random id and the server time of the first use), under
        the global hash tag ``{@global}``; its loss tells processes that Redis lost its data
        (engine/core/epoch.py)."""
        return self.global_key("epoch")

    def periodic_state(self, name: str) -> str:
        """Hash: a periodic schedule's last fired period (ms), its task and when it was recorded
        (engine/periodic/schedules.py). Outside any hash tag on one Redis: its name is kept from
        before the global tag, so a deployment's schedules keep their state across an upgrade."""
        return self._untagged(f"periodic:{name}")

    def scheduler_lock(self) -> str:
        """String: the lock of the scheduler tick (engine/periodic/scheduler.py), per namespace, held by
        the scheduler working now; a short TTL. Outside any hash tag, like ``periodic_state``."""
        return self._untagged("scheduler_lock")

    def sweepers(self) -> str:
        """Zset: the sweeper registry, sweeper name -> server time (ms) of its last recorded tick,
        under the global hash tag; silent sweepers drop out (engine/core/sweepers.py)."""
        return self.global_key("sweepers")

    def deadline_channels(self) -> list[str]:
        """PSUBSCRIBE patterns of the channels named after each queue's deadline sets, on which a
        script announces a deadline sooner than the sweeper's next look (lua/lib/record.lua)."""
        return [self.queue_key("*", name) for name in ("dispatch", "leases", "retries", "waiting", "start_by")]
