"""Run each chapter notebook under nbval only as far as its last checked cell.

The build executes every cell of every chapter, so it already proves that each one runs;
the tests' job for a notebook is nbval's comparison of the deterministic cells (tagged
``nbval-check-output``) with the outputs stored in the file. Cells after the last checked
one compare nothing, and in a chapter they are the ones that train models, so running
them again would repeat the build's minutes of training for no check at all. They are
deselected here (pytest reports how many), and every checked cell still runs, in order,
with everything before it.
"""

from __future__ import annotations

import pytest


def _is_checked(item) -> bool:
    return "nbval-check-output" in item.cell.metadata.get("tags", [])


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    try:
        from nbval.plugin import IPyNbCell
    except ImportError:  # nbval not installed: nothing to trim
        return
    last_checked = {}
    for index, item in enumerate(items):
        if isinstance(item, IPyNbCell) and _is_checked(item):
            last_checked[item.parent] = index
    keep, dropped = [], []
    for index, item in enumerate(items):
        if isinstance(item, IPyNbCell) and index > last_checked.get(item.parent, -1):
            dropped.append(item)
        else:
            keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
