"""The SSE message formatter (web/sse.py format_event, format_comment), on its own."""

from __future__ import annotations

import json

import pytest

from ghostless.web.broker import Event
from ghostless.web.eventstream import event_message, parsed_id
from ghostless.web.sse import format_comment, format_event


def test_an_event_has_its_id_name_and_json_data_and_ends_with_a_blank_line():
    assert (
        format_event("1700000000000-0", "transition", {"to": "SUCCESS"})
        == 'id: 1700000000000-0\nevent: transition\ndata: {"to":"SUCCESS"}\n\n'
    )


def test_json_data_stays_on_one_line_even_with_newlines_in_strings():
    text = format_event(data={"message": "line 1\nline 2\r\n"})
    assert text.count("\n") == 2
    assert json.loads(text[len("data: ") :]) == {"message": "line 1\nline 2\r\n"}


def test_string_data_with_newlines_becomes_one_data_line_per_line():
    assert format_event(data="a\nb\r\nc\rd") == "data: a\ndata: b\ndata: c\ndata: d\n\n"


def test_fields_left_out_are_not_sent():
    assert format_event(data={}) == "data: {}\n\n"
    assert format_event(retry=2000) == "retry: 2000\n\n"


@pytest.mark.parametrize("field", ["id", "event"])
@pytest.mark.parametrize("bad", ["a\nb", "a\rb", "a\0b"])
def test_an_id_or_name_that_would_break_the_framing_is_refused(field, bad):
    with pytest.raises(ValueError):
        format_event(**{field: bad}, data={})


def test_a_comment_is_a_colon_line_each():
    assert format_comment("keep-alive") == ": keep-alive\n\n"
    assert format_comment("a\nb") == ": a\n: b\n\n"
    assert format_comment("") == ": \n\n"


def test_unicode_data_is_sent_as_json_escapes():
    assert format_event(data={"prompt": "猫 🐱"}) == 'data: {"prompt":"\\u732b \\ud83d\\udc31"}\n\n'


def test_a_shared_event_is_sent_as_any_other_with_each_subscribers_own_id():
    """The broker's Event makes its message once for all its subscribers: each still gets
    exactly the message format_event makes, with its own id."""
    fields = {"kind": "progress", "task_id": "t1", "message": "50%\n", "prompt": "猫"}
    shared = Event(fields)
    for id in ("1700000000000-0", "1700000000000,images:1700000000000-0", "1700000000000-0"):
        assert event_message(id, shared) == format_event(id, "progress", fields) == event_message(id, dict(fields))
    assert shared == fields
    assert event_message(None, shared) == format_event(None, "progress", fields) == shared.message  # made once


def test_a_shared_event_cannot_be_changed_by_one_of_its_subscribers():
    shared = Event({"kind": "progress", "task_id": "t1"})
    before = event_message("1-0", shared)
    for change in (
        lambda: shared.__setitem__("kind", "x"),
        lambda: shared.update(kind="x"),
        lambda: shared.pop("kind"),
        lambda: shared.setdefault("new", 1),
        lambda: shared.clear(),
    ):
        with pytest.raises(TypeError):
            change()
    assert event_message("1-0", shared) == before and shared == {"kind": "progress", "task_id": "t1"}


def test_a_shared_event_carries_its_stream_id_parsed_as_any_event_parses():
    fields = {"kind": "progress", "task_id": "t1", "stream_id": "1700000000000-7"}
    assert parsed_id(Event(fields)) == parsed_id(fields) == (1700000000000, 7)
    assert parsed_id(Event({"kind": "progress"})) is None  # no id: nothing to parse
