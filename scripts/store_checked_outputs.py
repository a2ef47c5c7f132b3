"""Store the outputs that nbval compares, from a fresh run of the checked cells.

A chapter keeps outputs only in the cells tagged ``nbval-check-output``; the tests
compare a fresh run of those cells with them. After changing such a cell, run

    python scripts/store_checked_outputs.py book/part1/chapter01.ipynb

It executes the chapter in its own folder up to its last checked cell (as the tests
do: the cells after it train models and are not needed), and writes each checked
cell's outputs and execution count into the file. Other cells keep no outputs.
"""

from __future__ import annotations

import argparse
import copy
import pathlib
import sys

import nbformat
from nbclient import NotebookClient

TAG = "nbval-check-output"


def _joined_streams(outputs: list) -> list:
    """Consecutive writes to one stream as a single output, as a reader sees them."""
    joined = []
    for output in outputs:
        last = joined[-1] if joined else None
        if (output.output_type == "stream" and last is not None
                and last.output_type == "stream" and last.name == output.name):
            last.text += output.text
        else:
            joined.append(output)
    return joined


def store(notebook: pathlib.Path) -> int:
    nb = nbformat.read(notebook, as_version=4)
    checked = [i for i, c in enumerate(nb.cells) if TAG in c.metadata.get("tags", [])]
    if not checked:
        raise SystemExit(f"{notebook}: no cell is tagged {TAG}")
    head = copy.deepcopy(nb)
    head.cells = head.cells[: checked[-1] + 1]
    NotebookClient(
        head, timeout=600, kernel_name="python3", record_timing=False,
        resources={"metadata": {"path": str(notebook.resolve().parent)}},
    ).execute()
    for i in checked:
        nb.cells[i].outputs = _joined_streams(head.cells[i].outputs)
        nb.cells[i].execution_count = head.cells[i].execution_count
    nbformat.write(nb, notebook)
    return len(checked)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=pathlib.Path)
    for notebook in parser.parse_args(argv).notebooks:
        print(f"{notebook}: stored the outputs of {store(notebook)} checked cells")
    return 0


if __name__ == "__main__":
    sys.exit(main())
