"""The slot in which a work-horse records the task its claim took (it may be the head of the line, not
the job's task: lua/claim.lua), which its parent reads to report the attempt when the horse dies."""

import os

from ghostless.execution import runtime


def _child(body) -> int:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's exit status is the assertion
        try:
            body()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_the_parent_reads_what_its_horse_recorded():
    runtime.new_job()
    assert runtime.claimed() is None
    assert _child(lambda: runtime.note_claimed("images.aaaaaaaaaaaaaaaaaaaa")) == 0
    assert runtime.claimed() == "images.aaaaaaaaaaaaaaaaaaaa"
    runtime.new_job()
    assert runtime.claimed() is None


def test_worker_processes_forked_from_one_supervisor_each_have_their_own_slot():
    runtime.new_job()
    runtime.note_claimed("images.bbbbbbbbbbbbbbbbbbbb")

    def sibling_worker():  # a second worker process: its own slot, then its horse's claim
        runtime.new_job()
        _child(lambda: runtime.note_claimed("images.cccccccccccccccccccc"))

    assert _child(sibling_worker) == 0
    assert runtime.claimed() == "images.bbbbbbbbbbbbbbbbbbbb"
