"""Modules stay small enough to read in one sitting: none of the package's is over ~400 lines."""

from pathlib import Path

import ghostless
import ghostless.web

LIMIT = 400


def test_no_module_of_the_package_is_over_the_limit():
    too_long = {}
    for folder in (Path(ghostless.__file__).parent, Path(ghostless.web.__file__).parent):
        for path in folder.rglob("*.py"):
            lines = len(path.read_text().splitlines())
            if lines > LIMIT:
                too_long[str(path.relative_to(folder.parent))] = lines
    assert too_long == {}
