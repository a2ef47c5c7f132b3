"""Code a reader sees fits the page: mlexp and the chapters' code cells pass ruff.

The line length (pyproject.toml) is chosen so that no code block scrolls sideways in the
book's content column; the browser tests check the rendered page itself.
"""

import subprocess
import sys
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True)


def test_ruff_finds_no_problem_and_no_long_line():
    result = ruff("check", "--output-format", "concise")
    assert result.returncode == 0, result.stdout + result.stderr


def test_code_is_formatted():
    result = ruff("format", "--check")
    assert result.returncode == 0, f"run `ruff format` on:\n{result.stdout}{result.stderr}"


def test_the_checks_cover_the_library_and_the_chapters():
    listed = ruff("check", "--show-files").stdout
    assert "mlexp/transformer.py" in listed and "book/part1/chapter01.ipynb" in listed
