"""The one place that runs Lua: one typed wrapper per script, and the runners of described ones.

The scripts' text comes from engine/core/lua_source.py. engine/core/functions.py sends each as a
Redis Function (FCALL; EVALSHA on a cluster or a Redis without functions) and loads it where the
server lacks it (after ``FUNCTION FLUSH``, ``SCRIPT FLUSH`` or a restart that lost it). The client
calls' scripts (submit, cancel, edit, retry, read) are described once, without IO, in
engine/core/plans.py: ``Scripts.run`` runs a Plan on redis-py, ``AsyncScripts.run`` on
redis.asyncio (the AsyncEngine), with the same parsing, WAIT and refusals.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

from . import plans
from .cluster import ScriptBatch, is_cluster, run_then_wait
from .config import Config
from .errors import (
    Code,
    IllegalTransition,
    RedisSetupError,
    TaskExpired,
    UnknownTaskType,
    WrongDispatch,
    refusing_full,
)
from .functions import LUA, AsyncLuaCall, LuaCall, ensure_loaded, prune_libraries
from .index import Route
from .keys import TaskKeys
from .lua_source import SCRIPTS, call_keys, task_keys_of
from .models import Lease
from .plans import Plan, SubmitArgs
from .replication import Waiter
from .replies import RESOLVE_MARK, parse, refuse
from .text import text

__all__ = ["AsyncScripts", "Scripts", "SubmitArgs"]


class _Runner:
    """What both runners share: the registered scripts, the engine config every script takes
    first, the replicas' WAIT, and the reading of a reply."""

    _lua_call: type[LuaCall] = LuaCall

    def __init__(self, redis, config: Config, on_resolve=None):
        self.redis = redis
        #: called with a queue's waiting-set key when a script ended a task others wait on
        self.on_resolve = on_resolve
        self._cfg = config.script_argv()
        self._waiter = Waiter(redis, config)
        self._scripts = {name: self._lua_call(redis, name) for name in SCRIPTS}

    def _parse(self, name: str, keys: Sequence[str], raw) -> tuple[list, str | None]:
        """The parsed reply, and the waiting-set key to resolve (``on_resolve``, before the WAIT's
        verdict) when the script ended a task others wait on (None else)."""
        reply = parse(raw)
        resolve = None
        if reply and reply[-1] == RESOLVE_MARK:
            reply.pop()
            resolve = keys[task_keys_of(name).index("waiting")] if self.on_resolve else None
        return reply, resolve


