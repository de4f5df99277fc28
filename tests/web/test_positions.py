"""Composite feed positions (web/positions.py): parse, print, resume."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from ghostless.web.positions import Positions

queue = st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True)
stream_id = st.tuples(st.integers(0, 2**63), st.integers(0, 2**63)).map(lambda t: f"{t[0]}-{t[1]}")


@settings(max_examples=50)
@given(st.integers(0, 2**62), st.dictionaries(queue, stream_id, max_size=5))
def test_a_position_prints_and_parses_back_to_itself(base, queues):
    position = Positions(base, queues)
    again = Positions.parse(str(position))
    assert (again.base, again.queues) == (base, queues)


def test_a_listed_queue_resumes_after_its_id_and_others_from_the_base():
    p = Positions.parse("1700000000000,images:1700000000123-4")
    assert p.start("images") == "(1700000000123-4"
    assert p.start("other") == "1700000000000-0"
    assert not p.is_new("images", "1700000000123-4") and p.is_new("images", "1700000000123-5")
    assert not p.is_new("other", "1699999999999-9") and p.is_new("other", "1700000000000-0")


def test_advancing_lists_the_queue():
    p = Positions(5)
    p.advance("images", "7-0")
    assert str(p) == "5,images:7-0"


def test_taking_an_event_advances_only_past_new_ones():
    """A live feed takes each event once: an old one (before the base, or at or before its queue's
    id, as after a replay) is refused and leaves the position as it was."""
    p = Positions.parse("1700000000000,images:1700000000123-4")
    assert not p.take("images", "1700000000123-4") and not p.take("other", "1699999999999-9")
    assert str(p) == "1700000000000,images:1700000000123-4"
    assert p.take("images", "1700000000123-5") and p.take("other", "1700000000000-0")
    assert not p.take("images", "1700000000123-5") and not p.take("other", "1700000000000-0")
    assert not p.is_new("images", "1700000000123-5") and p.is_new("images", "1700000000124-0")
    assert str(p) == "1700000000000,images:1700000000123-5,other:1700000000000-0"
    replayed = Positions(5)
    replayed.advance("q", "7-0")  # as a replay advances: by the id alone
    assert not replayed.take("q", "7-0") and replayed.take("q", "7-1")


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "abc",
        "-5",
        "5,",
        "5,images",
        "5,images:",
        "5,images:x-1",
        "5,ima ges:1-0",
        "5,images:1-0,images:2-0",
        "5;images:1-0",
        "1" * 20,
        "²",
        "5,images:²-0",
        "5\n",
        "5,images\n:1-0",
        "5,images:1-0\n",
        "5," + ",".join(f"q{i}:1-0" for i in range(1001)),
    ],
)
def test_anything_else_is_not_a_position(text):
    assert Positions.parse(text) is None


def test_the_text_of_one_queues_position_is_the_general_form():
    one = Positions(5, {"images": "7-1"})
    assert str(one) == ",".join(["5", "images:7-1"]) and Positions.parse(str(one)).queues == {"images": "7-1"}
    assert str(Positions(5)) == "5"
