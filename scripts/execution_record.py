"""Which chapters' runs in the book's execution record (``_execution_record/``) are stale.

A build takes a chapter from the record when the record's run read the chapter's current
code cells and inputs (``book/_ext/execution_fingerprint.py``), and rewrites the record of
every chapter it executed. Run this before committing, from the repository's root:

    MLEXP_DATA=../shared/data python scripts/execution_record.py [status]

It lists each chapter's record as current, stale (with what changed), missing or
unreadable, and any problem with the record as a whole, and exits with status 1 if any
chapter's record is not current: build the book (``jupyter-book build book/``), which
executes those chapters and rewrites their records, and commit the record with the change.
It executes nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def extension():
    """The build's own extension, so that the script judges a record as the build does."""
    spec = importlib.util.spec_from_file_location(
        "execution_fingerprint", ROOT / "book/_ext/execution_fingerprint.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", default="status", choices=["status"])
    parser.parse_args(argv)
    ext = extension()
    chapters = {p.relative_to(ROOT / "book").with_suffix("").as_posix(): p
                for p in sorted((ROOT / "book").glob("part*/*.ipynb"))}
    digests = ext.current_digests(list(chapters.values()), ext.corpus_file())
    status = ext.record_status(chapters, digests)
    for docname, (state, words) in status.items():
        print(f"{docname}: {state} ({words})")
    problems = ext.record_problems()
    for problem in problems:
        print(f"problem: {problem}")
    behind = [d for d, (state, _) in status.items() if state != "current"]
    if behind:
        print(f"{len(behind)} of {len(status)} chapters' records are not current: build the book "
              "(jupyter-book build book/) to rewrite them, and commit them with the change")
    return 1 if behind or problems else 0


if __name__ == "__main__":
    sys.exit(main())
