"""Args are bound to the task function's signature: at submit and edit (BadArgs, a ValueError
naming the parameters), and in the worker, where args that cannot fit fail for good (bad_args)
while a TypeError raised inside the function is retried like any other failure."""

import inspect

import pytest

from ghostless import BadArgs, Engine, State
from ghostless.execution.runner import execute


@pytest.fixture
def drawing(engine):
    @engine.task(name="draw", queue="images", max_attempts=3, backoff=[0.01])
    def draw(ctx, prompt, size=512, *, style="plain"):
        if prompt == "typo inside":
            return len(1)  # a TypeError raised by the function itself
        return {"prompt": prompt, "size": size, "style": style}

    return engine


def test_a_misspelled_argument_is_refused_at_submit_naming_both_parameters(drawing):
    with pytest.raises(BadArgs) as refused:
        drawing.submit("draw", {"promt": "a cat"}, owner="alice")
    assert isinstance(refused.value, ValueError)
    assert (refused.value.missing, refused.value.unexpected) == (["prompt"], ["promt"])
    message = str(refused.value)
    assert "missing 'prompt'" in message and "unexpected 'promt'" in message
    assert "it takes: prompt, size, style" in message
    assert drawing.list_tasks("alice")[0] == []  # nothing was written


def test_args_that_fit_with_defaults_and_keyword_only_parameters_are_accepted(drawing):
    task = drawing.submit("draw", {"prompt": "a cat", "style": "ink"}, owner="alice")
    assert task.args == {"prompt": "a cat", "style": "ink"}


def test_an_edit_with_args_that_do_not_fit_is_refused_and_changes_nothing(drawing):
    task = drawing.submit("draw", {"prompt": "a cat"}, owner="alice")
    with pytest.raises(BadArgs, match="unexpected 'colour'"):
        drawing.edit(task.id, {"prompt": "a dog", "colour": "red"}, by="alice")
    assert drawing.get(task.id).status == State.PENDING


def test_a_message_about_many_unknown_arguments_stays_short(drawing):
    with pytest.raises(BadArgs) as refused:
        drawing.submit("draw", {"prompt": "x", **{"k" * 500 + str(n): n for n in range(1000)}}, owner="alice")
    assert len(str(refused.value)) < 1000 and "and 995 more" in str(refused.value)


def worker_engine(engine) -> Engine:
    """A worker on the same Redis whose ``draw`` takes other parameters than the submitter's."""
    worker = Engine(engine.redis, namespace=engine.keys.ns, dispatcher=None, check=False)

    @worker.task(name="draw", queue="images", max_attempts=3, backoff=[0.01])
    def draw(ctx, prompt):  # pragma: no cover - never called: its args do not fit
        raise AssertionError("called with args that do not fit")

    return worker


def test_args_that_do_not_fit_in_the_worker_fail_for_good_as_bad_args(engine):
    engine.task(name="draw", queue="images", max_attempts=3)(lambda ctx, **kw: None)
    task = engine.submit("draw", {"promt": "a cat"}, owner="alice")
    worker = worker_engine(engine)
    execute(worker, worker.claim(task.id, "w1"))
    got = engine.get(task.id)
    assert (got.status, got.error_kind, got.attempt) == (State.FAILED, "bad_args", 1)
    assert "unexpected 'promt'" in got.reason


def test_a_type_error_raised_inside_the_function_is_retried(drawing):
    task = drawing.submit("draw", {"prompt": "typo inside"}, owner="alice")
    execute(drawing, drawing.claim(task.id, "w1"))
    got = drawing.get(task.id)
    assert (got.status, got.error_kind) == (State.RETRY_WAITING, "TypeError")


def test_args_that_fit_are_passed_to_the_function(drawing):
    task = drawing.submit("draw", {"prompt": "a cat", "style": "ink"}, owner="alice")
    execute(drawing, drawing.claim(task.id, "w1"))
    assert drawing.get(task.id).result == {"prompt": "a cat", "size": 512, "style": "ink"}


def test_a_workers_attempt_does_not_read_the_functions_signature_again(engine, monkeypatch):
    # A fork worker's work-horse starts from its parent's memory: a signature read at registration
    # is there, one read lazily was read again in every horse (~0.3 ms a job, measured).
    engine.task(name="draw", queue="images")(lambda ctx, prompt: {"prompt": prompt})
    worker = Engine(engine.redis, namespace=engine.keys.ns, dispatcher=None, check=False)
    worker.task(name="draw", queue="images")(lambda ctx, prompt: {"drawn": prompt})
    task = engine.submit("draw", {"prompt": "a cat"}, owner="alice")
    read = []
    monkeypatch.setattr("inspect.signature", lambda *a, **kw: read.append(a))
    execute(worker, worker.claim(task.id, "w1"))
    assert engine.get(task.id).result == {"drawn": "a cat"} and read == []


class _Later:
    """A callable whose signature cannot be read yet (Python 3.14 reads annotations lazily: one
    naming a class its module defines further down raises NameError until the module is done)."""

    ready = False

    @property
    def __signature__(self):
        if not _Later.ready:
            raise NameError("name 'Prompt' is not defined")
        return inspect.signature(lambda ctx, prompt: None)

    def __call__(self, ctx, prompt):
        return {"prompt": prompt}


def test_a_function_whose_signature_cannot_be_read_yet_registers_and_is_bound_later(engine):
    _Later.ready = False
    engine.task(name="later", queue="images")(_Later())  # no NameError at registration
    _Later.ready = True
    with pytest.raises(BadArgs, match="unexpected 'promt'"):
        engine.submit("later", {"promt": "a cat"}, owner="alice")
