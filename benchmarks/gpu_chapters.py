"""Every chapter on the machine at hand (a GPU machine, when one is lent): run time and drift.

Runs each chapter of the table of contents once, with seed offset 0, the way the seed runner
does (a fresh kernel, every glued value harvested), then compares what it glued with the
chapter's stored run of offset 0: the largest difference over the seed table's rows, against
the reproduction tolerance the page itself applies (mlexp.evidence.seedtable: within it, the
stored runs stay current) and the largest standard deviation between the stored seeds. Under
the float32 rule (mlexp.training.precision) a GPU run is the same kind as the CPU's, so no
separate GPU seed data is made; the runs are written to --out for the record.

    PYTHONPATH=. MLEXP_DATA=../shared/data python benchmarks/gpu_chapters.py --out gpu.json

Prints one line per chapter: device, run time, the stored CPU run's time, drift, whether it
reproduces the stored run, and the seeds' spread.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mlexp.evidence import seedruns, seedstats  # noqa: E402
from mlexp.evidence.seedtable import (  # noqa: E402
    REPRODUCTION_TOLERANCE,
    machine_of,
)


def chapters() -> list[pathlib.Path]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [c["file"] for part in toc.get("parts", []) for c in part["chapters"]]
    return [ROOT / "book" / f"{f}.ipynb" for f in files if (ROOT / "book" / f"{f}.ipynb").is_file()]


def seed_keys(stored: list[dict]) -> list[str]:
    """The numbers the chapter's seed table compares, as its seed runs recorded them."""
    rows = stored[0]["provenance"].get("rows")
    if not rows:
        raise ValueError("the stored runs predate recording the seed table's rows; rerun them")
    return list(rows.values())


def compare(notebook: pathlib.Path, run: dict) -> dict:
    data = seedruns.data_path(notebook)
    stored = json.loads(data.read_text())["runs"] if data.is_file() else []
    kind = machine_of(run).get("kind")
    own = [r for r in stored if machine_of(r).get("kind") == kind]
    before = next((r for r in own if r["offset"] == 0), None)
    row = {
        "chapter": notebook.stem,
        "machine": machine_of(run),
        "run_seconds": run["provenance"]["run_seconds"],
        "stored_machine": machine_of(before).get("name") if before else None,
        "stored_run_seconds": before["provenance"].get("run_seconds") if before else None,
    }
    if before is not None:
        keys = [k for k in seed_keys(own) if k in run["values"]]
        values = {r["offset"]: {k: float(r["values"][k]) for k in keys} for r in own}
        drift, drift_key = seedstats.largest_drift(run["values"], before["values"], keys)
        spread, spread_key = seedstats.largest_spread(values, keys)
        row.update(drift=drift, drift_key=drift_key, spread=spread, spread_key=spread_key,
                   within_spread=drift <= spread, reproduces=drift <= REPRODUCTION_TOLERANCE)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("gpu_chapters.json"))
    parser.add_argument("--chapters", nargs="*", type=pathlib.Path, default=None)
    args = parser.parse_args(argv)
    rows, runs = [], {}
    for notebook in args.chapters or chapters():
        (run,) = seedruns.run_offsets(notebook, [0])
        runs[notebook.stem] = run
        row = compare(notebook, run)
        rows.append(row)
        drift = (f"drift {row['drift']:.3f} ({row['drift_key']}), "
                 f"{'reproduces' if row['reproduces'] else 'does not reproduce'} "
                 f"(tolerance {REPRODUCTION_TOLERANCE}); spread {row['spread']:.3f}"
                 if "drift" in row else "no stored run of this kind")
        print(f"{row['chapter']}: {row['machine'].get('name')}, {row['run_seconds']:.0f} s "
              f"(stored: {row['stored_run_seconds']} s on {row['stored_machine']}); {drift}",
              flush=True)
    args.out.write_text(json.dumps({"chapters": rows, "runs": runs}, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
