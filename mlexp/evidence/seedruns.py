"""Seed runs: execute a chapter with every seed shifted, and keep what it
glued.

A chapter's numbers come from one run. To know which differences are real,
the same notebook is executed again with ``MLEXP_SEED_OFFSET`` set to 1, 2,
...; every value the notebook glues (``myst_nb.glue``) is harvested and
stored in ``<chapter>.seeds.json`` beside the notebook, with where and how
it was produced.

Command line::

    python -m mlexp.evidence.seedruns run book/part1/chapter01.ipynb \\
        --offsets 0 1 2 --jobs 3
    python -m mlexp.evidence.seedruns merge run-*.json \\
        --out book/part1/chapter01.seeds.json

``run`` writes the data file beside the notebook unless ``--out`` says
otherwise; ``merge`` combines single-offset files (one per CI job) into one;
``harvest`` stores the book build's own run (offset 0) of a chapter, read
from the notebook the build executed.
A failed run is reported, exits non-zero and writes nothing.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import datetime
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

from ..training.seeds import SEED_OFFSET_ENV, SEED_RUN_ENV
from .seedtable import CHECK_KEY, PROVENANCE_KEY, VALUES_KEY, machine_of

__all__ = [
    "harvest_glue",
    "run_notebook",
    "run_offsets",
    "run_kind",
    "merge",
    "write_atomic",
    "data_path",
]

GLUE_MIME_PREFIX = "application/papermill.record/"


def data_path(notebook: str | os.PathLike) -> pathlib.Path:
    """Where a chapter's seed data lives: ``chapter01.ipynb`` ->
    ``chapter01.seeds.json``."""
    notebook = pathlib.Path(notebook)
    return notebook.with_name(notebook.stem + ".seeds.json")


def harvest_glue(notebook) -> dict[str, object]:
    """Every glued number or string of an executed notebook (an nbformat
    node or a dict).

    Figures and other rich outputs are skipped: the seed data holds values a
    table or a claim can compare, read back from their plain-text form.
    """
    values: dict[str, object] = {}
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        for output in cell.get("outputs", []):
            meta = output.get("metadata", {}).get("scrapbook")
            if not meta:
                continue
            data = {
                k.removeprefix(meta.get("mime_prefix", "")): v
                for k, v in output.get("data", {}).items()
            }
            # glued prose: keep the Markdown source
            if "text/markdown" in data:
                value = "".join(data["text/markdown"])
            else:
                try:
                    value = ast.literal_eval(
                        "".join(data.get("text/plain", ""))
                    )
                except (ValueError, SyntaxError):
                    # the display form of an object (a figure, say), not a
                    # value
                    continue
            if isinstance(value, (int, float, str)) and not isinstance(
                value, bool
            ):
                values[meta["name"]] = value
    return values


def _git_commit(cwd: pathlib.Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def run_notebook(
    notebook: str | os.PathLike,
    offset: int,
    threads: int | None = None,
    timeout: int = 3600,
) -> dict:
    """Execute ``notebook`` with seed offset ``offset`` and return its
    values and provenance.

    The kernel runs in the notebook's folder, as in the book's build.
    ``threads`` caps the kernel's PyTorch threads, so that runs side by side
    share the cores instead of fighting over them.
    """
    import nbformat
    from nbclient import NotebookClient

    notebook = pathlib.Path(notebook).resolve()
    nb = nbformat.read(notebook, as_version=4)
    env_keys = {SEED_OFFSET_ENV: str(offset), SEED_RUN_ENV: "1"}
    if threads:
        env_keys.update(
            {
                "OMP_NUM_THREADS": str(threads),
                "MKL_NUM_THREADS": str(threads),
            }
        )
    saved = {k: os.environ.get(k) for k in env_keys}
    # the kernel inherits this process's environment
    os.environ.update(env_keys)
    start = time.perf_counter()
    try:
        NotebookClient(
            nb,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(notebook.parent)}},
        ).execute()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return run_record(
        nb, notebook, offset, time.perf_counter() - start, threads
    )


def run_record(
    nb,
    notebook: pathlib.Path,
    offset: int,
    seconds: float,
    threads: int | None = None,
) -> dict:
    """The stored form of one executed run of ``notebook``: what it glued,
    and its provenance as the chapter's kernel recorded it."""
    import torch

    values = harvest_glue(nb)
    if PROVENANCE_KEY not in values:
        raise RuntimeError(
            f"{notebook.name} glued no {PROVENANCE_KEY!r}: a chapter "
            "with seed runs calls "
            "mlexp.seed_section(...) after its experiment, which records "
            "what the "
            "numbers depend on and where they were made"
        )
    # What the numbers depend on (fingerprint) and where they were made
    # (machine), computed by the chapter's own kernel.
    recorded = json.loads(values.pop(PROVENANCE_KEY))
    # How the build's checks went is the build's own record, not a value.
    values.pop(CHECK_KEY, None)
    # Every row's value, including those the chapter computes in its seed
    # cell without gluing them on their own.
    values.update(json.loads(values.pop(VALUES_KEY, "{}")))
    missing = sorted(set(recorded.get("rows", {}).values()) - set(values))
    if missing:
        raise RuntimeError(
            f"{notebook.name} recorded no value for the seed table's rows "
            f"{missing}: a run without them cannot fill the table; pass "
            "every row's value to mlexp.seed_section in `current`"
        )
    return {
        "offset": offset,
        "values": values,
        "provenance": {
            **recorded,
            "mlexp_commit": _git_commit(notebook.parent),
            "torch_version": torch.__version__,
            "device": values.get("device_name", "unknown"),
            "threads": threads or torch.get_num_threads(),
            "python": platform.python_version(),
            "architecture": platform.machine(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"
            ),
            "run_seconds": round(seconds, 1),
        },
    }


