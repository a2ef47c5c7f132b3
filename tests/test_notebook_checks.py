"""nbval compares every checked cell without re-running the training the build did."""

import json
import pathlib
import shutil
import subprocess
import sys

import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "book").glob("part*/*.ipynb"))
TRAINING = ("train_lm(", "train_side_by_side(")


def test_cells_after_the_last_checked_one_are_not_run(tmp_path):
    checked = nbformat.v4.new_code_cell(
        "print(6 * 7)", metadata={"tags": ["nbval-check-output"]},
        outputs=[nbformat.v4.new_output("stream", name="stdout", text="42\n")], execution_count=1)
    training = nbformat.v4.new_code_cell("raise RuntimeError('this cell trains for minutes')")
    nbformat.write(nbformat.v4.new_notebook(cells=[checked, training]), tmp_path / "chapter.ipynb")
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--nbval-lax", "-p", "no:cacheprovider", "chapter.ipynb"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "1 passed, 1 deselected" in result.stdout


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: p.stem)
def test_checked_cells_come_before_the_training(notebook):
    """Otherwise the test command would train every model a second time."""
    cells = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
    checked = [i for i, c in enumerate(cells) if "nbval-check-output" in c["metadata"].get("tags", [])]
    assert checked, f"{notebook.name} has no cell for nbval to compare"
    for cell in cells[: checked[-1] + 1]:
        source = "".join(cell["source"])
        assert not any(call in source for call in TRAINING), (
            f"{notebook.name}: a cell up to the last checked one trains; move the checked cells "
            f"before the training:\n{source[:200]}")


# a figure drawn in the cell, or by one of the book's figure helpers
DRAWS = ("plt.subplots(", "plt.figure(", "figures.")


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: p.stem)
def test_drawing_code_is_folded_and_what_it_draws_is_computed_in_view(notebook):
    """A page shows the idea first: a cell that draws a figure is folded (hide-input) and draws
    only; the numbers it plots are computed in a visible cell (no training, no scoring there)."""
    cells = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
    drawing = [c for c in cells if any(d in "".join(c["source"]) for d in DRAWS)]
    assert drawing, f"{notebook.name} draws no figure"
    for cell in drawing:
        source = "".join(cell["source"])
        assert "hide-input" in cell["metadata"].get("tags", []), (
            f"{notebook.name}: a drawing cell is not folded:\n{source[:300]}")
        computes = ("train_lm(", "train_side_by_side(", "bits_per_char(", "linalg.")
        assert not any(c in source for c in computes), (
            f"{notebook.name}: a folded drawing cell computes what it shows:\n{source[:300]}")
