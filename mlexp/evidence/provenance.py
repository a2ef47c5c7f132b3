"""What a run's numbers depend on, and where it ran.

A stored seed run is stale when something that produced its numbers has
changed: the chapter's code, the library, the corpus or PyTorch. It is not
stale merely because it was made on another machine: CPUs with other
instruction sets take other kernel paths and shift the last digits of every
training run, but that is drift, not a change of the experiment. So each run
records two things apart:

- a *fingerprint*, one hash per ingredient of its numbers, compared to
  decide staleness;
- the *machine*: the kind of arithmetic
  (:mod:`mlexp.training.precision`), CPU model and instruction set (or
  GPU), and threads, reported beside the numbers;
  only runs of one kind of arithmetic are compared.

Hashes are taken over the syntax tree of the code without docstrings and
comments, so a reworded comment or a reformatted line does not make seed
data stale; a changed number does.
"""

from __future__ import annotations

import ast
import hashlib
import json
import pathlib
import platform
import sys

import torch

from ..training.data import corpus_path
from ..training.precision import arithmetic

__all__ = [
    "INGREDIENTS",
    "EVIDENCE_PACKAGE",
    "loaded_modules",
    "fingerprint",
    "machine",
]

#: What each fingerprint entry stands for, in a stale-data warning's words.
INGREDIENTS = {
    "code": "the chapter's code cells",
    "mlexp": "the mlexp library",
    "corpus": "the corpus",
    "torch": "the PyTorch version",
}

#: The subpackage that reads, stores and shows numbers without producing
#: them: changing it does not change a run's numbers, so the library's hash
#: leaves it out.
EVIDENCE_PACKAGE = "mlexp.evidence"


def _without_docstrings(tree: ast.AST) -> ast.AST:
    body_nodes = (
        ast.Module,
        ast.ClassDef,
        ast.FunctionDef,
        ast.AsyncFunctionDef,
    )
    for node in ast.walk(tree):
        if isinstance(node, body_nodes) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(getattr(first, "value", None), ast.Constant)
                and isinstance(first.value.value, str)
            ):
                node.body = node.body[1:] or [ast.Pass()]
    return tree


def source_digest(sources: list[str]) -> str:
    """SHA-256 over the syntax of each source: comments, layout, docstrings
    ignored.

    A source that does not parse as Python (a cell with IPython magics) is
    hashed as text.
    """
    digest = hashlib.sha256()
    for source in sources:
        try:
            text = ast.dump(_without_docstrings(ast.parse(source)))
        except SyntaxError:
            text = source
        digest.update(text.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def notebook_code(notebook: str | pathlib.Path) -> list[str]:
    """The sources of a notebook's code cells, in order."""
    cells = json.loads(pathlib.Path(notebook).read_text(encoding="utf-8"))[
        "cells"
    ]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def loaded_modules() -> list[str]:
    """Every mlexp module this process has imported, by dotted name.

    A chapter's kernel has imported exactly the modules its page can
    depend on; the build's execution cache runs a chapter again when one of
    them changes (``book/_ext/execution_fingerprint.py``).
    """
    return sorted(
        name
        for name, module in sys.modules.items()
        if (name == "mlexp" or name.startswith("mlexp."))
        and getattr(module, "__file__", None)
    )


def loaded_mlexp_sources() -> dict[str, str]:
    """Source of every loaded mlexp module that can produce numbers, by
    module name: the evidence subpackage is left out.

    Modules a kernel never loaded (another chapter's tokenizer, say) cannot
    change its numbers.
    """
    return {
        name: pathlib.Path(sys.modules[name].__file__).read_text(
            encoding="utf-8"
        )
        for name in loaded_modules()
        if not (
            name == EVIDENCE_PACKAGE
            or name.startswith(EVIDENCE_PACKAGE + ".")
        )
    }


def fingerprint(notebook: str | pathlib.Path) -> dict[str, str]:
    """One hash per ingredient of the numbers a chapter's run produces.

    ``notebook`` is the chapter's ``.ipynb``; call this from the chapter's
    own kernel, after its training, so that every mlexp module it used is
    loaded. Where the notebook file is not at hand (a copy opened on Colab),
    its entry reads ``"unknown"``.
    """
    notebook = pathlib.Path(notebook)
    code = (
        source_digest(notebook_code(notebook))
        if notebook.is_file()
        else "unknown"
    )
    library = loaded_mlexp_sources()
    corpus = hashlib.sha256(corpus_path().read_bytes()).hexdigest()
    return {
        "code": code,
        "mlexp": source_digest([f"{n}\n{s}" for n, s in library.items()]),
        "corpus": corpus,
        "torch": torch.__version__,
    }


def _cpu_model() -> str:
    cpuinfo = pathlib.Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return " ".join(line.split(":", 1)[1].split())
    return platform.processor() or platform.machine() or "unknown CPU"


def machine(device: torch.device) -> dict[str, object]:
    """Where a run on ``device`` executes: kind, a readable name,
    instruction set, threads."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        capability = "sm_{}{}".format(
            *torch.cuda.get_device_capability(device)
        )
    else:
        capability = torch.backends.cpu.get_cpu_capability()
        name = f"{_cpu_model()} ({capability})"
    return {
        "kind": arithmetic(device).kind,
        "name": name,
        "capability": capability,
        "threads": torch.get_num_threads(),
    }