def harvest_build(
    executed: str | os.PathLike, notebook: str | os.PathLike
) -> dict:
    """The book build's own run of a chapter (seed offset 0) as a stored
    run, read from the notebook the build executed.

    The build and a seed run with offset 0 execute the same code with the
    same seeds, so the build's run need not be made twice. Its time is the
    chapter's hands-on time, which every chapter glues.
    """
    import nbformat

    nb = nbformat.read(executed, as_version=4)
    # myst-nb keeps what a notebook glued beside it, in <name>.glue.json.
    glued = pathlib.Path(executed).with_suffix(".glue.json")
    if glued.is_file():
        outputs = list(json.loads(glued.read_text()).values())
        nb = {"cells": [{"cell_type": "code", "outputs": outputs}]}
    values = harvest_glue(nb)
    if "hands_on_minutes" not in values:
        raise ValueError(
            f"{executed} glued no 'hands_on_minutes': is it the executed "
            "chapter (the build writes it under _build/jupyter_execute)?"
        )
    return run_record(
        nb,
        pathlib.Path(notebook).resolve(),
        0,
        float(values["hands_on_minutes"]) * 60,
    )


def run_offsets(
    notebook: str | os.PathLike,
    offsets: list[int],
    jobs: int = 1,
    timeout: int = 3600,
) -> list[dict]:
    """Run several offsets, ``jobs`` at a time with the cores split between
    them.

    Raises ``RuntimeError`` naming every offset that failed; nothing is
    returned then.
    """
    cores = os.cpu_count() or 1
    threads = max(1, cores // jobs) if jobs > 1 else None
    results, failures = {}, {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        # os.environ is process-wide, so runs in parallel go through
        # separate processes.
        if jobs > 1:
            futures = {
                pool.submit(
                    _run_in_subprocess, notebook, k, threads, timeout
                ): k
                for k in offsets
            }
        else:
            futures = {
                pool.submit(run_notebook, notebook, k, threads, timeout): k
                for k in offsets
            }
        for future in concurrent.futures.as_completed(futures):
            k = futures[future]
            try:
                results[k] = future.result()
                print(
                    f"offset {k}: done in "
                    f"{results[k]['provenance']['run_seconds']:.0f}s",
                    file=sys.stderr,
                )
            # noqa: BLE001 - every failure is reported together below
            except Exception as err:
                failures[k] = f"{type(err).__name__}: {str(err)[-2000:]}"
                print(
                    f"offset {k}: FAILED ({failures[k][:300]})",
                    file=sys.stderr,
                )
    if failures:
        raise RuntimeError(
            f"seed runs failed for offsets {sorted(failures)}: "
            + "; ".join(failures.values())
        )
    return [results[k] for k in offsets]


def _run_in_subprocess(
    notebook, offset: int, threads: int | None, timeout: int
) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "run.json"
        cmd = [
            sys.executable,
            "-m",
            "mlexp.evidence.seedruns",
            "run",
            str(notebook),
            "--offsets",
            str(offset),
            "--out",
            str(out),
        ]
        if threads:
            cmd += ["--threads", str(threads)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(proc.stderr.strip()[-2000:])
        return json.loads(out.read_text())["runs"][0]


def run_kind(run: dict) -> str:
    """The kind of arithmetic a stored run was made with (``cpu-fp32``,
    ``cuda-bf16``); ``unknown`` for runs made before machines were
    recorded."""
    return machine_of(run).get("kind", "unknown")


def merge(
    files: list[str | os.PathLike], into: str | os.PathLike | None = None
) -> dict:
    """Combine data files into one, ordered by kind and offset.

    A run of the same kind and offset given twice in ``files`` is an error.
    Runs already in ``into`` (the chapter's data file) are kept, except
    those that a new run of the same kind and offset replaces: a GPU rerun
    adds GPU data and keeps the CPU's.
    """
    runs: dict[tuple[str, int], dict] = {}
    notebook = None
    for f in files:
        data = json.loads(pathlib.Path(f).read_text())
        notebook = notebook or data.get("notebook")
        for run in data["runs"]:
            slot = (run_kind(run), run["offset"])
            if slot in runs:
                raise ValueError(
                    f"offset {run['offset']} appears twice for {slot[0]} "
                    "runs "
                    f"(again in {f}); merge each offset once"
                )
            runs[slot] = run
    if into is not None and pathlib.Path(into).is_file():
        old = json.loads(pathlib.Path(into).read_text())
        notebook = notebook or old.get("notebook")
        for run in old["runs"]:
            runs.setdefault((run_kind(run), run["offset"]), run)
    return {"notebook": notebook, "runs": [runs[k] for k in sorted(runs)]}


def write_atomic(path: str | os.PathLike, data: dict) -> None:
    """Write JSON through a temporary file and a rename, so no reader sees
    half a file."""
    path = pathlib.Path(path)
    fd, tmp = tempfile.mkstemp(
        dir=path.parent, prefix=path.name + ".", suffix=".part"
    )
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    finally:
        pathlib.Path(tmp).unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mlexp.evidence.seedruns",
        description=__doc__.split("\n\n")[0],
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run", help="execute a chapter notebook once per seed offset"
    )
    run.add_argument("notebook", type=pathlib.Path)
    run.add_argument("--offsets", type=int, nargs="+", default=[0, 1, 2])
    run.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="runs side by side (cores are split between them)",
    )
    run.add_argument(
        "--threads", type=int, default=None, help="PyTorch threads per run"
    )
    run.add_argument(
        "--timeout", type=int, default=3600, help="seconds allowed per cell"
    )
    run.add_argument(
        "--out",
        type=pathlib.Path,
        default=None,
        help="default: <chapter>.seeds.json beside it",
    )
    hvst = sub.add_parser(
        "harvest",
        help="store the book build's run of a chapter as seed offset 0",
    )
    hvst.add_argument("executed", type=pathlib.Path)
    hvst.add_argument("--notebook", type=pathlib.Path, required=True)
    mrg = sub.add_parser(
        "merge", help="combine single-offset data files into one"
    )
    mrg.add_argument("files", nargs="+", type=pathlib.Path)
    mrg.add_argument("--out", type=pathlib.Path, required=True)
    mrg.add_argument(
        "--into",
        type=pathlib.Path,
        default=None,
        help="a data file whose runs of other kinds or offsets are kept",
    )
    args = parser.parse_args(argv)

    if args.command == "merge":
        write_atomic(args.out, merge(args.files, into=args.into))
        return 0
    if args.command == "harvest":
        run = harvest_build(args.executed, args.notebook)
        _store_beside(args.notebook, [run])
        return 0
    if not args.notebook.is_file():
        parser.error(f"no notebook at {args.notebook}")
    try:
        if args.threads and len(args.offsets) == 1:
            runs = [
                run_notebook(
                    args.notebook,
                    args.offsets[0],
                    args.threads,
                    args.timeout,
                )
            ]
        else:
            runs = run_offsets(
                args.notebook, args.offsets, args.jobs, args.timeout
            )
    # noqa: BLE001 - report and exit non-zero, leaving no data file
    except Exception as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.out is None:
        _store_beside(args.notebook, runs)
    else:
        write_atomic(
            args.out, {"notebook": args.notebook.name, "runs": runs}
        )
    return 0


def _store_beside(notebook: pathlib.Path, runs: list[dict]) -> None:
    """Merge ``runs`` into the chapter's data file, keeping its stored runs
    of other kinds and offsets."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = pathlib.Path(tmp) / "fresh.json"
        write_atomic(fresh, {"notebook": notebook.name, "runs": runs})
        merged = merge([fresh], into=data_path(notebook))
    write_atomic(data_path(notebook), merged)


if __name__ == "__main__":
    sys.exit(main())
