"""The chapters' kernels start without logging anything into the build log."""

import importlib.util
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("book_kernel", ROOT / "book/_ext/book_kernel.py")
book_kernel = importlib.util.module_from_spec(spec)
spec.loader.exec_module(book_kernel)

# Execute a one-cell notebook the way Jupyter Book does (nbclient), in a fresh process
# whose stderr is the build log's.
EXECUTE = """
import sys, nbformat
from nbclient import NotebookClient
sys.path.insert(0, sys.argv[1])
import book_kernel
book_kernel.use_book_profile(__import__("pathlib").Path(sys.argv[2]))
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
NotebookClient(nb, kernel_name="python3").execute()
assert nb.cells[0].outputs[0]["text"].strip() == "42"
"""


def test_a_kernel_start_logs_no_warning(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "IPYTHONDIR"}
    result = subprocess.run(
        [sys.executable, "-c", EXECUTE, str(ROOT / "book" / "_ext"), str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    assert (tmp_path / ".ipython" / "profile_default" / "ipython_kernel_config.py").is_file()
