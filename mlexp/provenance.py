"""What a run's numbers depend on, and where it ran.

A stored seed run is stale when something that produced its numbers has
changed: the chapter's code, the library, the corpus or PyTorch. It is not
stale merely because it was made on another machine: CPUs with other
instruction sets take other kernel paths and shift the last digits of every
training run, but that is drift, not a change of the experiment. So each run
records two things apart:

- a *fingerprint*, one hash per ingredient of its numbers, compared to
  decide staleness;
- the *machine*: the kind of arithmetic (:mod:`mlexp.precision`), CPU model
  and instruction set (or GPU), and threads, reported beside the numbers;
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

from .data import corpus_path
from .precision import arithmetic

__all__ = [
    "INGREDIENTS",
    "PRESENTATION_MODULES",
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

#: Modules that read, store or show numbers without producing them. Changing
#: them does not change a run's numbers, so the fingerprint leaves them out.
PRESENTATION_MODULES = frozenset(
    {
        "mlexp.evidencepage",
        "mlexp.pages",
        "mlexp.provenance",
        "mlexp.seedruns",
        "mlexp.seedstats",
        "mlexp.seedtable",
        "mlexp.style",
    }
)


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


def loaded_mlexp_sources() -> dict[str, str]:
    """Source of every mlexp module this process has imported, by module
    name.

    A chapter's kernel has imported exactly the modules its numbers can
    depend on; modules it never loaded (another chapter's tokenizer, say)
    cannot change them.
    """
    sources = {}
    for name, module in sorted(sys.modules.items()):
        if name != "mlexp" and not name.startswith("mlexp."):
            continue
        if name in PRESENTATION_MODULES or not getattr(
            module, "__file__", None
        ):
            continue
        sources[name] = pathlib.Path(module.__file__).read_text(
            encoding="utf-8"
        )
    return sources


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
