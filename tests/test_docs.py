"""Documentation that is generated from code stays equal to the code."""

from pathlib import Path

from ghostless.core.states import mermaid, table

ROOT = Path(__file__).resolve().parent.parent


def test_lifecycle_doc_shows_the_transition_table_and_diagram_of_engine_states():
    doc = (ROOT / "docs" / "lifecycle.md").read_text()
    assert table() in doc, "regenerate the table in docs/lifecycle.md from ghostless.core.states.table()"
    assert f"```mermaid\n{mermaid()}\n```" in doc, "regenerate the diagram from ghostless.core.states.mermaid()"


def test_readme_first_section_gives_the_two_setup_commands():
    readme = (ROOT / "README.md").read_text()
    first = readme.split("\n## ", 1)[0]
    assert "make demo" in first and "make test" in first


def _example(doc: str, name: str) -> str:
    """The python block after ``<!-- example: NAME ...-->`` in a doc."""
    text = (ROOT / doc).read_text()
    marker = f"<!-- example: {name} "
    assert marker in text, f"{doc} has no example {name!r}"
    block = text.split(marker, 1)[1].split("```python\n", 1)[1]
    return block.split("\n```", 1)[0]


def test_the_wait_example_in_features_runs():
    exec(compile(_example("docs/features.md", "wait"), "docs/features.md:wait", "exec"), {"__name__": "example"})


def test_the_asyncio_example_in_features_runs():
    code = compile(_example("docs/features.md", "asyncio"), "docs/features.md:asyncio", "exec")
    exec(code, {"__name__": "example"})


def test_the_migrating_example_defines_a_task_that_runs():
    """docs/migrating.md's task, run in-process as a worker runs it: its stages, progress and result."""
    from ghostless.execution.runner import execute

    ns = {"__name__": "example"}
    exec(compile(_example("docs/migrating.md", "migrating"), "docs/migrating.md:migrating", "exec"), ns)
    engine, task = ns["engine"], ns["task"]
    execute(engine, engine.claim(task.id, "w1"))
    assert engine.result(task.id, timeout=5) == {"url": "s3://cat-800.png"}
    assert list(dict.fromkeys(e.stage for e in engine.history(task.id) if e.stage)) == ["resizing", "uploading"]
    bad = engine.submit("resize", {"url": "http://cat.png", "width": 1}, owner="user-42")
    execute(engine, engine.claim(bad.id, "w1"))
    failed = engine.get(bad.id)
    assert (failed.status.value, failed.error_kind, failed.attempt) == ("FAILED", "bad_url", 1)


def test_the_rate_limit_example_in_features_runs():
    exec(
        compile(_example("docs/features.md", "rate-limit"), "docs/features.md:rate-limit", "exec"),
        {"__name__": "example"},
    )


def test_the_expiry_example_in_features_runs():
    exec(compile(_example("docs/features.md", "expiry"), "docs/features.md:expiry", "exec"), {"__name__": "example"})


def test_the_monitoring_example_in_features_runs():
    code = _example("docs/features.md", "monitoring")
    exec(compile(code, "docs/features.md:monitoring", "exec"), {"__name__": "example"})
