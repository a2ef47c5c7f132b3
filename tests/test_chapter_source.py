"""The chapter notebooks: the code a reader sees is the code that runs, and the launch path holds."""

import ast
import importlib
import inspect
import json
import pathlib

import pytest
import yaml


ROOT = pathlib.Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "book").glob("part*/*.ipynb"))


def code_cells(notebook: pathlib.Path) -> list[str]:
    cells = json.loads(notebook.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def shown_definitions(notebook: pathlib.Path) -> dict[str, ast.AST]:
    """Every top-level class and function a chapter's code cells define, by name."""
    found = {}
    for source in code_cells(notebook):
        for node in ast.parse(source).body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                found[node.name] = node
    return found


def test_there_is_a_chapter():
    assert CHAPTERS, "no chapter notebooks under book/part*/"


def library_definitions() -> dict[str, ast.AST]:
    """Every public class and function of every mlexp module, by name."""
    found = {}
    for path in sorted((ROOT / "mlexp").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        module = importlib.import_module(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
        for name in getattr(module, "__all__", []):
            obj = inspect.unwrap(getattr(module, name, None))  # an lru_cache'd function too
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and obj.__module__ == module.__name__:
                found[name] = ast.parse(inspect.getsource(obj)).body[0]
    return found


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: p.stem)
def test_code_shown_on_the_page_is_the_library_code(notebook):
    shown = shown_definitions(notebook)
    library = library_definitions()
    overlap = shown.keys() & library.keys()
    assert overlap, "the chapter shows none of mlexp's definitions"
    for name in sorted(overlap):
        assert ast.dump(shown[name]) == ast.dump(library[name]), (
            f"{notebook.name} shows a {name} that differs from mlexp's; "
            "regenerate the cell from the library (or change both)"
        )


def test_chapter_one_shows_every_building_block():
    shown = shown_definitions(ROOT / "book/part1/chapter01.ipynb")
    for name in ("apply_rope", "Attention", "SwiGLU", "RMSNorm", "Block", "TransformerLM", "PatchEmbed",
                 "VisionTransformer", "WriteNothing"):
        assert name in shown, f"Chapter 1 no longer shows {name}"


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: p.stem)
def test_setup_cell_installs_mlexp_from_this_repository(notebook):
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    setup = code_cells(notebook)[0]
    assert f"git+{config['repository']['url']}" in setup, "the setup cell must install mlexp from the repository"
    assert "parents[1]" in setup, "the setup cell must find mlexp in a checkout two folders up"


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: p.stem)
def test_no_stored_outputs_but_the_checked_ones(notebook):
    """Outputs kept in the file are the ones nbval compares; everything else runs fresh at build time."""
    for cell in json.loads(notebook.read_text())["cells"]:
        if cell["cell_type"] == "code" and cell.get("outputs"):
            assert "nbval-check-output" in cell["metadata"].get("tags", []), "".join(cell["source"])[:80]


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: p.stem)
def test_no_control_character_in_a_cell(notebook):
    """A TeX command written through a Python string loses its backslash: ``\\top`` becomes a tab
    and "op", ``\\frac`` a form feed and "rac", and the page shows broken maths."""
    cells = json.loads(notebook.read_text())["cells"]
    found = [
        (i, repr(text[max(0, k - 12) : k + 12]))
        for i, cell in enumerate(cells)
        for text in ["".join(cell["source"])]
        for k, ch in enumerate(text)
        if ch != "\n" and (ord(ch) < 32 or ord(ch) == 127)
    ]
    assert not found, f"control characters in {notebook.name} (cell, context): {found}"
