"""benchmarks/gpu_chapters.py compares a GPU run with the stored CPU runs the way the page does."""

import importlib.util
import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gpu_chapters", ROOT / "benchmarks" / "gpu_chapters.py")
gpu_chapters = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_chapters)


def run(offset, full, other, name="a CPU", rows=True):
    provenance = {"machine": {"kind": "fp32", "name": name}, "run_seconds": 300.0}
    if rows:
        provenance["rows"] = {"full model": "abl_full", "no position": "abl_no_position"}
    # rope_dot_d5 varies wildly between seeds but is not a row of the table: it must not count.
    values = {"abl_full": full, "abl_no_position": other, "rope_dot_d5": 3.0 * offset}
    return {"offset": offset, "values": values, "provenance": provenance}


def test_drift_and_spread_cover_only_the_seed_tables_rows(tmp_path):
    notebook = tmp_path / "chapter.ipynb"
    notebook.write_text("{}")
    stored = [run(0, 1.74, 2.07), run(1, 1.80, 2.08), run(2, 1.76, 2.07)]
    (tmp_path / "chapter.seeds.json").write_text(json.dumps({"notebook": notebook.name, "runs": stored}))
    row = gpu_chapters.compare(notebook, run(0, 1.75, 2.05, name="NVIDIA H200"))
    assert row["drift"] == pytest.approx(0.02) and row["drift_key"] == "abl_no_position"
    assert row["spread_key"] == "abl_full" and row["spread"] == pytest.approx(0.0306, abs=1e-4)
    assert row["within_spread"] and row["stored_machine"] == "a CPU"
    # 0.02 is inside the seeds' spread but not a reproduction: the page would call it stale
    assert not row["reproduces"]
    row = gpu_chapters.compare(notebook, run(0, 1.745, 2.074, name="NVIDIA H200"))
    assert row["reproduces"] and row["drift"] == pytest.approx(0.005)


def test_runs_without_recorded_rows_are_refused(tmp_path):
    notebook = tmp_path / "chapter.ipynb"
    notebook.write_text("{}")
    stored = [run(0, 1.74, 2.07, rows=False)]
    (tmp_path / "chapter.seeds.json").write_text(json.dumps({"notebook": notebook.name, "runs": stored}))
    with pytest.raises(ValueError, match="rerun them"):
        gpu_chapters.compare(notebook, run(0, 1.75, 2.05))
