"""A failure's message is recorded whatever text the exception carries."""

import logging
import os

from ghostless import PermanentError, State
from ghostless.core.logs import JsonFormatter
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


def test_a_task_failed_for_good_by_an_exception_carrying_such_text_is_logged_escaped(engine, caplog):
    # Its traceback's last line is the exception's own text: before, pytest-xdist could not even
    # send this test's report (UnicodeEncodeError), as a UTF-8 log file could not take the line.
    name = os.fsdecode(b"r\xe9sum\xe9.pdf")

    @engine.task(name="open_it", queue="images", lease=30, max_attempts=1)
    def open_it(ctx):
        raise ValueError(f"cannot open {name}")

    task = engine.submit("open_it", {}, owner="alice")
    execute(engine, engine.claim(task.id, "w1"))
    assert engine.get(task.id).status == State.FAILED
    [line] = [r for r in caplog.records if r.getMessage().startswith(f"task {task.id} failed for good")]
    assert line.getMessage().endswith("ValueError('cannot open r\\udce9sum\\udce9.pdf')")
    # its traceback, as every formatter writes it (a raw surrogate fails a UTF-8 stream)
    assert line.exc_text.endswith("ValueError: cannot open r\\udce9sum\\udce9.pdf")
    assert logging.Formatter().format(line).encode("utf-8") and JsonFormatter().format(line).encode("utf-8")
