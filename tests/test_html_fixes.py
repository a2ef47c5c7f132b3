"""The book's repairs to what myst-nb renders (book/_ext/html_fixes.py)."""

import importlib.util
import pathlib

import nbformat
from myst_nb.core import utils

ROOT = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("html_fixes", ROOT / "book/_ext/html_fixes.py")
html_fixes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(html_fixes)


def printed_in_three_writes():
    return [nbformat.v4.new_output("stream", name="stdout", text=f"row {i}\n") for i in range(3)]


def test_myst_nbs_own_merge_grows_the_cells_first_output_so_a_second_merge_repeats_lines():
    """The upstream behaviour the fix exists for."""
    outputs = printed_in_three_writes()
    utils.coalesce_streams(outputs)
    (merged,) = utils.coalesce_streams(outputs)
    assert merged.text.count("row 1") == 2


def test_merging_a_cells_streams_twice_shows_each_line_once():
    outputs = printed_in_three_writes()
    html_fixes.coalesce_copies(outputs)
    (merged,) = html_fixes.coalesce_copies(outputs)
    assert merged.text == "row 0\nrow 1\nrow 2\n"
    assert [o.text for o in outputs] == ["row 0\n", "row 1\n", "row 2\n"]  # the cell is untouched
