"""Chapter 1's claim checks and seed table, run on small fixtures instead of a full training run."""

import json
import pathlib

import pytest

import mlexp
from mlexp import seedruns
from mlexp.seedstats import ClaimContradicted

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "book/part1/chapter01.ipynb"
VARIANTS = ["full model", "no position", "no attention", "no feed-forward", "no normalization", "no residual"]
TYPICAL = [1.74, 2.07, 2.49, 1.85, 1.72, 3.35]  # a run in which every claim holds


def cell_with(marker: str) -> str:
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    (source,) = ["".join(c["source"]) for c in cells if c["cell_type"] == "code" and marker in "".join(c["source"])]
    return source


def run_seed_section(tmp_path, monkeypatch, this_run: list[float], stored: dict[int, list[float]]) -> dict:
    """Execute the chapter's seed-section cell with this run's ablation and stored seed runs."""
    keys_cell = cell_with("ABLATION_KEYS = {")
    namespace = {"mlexp": mlexp, "ablation": dict(zip(VARIANTS, this_run)), "sys": __import__("sys")}
    # Only the definitions of ABLATION_KEYS and PART are needed from the ablation cell.
    definitions = keys_cell.split("for name, key in ABLATION_KEYS.items():")[0]
    exec(definitions, namespace)
    runs = [{"offset": k, "values": {namespace["ABLATION_KEYS"][v]: x for v, x in zip(VARIANTS, values)}}
            for k, values in stored.items()]
    seedruns.write_atomic(tmp_path / "chapter01.seeds.json", {"notebook": "chapter01.ipynb", "runs": runs})
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLEXP_SEED_RUN", raising=False)
    glued = {}
    monkeypatch.setattr(mlexp, "glue_md", lambda name, text: glued.__setitem__(name, text))
    exec(cell_with("seedstats.check_claim"), namespace)
    return glued


def test_claims_hold_and_the_table_is_built(tmp_path, monkeypatch):
    stored = {0: TYPICAL, 1: [1.80, 2.08, 2.49, 1.88, 1.76, 3.36], 2: [1.76, 2.08, 2.49, 1.84, 1.73, 3.36]}
    glued = run_seed_section(tmp_path, monkeypatch, TYPICAL, stored)
    table = glued["seed_table"].splitlines()
    assert len(table) == 2 + 6 and table[2].startswith("| full model | 1.740 | 1.767 ± 0.031 | 1.740 / 1.800 / 1.760 |")
    assert "stale" not in glued["seed_table"]
    assert "held in all 3 seeds" in glued["seed_summary"] and "in 3 of 3 seeds" in glued["seed_summary"]


def test_stale_seed_data_is_flagged(tmp_path, monkeypatch):
    stored = {0: [1.745] + TYPICAL[1:], 1: TYPICAL, 2: TYPICAL}  # another machine: off by 0.005
    glued = run_seed_section(tmp_path, monkeypatch, TYPICAL, stored)
    assert "stale-seed-data" in glued["seed_table"] and "abl_full" in glued["seed_table"]


def test_a_flipped_ranking_is_reported(tmp_path, monkeypatch):
    flipped = [1.74, 1.84, 2.49, 1.86, 1.72, 3.35]  # feed-forward now costs more than position
    glued = run_seed_section(tmp_path, monkeypatch, TYPICAL, {0: TYPICAL, 1: flipped, 2: TYPICAL})
    assert "did not hold" in glued["seed_summary"] and "no position and no feed-forward swapped" in glued["seed_summary"]


@pytest.mark.parametrize("variant, value, claim", [
    ("no normalization", 1.90, "removing normalization does not hurt at this size"),
    ("no attention", 3.50, "removing the residual path is by far the most damaging change"),
    ("no position", 1.70, "removing RoPE hurts, but less than removing attention"),
])
def test_a_contradicted_claim_fails_the_build(tmp_path, monkeypatch, variant, value, claim):
    bad = list(TYPICAL)
    bad[VARIANTS.index(variant)] = value
    with pytest.raises(ClaimContradicted, match=claim):
        run_seed_section(tmp_path, monkeypatch, TYPICAL, {0: TYPICAL, 1: TYPICAL, 2: bad})