class Scripts(_Runner):
    """Typed wrappers, one per script (named for it; the client calls' scripts are described in
    engine/core/plans.py and run by ``run``). Refusals become the exceptions of
    ``ghostless.core.errors``; the sweeper's calls (expire, promote, purge, overdue, resolve, due)
    return replies and never raise on a refusal. Calls given ``client`` (a pipeline) only queue the
    script: ``replies(pipe)`` then runs them and gives their parsed replies."""

    def _call(
        self, name: str, keys: TaskKeys | Sequence[str], args: Sequence[Any], client=None, via=None, extra=()
    ) -> list:
        """Run script ``name`` on ``keys`` (a task's: those the script touches, then ``extra``); with
        ``client`` (a pipeline) the reply comes from ``execute()``. ``via``: another client of the
        same server to send it on (the heartbeat's own).

        Raises RedisFull when Redis refuses the script's writes (maxmemory under noeviction),
        ReplicationTimeout (``Config.wait_replicas``) when too few replicas acknowledged them.
        """
        script, argv, keys = self._scripts[name], [*self._cfg, *args], call_keys(name, keys, extra)
        if client is not None:
            return script(keys=keys, args=argv, client=client)
        with refusing_full(name):
            if self._waiter.waits(name):
                raw, acked = _then_wait(script, keys, argv, via or self.redis, self._waiter.command)
            else:
                raw, acked = script(keys=keys, args=argv, client=via), None
        reply, resolve = self._parse(name, keys, raw)
        if resolve:
            self.on_resolve(resolve)
        self._waiter.check(acked, name, keys, reply)
        return reply

    def run(self, plan: Plan, via=None) -> Any:
        """A described call (engine/core/plans.py): its checked answer; raises its refusal."""
        return plan.check(self._call(plan.name, plan.keys, plan.args, via=via))

    def ensure_loaded(self) -> list[str]:
        """Load the functions (or scripts) Redis lacks, on every primary of a cluster (after a
        restart that lost them, FUNCTION FLUSH or SCRIPT FLUSH; a call would load its own on first
        use anyway). Returns the names it loaded. Raises redis errors."""
        return ensure_loaded(self.redis, list(self._scripts.values()))

    def prune_libraries(self) -> list[str]:
        """Delete other ghostless releases' function libraries (engine/core/functions.py
        ``prune_libraries``): the names deleted. Raises redis errors."""
        return prune_libraries(self.redis, list(self._scripts.values()))

    def pipeline(self) -> ScriptBatch:
        """A pipeline for ``client=`` calls (on a cluster a round trip per shard)."""
        return ScriptBatch(self.redis, LUA)

    def replies(self, pipe) -> list[list]:
        """Run a pipeline of ``client=pipe`` calls: their parsed replies, in order (then one WAIT)."""
        raw, acked = self._waiter.execute(pipe)
        out = [parse(r) for r in raw]
        self._waiter.check(acked, f"pipeline of {len(out)} scripts", (), out)
        return out

    # -- client calls (submit: engine/core/plans.py, run by ``run``) ----------------------------------
    def dispatch(
        self,
        keys: TaskKeys,
        control: str,
        task_id: str,
        dispatch_id: str,
        requeue_ms: int,
        seen_score: float | None = None,
        rearm: bool = False,
        passed: str = "",
    ) -> list:
        """NOT_DUE while the queue drains, or (``seen_score``: the task's dispatch-set score as a
        sweeper read it) when it is no longer due at that score: the caller then makes no job.
        With ``rearm``: only move the job check of the current dispatch ``dispatch_id`` (else NOT_DUE);
        with ``passed``, the dispatch a claim spent passing the task over (lua/dispatch.lua)."""
        seen = "" if seen_score is None else repr(float(seen_score))
        mode = "rearm" if rearm else "passed" if passed else ""
        return refuse(
            self._call("dispatch", keys, [dispatch_id, requeue_ms, seen, mode, passed], extra=[control]),
            "dispatch",
            task_id,
        )

    def claim(
        self,
        keys: TaskKeys,
        task_id: str,
        worker: str,
        claim_id: str,
        dispatch_id: str,
        types: str,
        breaker_key: str | None = None,
        breaker_spec: str = "",
        limit_keys: Sequence[str] = (),
        limit_spec: str = "",
        settings_for: str = "",
        free: str = "",
        head: str = "",
        head_keys: Sequence[str] = (),
        last_try: bool = False,
        room_ms: int | None = None,
    ) -> list:
        """``limit_keys``: the rate limit's start log and parked set, with ``limit_spec``; both and the
        breaker's are the settings of type ``settings_for``; ``free``: the types of ``types`` that need
        none; ``head``: the head of the ready line, with its own keys (keys.py TASK_OWN_KEYS), which a
        MOVED reply named (lua/claim.lua); ``room_ms``: the job's longest attempt. Raises TaskExpired
        when the claim found the task expired (and cancelled it)."""
        argv = [worker, claim_id, dispatch_id, types, breaker_spec, limit_spec]
        argv += [settings_for, free, head, "1" if last_try else "", "" if room_ms is None else str(room_ms)]
        extra = [*([breaker_key] if breaker_key else []), *limit_keys, *head_keys]
        reply = self._call("claim", keys, argv, extra=extra)
        if reply[0] == Code.WRONG_DISPATCH:
            raise WrongDispatch(task_id, dispatch_id)
        if reply[0] == Code.UNKNOWN_TYPE:
            raise UnknownTaskType(reply[1])
        if reply[0] == Code.EXPIRED:
            raise TaskExpired(text(reply[1]))
        if reply[0] in (Code.BREAKER_OPEN, Code.RATE_LIMITED, Code.MOVED):
            return reply  # the engine knows the upstream's name and raises BreakerOpen / RateLimited
        if reply[0] == Code.NOT_DUE:  # waiting on its parents, or delayed
            raise IllegalTransition(task_id, f"PENDING ({reply[1]})", "claim")
        return refuse(reply, "claim", task_id)

    # -- the lease holder's calls: token and claim id first; LeaseLost and its kin -------------------
    def _hold(self, verb: str, keys: TaskKeys, lease: Lease, *argv: Any, extra: str | None = None, via=None) -> list:
        reply = self._call(verb, keys, [lease.token, lease.claim_id, *argv], via=via, extra=[extra] if extra else ())
        return refuse(reply, verb, lease.task_id, lease.token)

    def heartbeat(self, keys: TaskKeys, lease: Lease, lease_ms: int, via=None) -> list:
        return self._hold("heartbeat", keys, lease, lease_ms, lease.worker, via=via)

    def stage(self, keys: TaskKeys, lease: Lease, name: str, timeout_ms: int) -> list:
        return self._hold("stage", keys, lease, name, timeout_ms, lease.worker)

    def progress(self, keys: TaskKeys, lease: Lease, fraction: float, message: str) -> list:
        return self._hold("progress", keys, lease, repr(float(fraction)), message, lease.worker)

    def checkpoint(self, keys: TaskKeys, lease: Lease, name: str, value_json: str) -> list:
        return self._hold("checkpoint", keys, lease, name, value_json, lease.worker)

    def complete(
        self, keys: TaskKeys, lease: Lease, result_json: str, breaker_key: str | None = None, breaker_spec: str = ""
    ) -> list:
        return self._hold("complete", keys, lease, result_json, lease.worker, breaker_spec, extra=breaker_key)

    def fail(
        self,
        keys: TaskKeys,
        lease: Lease,
        error_kind: str,
        reason: str,
        retryable: bool,
        jitter: float,
        retry_delay_ms: int | None = None,
        breaker_key: str | None = None,
        breaker_spec: str = "",
    ) -> list:
        """``retry_delay_ms`` overrides the backoff policy (None: the policy's, ``jitter`` in [0, 1))."""
        delay = "" if retry_delay_ms is None else retry_delay_ms
        return self._hold(
            "fail",
            keys,
            lease,
            error_kind,
            reason,
            plans.flag(retryable),
            jitter,
            lease.worker,
            delay,
            breaker_spec,
            extra=breaker_key,
        )

    def release(self, keys: TaskKeys, lease: Lease, reason: str) -> list:
        return self._hold("release", keys, lease, reason, lease.worker)

    def park(
        self,
        keys: TaskKeys,
        task_id: str,
        wait_ms: int,
        fail_fast: bool,
        upstream: str,
        park_id: str,
        kind: str = "upstream_open",
        limit_keys: Sequence[str] = (),
        limit_spec: str = "",
    ) -> list:
        """``kind`` rate_limited goes with the limit's start log and parked set, and its spec."""
        argv = [wait_ms, plans.flag(fail_fast), upstream, park_id, kind, limit_spec]
        return refuse(self._call("park", keys, argv, extra=limit_keys), "park", task_id)

    # -- sweeper calls: never raise on a refusal, the sweeper counts outcomes -----------------------
    def expire(self, keys: TaskKeys, task_id: str, by: str = "", client=None) -> list | None:
        """``by``: the admin reclaiming it now ('' = the sweeper: only when due, NOT_DUE else).
        Raises its refusals unless on a pipeline (``client``)."""
        argv = [random.random(), by]  # the backoff's jitter
        if client is not None:
            return self._call("expire", keys, argv, client=client)
        return refuse(self._call("expire", keys, argv), "expire", task_id)

    def promote(self, keys: TaskKeys, client=None) -> list | None:
        """RETRY_WAITING -> PENDING once its retry time has come (NOT_DUE before)."""
        return self._call("promote", keys, [], client=client)

    def lapse(self, keys: TaskKeys, task_id: str, client=None) -> list | None:
        """CANCELLED (reason expired) once a task never started is past its expiry (NOT_DUE else)."""
        return self._call("lapse", keys, [task_id], client=client)

    def purge(
        self,
        keys: TaskKeys,
        task_id: str,
        queue_page: Route,
        owner_page: Route | None,
        entry: str | None = None,
        client=None,
    ) -> list | None:
        """Delete a terminal task past retention: ``entry`` is its entry of the ended line (None: a task
        of the expiry set, from before the line). ``queue_page`` and ``owner_page``: where its entries
        of its queue's index and its owner's are (engine/core/index.py route; None: no owner)."""
        argv = [task_id, entry or "", queue_page.name, owner_page.name if owner_page else ""]
        extra = [queue_page.key, *((owner_page.pages, owner_page.key) if owner_page else ())]
        return self._call("purge", keys, argv, client=client, extra=extra)

    def overdue(self, keys: TaskKeys, task_id: str, client=None) -> list | None:
        """Record ``overdue`` (or ``escalated``) once when due: {OK, event name}."""
        return self._call("overdue", keys, [task_id], client=client)

    def resolve(self, keys: TaskKeys, task_id: str, parent_ids: Sequence[str], parents: Sequence[TaskKeys]) -> list:
        """Look at a waiting task's parents (their keys ``parents`` in the order of ``parent_ids``)."""
        return self._call("resolve", keys, [task_id, len(parent_ids), *parent_ids], extra=plans.pairs(parents))

    def due(self, sets: Sequence[str], batch: int, ended: str | None = None) -> tuple[list[list[str]], int]:
        """Ids due now in each of ``sets`` (a batch each), then, given the queue's ``ended`` line, its
        entries due for purging (a batch, oldest first); and ms until the earliest deadline (-1: none)."""
        reply = self._call("due", [*sets, ended] if ended else sets, [batch, "1"] if ended else [batch])
        return reply[2:-1], int(reply[-1])

    # -- reads ----------------------------------------------------------------------------------------
    def user(self, tokens_key: str, users_key: str, digest: str) -> tuple[Any, Any] | None:
        """(user name, JSON record) of the user a token digest names, as the client replies them (bytes,
        or str when it decodes), or None; one round trip."""
        reply = self._read("user", [tokens_key, users_key], [digest])
        return (reply[1], reply[2]) if len(reply) == 3 else None

    def read(self, task_keys: dict[str, TaskKeys], owner: str | None, full: bool = False) -> dict[str, list]:
        """Tasks by id (engine/core/plans.py ``reads``): one atomic script per queue, all in one
        round trip without MULTI/EXEC, so it reads a Redis at maxmemory too."""
        calls = plans.reads(task_keys, owner, full)
        if len(calls) == 1:  # alone: the coalescing subclass sends it with other callers' reads
            plan = calls[0][1]
            return plans.read_replies(calls, [self._read(plan.name, plan.keys, plan.args)])
        pipe = self.pipeline()
        for _ids, plan in calls:
            self._call(plan.name, plan.keys, plan.args, client=pipe)
        return plans.read_replies(calls, [parse(r) for r in (pipe.execute() if calls else [])])

    def _read(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> list:
        """The parsed reply of read-only script ``name`` (``user``, ``read``), sent alone; a
        subclass may send it otherwise (web/coalesce.py: in a pipeline with other callers')."""
        return parse(self._scripts[name](keys=list(keys), args=[*self._cfg, *args]))


class AsyncScripts(_Runner):
    """The runner of described calls (engine/core/plans.py) on a redis.asyncio client (or
    fakeredis.aioredis): the same scripts, parsing, refusals and WAIT as ``Scripts``.
    ``on_resolve`` is awaited. On a Redis Cluster it refuses ``Config.wait_replicas``: the WAIT
    must go on the connection to the slot owner that ran the script (cluster.run_then_wait), which
    is redis-py's alone so far."""

    _lua_call = AsyncLuaCall

    def __init__(self, redis, config: Config, on_resolve=None):
        super().__init__(redis, config, on_resolve)
        if self._waiter.replicas and is_cluster(redis):
            raise RedisSetupError(
                f"wait_replicas={self._waiter.replicas} is not supported by the AsyncEngine on Redis Cluster yet"
                " (the Engine supports it)"
            )

    async def _call(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> list:
        script, argv = self._scripts[name], [*self._cfg, *args]
        with refusing_full(name):
            if self._waiter.waits(name):
                raw, acked = await _then_wait_async(script, list(keys), argv, self.redis, self._waiter.command)
            else:
                raw, acked = await script(keys=list(keys), args=argv), None
        reply, resolve = self._parse(name, keys, raw)
        if resolve:
            await self.on_resolve(resolve)
        self._waiter.check(acked, name, keys, reply)
        return reply

    async def run(self, plan: Plan) -> Any:
        return plan.check(await self._call(plan.name, plan.keys, plan.args))

    async def read(self, task_keys: dict[str, TaskKeys], owner: str | None, full: bool = False) -> dict[str, list]:
        """``Scripts.read``: one script per queue, sent at once (on a cluster each to its shard)."""
        calls = plans.reads(task_keys, owner, full)
        replies = await asyncio.gather(*(self._call(plan.name, plan.keys, plan.args) for _ids, plan in calls))
        return plans.read_replies(calls, replies)


def _then_wait(script, keys: list, argv: list, client, wait: tuple) -> tuple[Any, int | None]:
    """Run ``script`` then the ``wait`` command on one connection (WAIT counts the writes of
    its own connection; on a cluster, one to the primary that owns the keys' slot): (raw reply,
    replicas that acknowledged). A missing script, MOVED and ASK are handled in cluster.run_then_wait.
    Raises the script's error as a plain call would."""
    (reply,), acked = run_then_wait(client, [(script, keys, argv)], wait, LUA)
    if isinstance(reply, Exception):
        raise reply
    return reply, acked


async def _then_wait_async(script, keys: list, argv: list, client, wait: tuple) -> tuple[Any, int]:
    """``_then_wait`` on redis.asyncio (one Redis, not a cluster: AsyncScripts refuses it): the
    script and its WAIT in one pipeline, so on one connection; when the server lacked the script
    (or refused it before it ran: LuaCall.fallback), loaded and sent again."""
    for first in (True, False):
        pipe = client.pipeline(transaction=False)
        pipe.execute_command(*script.command(keys, argv))
        pipe.execute_command(*wait)
        reply, acked = await pipe.execute(raise_on_error=False)
        again = (await script.aload(client) if script.missing(reply) else script.fallback(reply)) if first else None
        if again is None:
            break
        script = again
    for item in (reply, acked):
        if isinstance(item, Exception):
            raise item
    return reply, int(acked)
