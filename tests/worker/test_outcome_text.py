"""A failure's message is recorded whatever text the exception carries."""

import os

from ghostless import PermanentError, State
from ghostless.execution.runner import execute


def test_a_failure_message_that_is_not_valid_unicode_is_recorded_escaped(engine):
    name = os.fsdecode(b"r\xe9sum\xe9.pdf")  # a file name decoded with surrogateescape

    @engine.task(name="convert", queue="images", lease=30, max_attempts=3)
    def convert(ctx):
        raise PermanentError(f"cannot open {name}", kind="bad_file")

    task = engine.submit("convert", {}, owner="alice")
    execute(engine, engine.claim(task.id, "w1"))
    got = engine.get(task.id)
    assert (got.status, got.error_kind, got.attempt) == (State.FAILED, "bad_file", 1)  # not retried
    assert got.reason == "cannot open r\\udce9sum\\udce9.pdf"
