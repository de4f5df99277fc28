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
