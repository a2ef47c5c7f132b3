"""scripts/store_checked_outputs.py stores what nbval compares, and nothing else."""

import importlib.util
import pathlib

import nbformat

ROOT = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("store_checked_outputs", ROOT / "scripts/store_checked_outputs.py")
store_checked_outputs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(store_checked_outputs)


def test_only_checked_cells_get_their_outputs_and_training_is_not_run(tmp_path):
    tag = {"tags": ["nbval-check-output"]}
    cells = [
        nbformat.v4.new_code_cell("x = 6"),
        nbformat.v4.new_code_cell("print('a'); print('b')", metadata=tag),
        nbformat.v4.new_code_cell("raise RuntimeError('a training cell: never run here')"),
    ]
    path = tmp_path / "chapter.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    assert store_checked_outputs.store(path) == 1
    stored = nbformat.read(path, as_version=4).cells
    assert stored[0].outputs == [] and stored[2].outputs == []
    (output,) = stored[1].outputs  # the two writes joined, as a reader sees them
    assert output.text == "a\nb\n" and stored[1].execution_count == 2
    assert "execution" not in stored[1].metadata  # no timestamps in the stored file
