"""Start the chapters' kernels with the book's own IPython profile.

Jupyter Book executes each chapter in a fresh IPython kernel. This extension points those
kernels at a profile written into the build folder (``IPYTHONDIR``), which does two things:

- a reader's own IPython profile (startup files, settings) stays out of the book's kernels,
  so nothing outside the repository can change a chapter's numbers;
- the kernel application logs only its errors. Jupyter Book 1's executor starts kernels
  over local TCP without transport encryption, which ipykernel 7 reports as a warning on
  every start; the book's build log must show only warnings that concern the book, so
  that a real one stands out. Cell output and cell errors are not affected.
"""

from __future__ import annotations

import os
import pathlib

from sphinx.application import Sphinx

PROFILE_CONFIG = """\
# Written by book/_ext/book_kernel.py for the kernels that execute the book's chapters.
c.IPKernelApp.log_level = "ERROR"
"""


def use_book_profile(build_dir: pathlib.Path) -> pathlib.Path:
    """Write the kernels' profile under ``build_dir`` and make new kernels use it."""
    ipython_dir = build_dir / ".ipython"
    profile = ipython_dir / "profile_default"
    profile.mkdir(parents=True, exist_ok=True)
    (profile / "ipython_kernel_config.py").write_text(PROFILE_CONFIG)
    os.environ["IPYTHONDIR"] = str(ipython_dir)  # kernels inherit the builder's environment
    return ipython_dir


def _on_builder_inited(app: Sphinx) -> None:
    use_book_profile(pathlib.Path(app.outdir).parent)


def setup(app: Sphinx) -> dict:
    app.connect("builder-inited", _on_builder_inited)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
