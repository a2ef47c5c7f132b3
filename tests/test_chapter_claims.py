"""Chapter 1's seed section, run through the chapter's own cell on small fixtures.

Each fixture stands for a situation a build meets: the machine that made the seed runs,
another CPU whose last digits differ, a run that does not reproduce the stored one, changed
code that does or does not reproduce it, a GPU build with only CPU runs stored, and a run that
contradicts a claim.
"""

import json
import pathlib
import shutil

import pytest
import torch

import mlexp
from mlexp.evidence import provenance, seedruns, seedtable
from mlexp.evidence.seedstats import ClaimContradicted

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "book/part1/chapter01.ipynb"
VARIANTS = ["full model", "no position", "no attention", "no feed-forward", "no normalization", "no residual"]
TYPICAL = [1.74, 2.07, 2.49, 1.85, 1.72, 3.35]  # a run in which every claim holds
SEED_1 = [1.80, 2.08, 2.49, 1.88, 1.76, 3.36]
SEED_2 = [1.76, 2.08, 2.49, 1.84, 1.73, 3.36]
# The unigram and bigram losses of the training text's counts, on the validation windows.
BASELINES = {"unigram_loss": 3.347, "bigram_loss": 2.482}
# The ablation's training steps, which the seed summary names.
STEPS = {"ABLATION_STEPS": 150}
THIS_CPU = "Intel(R) Xeon(R) Platinum (AVX512)"
OTHER_CPU = "AMD EPYC 7763 64-Core Processor (AVX2)"


def cell_with(marker: str) -> str:
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    (source,) = ["".join(c["source"]) for c in cells if c["cell_type"] == "code" and marker in "".join(c["source"])]
    return source


def ablation_definitions() -> str:
    """The ablation glue cell's names (keys, parts), up to its first glue call."""
    return cell_with("ABLATION_KEYS = {").split('mlexp.glue("ablation_steps"')[0]


@pytest.fixture
def chapter_dir(tmp_path, monkeypatch):
    """A folder holding the chapter, as the build's kernel sees it, on a CPU named THIS_CPU."""
    shutil.copy(NOTEBOOK, tmp_path / NOTEBOOK.name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLEXP_SEED_RUN", raising=False)
    monkeypatch.delenv("MLEXP_SEED_OFFSET", raising=False)
    real_machine = provenance.machine
    monkeypatch.setattr(provenance, "machine", lambda device: {**real_machine(device), "name": THIS_CPU})
    return tmp_path


def stored_run(offset, values, machine_name=THIS_CPU, kind="fp32", **changes):
    """A stored run made with this build's fingerprint, except for ``changes``."""
    fingerprint = {**provenance.fingerprint(NOTEBOOK.name), **changes}
    machine = {"kind": kind, "name": machine_name, "capability": "AVX2", "threads": 2}
    keys = ["abl_full", "abl_no_position", "abl_no_attention", "abl_no_ffn", "abl_no_norm", "abl_no_residual"]
    return {"offset": offset, "values": {**dict(zip(keys, values)), **BASELINES},
            "provenance": {"fingerprint": fingerprint, "machine": machine}}


def run_seed_section(chapter_dir, monkeypatch, this_run: list[float], stored: list[dict]) -> dict:
    """Execute the chapter's seed-section cell with this run's ablation and stored seed runs."""
    namespace = {"mlexp": mlexp, "ablation": dict(zip(VARIANTS, this_run)), **BASELINES, **STEPS}
    # Only the definitions of ABLATION_KEYS and PART are needed from the ablation's glue cell.
    exec(ablation_definitions(), namespace)
    seedruns.write_atomic(chapter_dir / "chapter01.seeds.json", {"notebook": NOTEBOOK.name, "runs": stored})
    glued = {}
    monkeypatch.setattr(mlexp, "glue_md", lambda name, text: glued.__setitem__(name, text))
    # The assessment behind the table, which the evidence page words: which machines made the
    # runs, what changed since, which rows moved.
    assess = seedtable.assess
    monkeypatch.setattr(seedtable, "assess",
                        lambda *a, **kw: glued.setdefault("assessment", assess(*a, **kw)))
    exec(cell_with("mlexp.seed_section("), namespace)
    glued["rows"] = namespace["SEED_ROWS"]
    return glued


def moved(glued) -> str:
    """The rows that moved, as the evidence page names them."""
    return glued["assessment"].moved_rows({key: name for name, key in glued["rows"].items()})


def stale(note: str) -> bool:
    """The table says the claims rest on this page's run alone, and the build log is told."""
    return ":class: seed-table stale-seed-data" in note and "checked against this page's run alone" in note


def table_rows(markdown: str) -> list[list[str]]:
    rows = [line for line in markdown.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows[1:]]


def three_seeds(first=TYPICAL, **kw):
    return [stored_run(0, first, **kw), stored_run(1, SEED_1, **kw), stored_run(2, SEED_2, **kw)]


def test_same_machine_claims_hold_and_the_table_is_built(chapter_dir, monkeypatch):
    glued = run_seed_section(chapter_dir, monkeypatch, TYPICAL, three_seeds())
    rows = table_rows(glued["seed_table"])
    assert len(rows) == 13 and rows[0] == ["full model", "1.740", "1.767 ± 0.031", "1.740 / 1.800 / 1.760"]
    # The counting baselines, scored on each run's own evaluation windows.
    assert [r[0] for r in rows[6:8]] == ["unigram baseline", "bigram baseline"]
    # Below them, each removal's cost within each run, with that cost's own spread.
    assert [r[0] for r in rows[8:]] == [f"{v} − full model" for v in VARIANTS[1:]]
    assert rows[8] == ["no position − full model", "+0.330", "+0.310 ± 0.026", "+0.330 / +0.280 / +0.320"]
    assert "stale" not in glued["seed_table"] and "seed-drift" not in glued["seed_table"]
    # Under the table, one plain line: the seeds agree on every claim.
    caption = glued["seed_table"].splitlines()[0]
    assert caption.startswith("```{table} Seeds 0, 1 and 2, where seed 0 is this page's run: every claim")
    a = glued["assessment"]
    assert seedtable.machine_names(a.own) == THIS_CPU and not a.changed and a.drift[0] < 0.0005


def test_another_cpu_within_the_spread_is_no_warning(chapter_dir, monkeypatch):
    """Same code and data, seed runs made on another CPU whose digits differ by up to 0.006."""
    drifted = [1.745, 2.076, 2.487, 1.853, 1.714, 3.352]
    glued = run_seed_section(chapter_dir, monkeypatch, TYPICAL, three_seeds(first=drifted, machine_name=OTHER_CPU))
    note = glued["seed_table"]
    assert "warning" not in note and "stale" not in note
    assert OTHER_CPU not in note and "every claim this page checks holds" in note
    a = glued["assessment"]
    assert seedtable.machine_names(a.own) == OTHER_CPU and a.this_name == THIS_CPU
    assert round(a.drift[0], 3) == 0.006
    # One number per seed: this page's run is seed 0's entry, and the mean uses it.
    rows = table_rows(note)
    assert rows[4] == ["no normalization", "1.720", "1.737 ± 0.021", "1.720 / 1.760 / 1.730"]
    assert "1.714" not in note


def test_a_run_that_does_not_reproduce_makes_the_data_stale_naming_the_rows(chapter_dir, monkeypatch):
    far = [1.80, 2.10, 2.53, 1.90, 1.76, 3.36]  # 0.06 from this page: beyond the tolerance
    glued = run_seed_section(chapter_dir, monkeypatch, TYPICAL, three_seeds(first=far, machine_name=OTHER_CPU))
    note = glued["seed_table"]
    assert stale(note) and OTHER_CPU not in note
    assert "does not reproduce the stored run with seed offset 0" in glued["assessment"].stale_because[0]
    assert "full model moved by 0.060 (1.800 stored, 1.740 now)" in moved(glued)
    assert "no residual moved by" not in moved(glued)  # 0.010 is within the tolerance


@pytest.mark.parametrize("changed, words", [
    ({"code": "0" * 64}, "The chapter's code cells changed"),
    ({"mlexp": "0" * 64}, "The mlexp library changed"),
    ({"torch": "2.4.0"}, "The PyTorch version (2.4.0 then, " + torch.__version__ + " now) changed"),
    ({"code": "0" * 64, "mlexp": "0" * 64}, "The chapter's code cells and the mlexp library changed"),
])
def test_changed_code_that_reproduces_the_runs_keeps_them_current(chapter_dir, monkeypatch, changed, words):
    """The old rule called these stale on the hash alone; the numbers show the same experiment."""
    glued = run_seed_section(chapter_dir, monkeypatch, TYPICAL, three_seeds(**changed))
    note = glued["seed_table"]
    assert "stale" not in note
    sentence = f"{seedtable.in_words(glued['assessment'].changed)} changed"
    assert sentence[0].upper() + sentence[1:] == words and glued["assessment"].drift[0] < 0.0005


def test_changed_code_that_moves_the_numbers_is_stale(chapter_dir, monkeypatch):
    longer = [1.68, 2.02, 2.45, 1.80, 1.66, 3.34]  # what more training steps would give
    glued = run_seed_section(chapter_dir, monkeypatch, longer, three_seeds(code="0" * 64))
    note = glued["seed_table"]
    assert stale(note) and "no position moved by 0.050 (2.070 stored, 2.020 now)" in moved(glued)


def test_another_corpus_is_stale_whatever_the_numbers(chapter_dir, monkeypatch):
    glued = run_seed_section(chapter_dir, monkeypatch, TYPICAL, three_seeds(corpus="0" * 64))
    note = glued["seed_table"]
    assert stale(note) and "the corpus changed" in glued["assessment"].stale_because


def test_stale_runs_are_not_used_to_judge_claims(chapter_dir, monkeypatch):
    """Runs of another experiment may say anything; the claims are judged on this build alone then."""
    contradicting = [1.74, 1.70, 2.49, 1.85, 1.72, 3.35]
    stored = three_seeds(corpus="0" * 64)
    stored[2] = stored_run(2, contradicting, corpus="0" * 64)
    glued = run_seed_section(chapter_dir, monkeypatch, TYPICAL, stored)
    assert "stale-seed-data" in glued["seed_table"]


def on_gpu(monkeypatch, name="NVIDIA H200"):
    """This build runs on a GPU: float32 like the CPU (mlexp.training.precision), so the same kind."""
    monkeypatch.setattr(provenance, "machine",
                        lambda device: {"kind": "fp32", "name": name, "capability": "sm_90", "threads": 16})


def test_a_gpu_build_is_judged_against_the_cpu_runs(chapter_dir, monkeypatch):
    on_gpu(monkeypatch)
    drifted = [1.745, 2.076, 2.487, 1.853, 1.714, 3.352]  # within the seeds' spread
    glued = run_seed_section(chapter_dir, monkeypatch, drifted, three_seeds())
    note = glued["seed_table"]
    a = glued["assessment"]
    assert not stale(note) and seedtable.machine_names(a.own) == THIS_CPU and a.this_name == "NVIDIA H200"
    assert table_rows(note)[0] == ["full model", "1.745", "1.768 ± 0.028", "1.745 / 1.800 / 1.760"]


def test_a_gpu_build_far_from_the_cpu_runs_says_so(chapter_dir, monkeypatch):
    on_gpu(monkeypatch)
    far = [1.70, 2.10, 2.45, 1.83, 1.69, 3.34]  # every claim still true, 0.04 from seed 0
    glued = run_seed_section(chapter_dir, monkeypatch, far, three_seeds())
    note = glued["seed_table"]
    assert stale(note) and "full model moved by 0.040 (1.740 stored, 1.700 now)" in moved(glued)


def test_runs_of_another_kind_are_not_mixed_in(chapter_dir, monkeypatch):
    """Runs stored before the float32 rule under bfloat16 autocast are not compared."""
    on_gpu(monkeypatch)
    old_gpu_runs = three_seeds(kind="cuda-bf16", machine_name="NVIDIA A100")
    glued = run_seed_section(chapter_dir, monkeypatch, TYPICAL, old_gpu_runs)
    note = glued["seed_table"]
    assert "No seed runs of this kind of machine (float32) are stored yet" in note
    assert not glued["assessment"].own and "NVIDIA A100" not in note
    assert table_rows(note)[0] == ["full model", "1.740", "—", "1.740"]  # this page alone


def test_runs_stored_as_cpu_fp32_count_as_float32(chapter_dir, monkeypatch):
    glued = run_seed_section(chapter_dir, monkeypatch, TYPICAL, three_seeds(kind="cpu-fp32"))
    assert "warning" not in glued["seed_table"] and len(table_rows(glued["seed_table"])[0][3].split("/")) == 3


def test_a_notebook_opened_without_its_file_is_not_called_stale(chapter_dir, monkeypatch):
    """On Colab the kernel cannot read the notebook: its code hash is unknown, not changed."""
    real = provenance.fingerprint
    monkeypatch.setattr(provenance, "fingerprint", lambda nb: {**real(nb), "code": "unknown"})
    glued = run_seed_section(chapter_dir, monkeypatch, TYPICAL, three_seeds())
    assert "stale" not in glued["seed_table"]


def test_a_gpu_build_still_fails_on_its_own_contradiction(chapter_dir, monkeypatch):
    on_gpu(monkeypatch)
    wrong = [1.70, 1.69, 2.40, 1.83, 1.69, 3.30]  # no position below the full model
    with pytest.raises(ClaimContradicted, match="removing RoPE hurts"):
        run_seed_section(chapter_dir, monkeypatch, wrong, three_seeds())


def test_an_order_the_page_does_not_claim_may_differ_between_seeds(chapter_dir, monkeypatch):
    """The page claims no order between removing the feed-forward layers and removing the norms:
    a seed in which they swap places builds, and the table shows it."""
    flipped = [1.80, 2.07, 2.49, 1.805, 1.81, 3.35]  # normalization now costs more than feed-forward
    stored = three_seeds()
    stored[1] = stored_run(1, flipped)
    glued = run_seed_section(chapter_dir, monkeypatch, TYPICAL, stored)
    rows = {row[0]: row for row in table_rows(glued["seed_table"])}
    assert rows["no feed-forward"][3].split(" / ")[1] == "1.805"
    assert rows["no normalization"][3].split(" / ")[1] == "1.810"


def test_position_costing_less_than_feed_forward_fails_the_build(chapter_dir, monkeypatch):
    flipped = [1.74, 1.92, 2.49, 1.93, 1.72, 3.35]  # feed-forward now costs more than position
    stored = three_seeds()
    stored[1] = stored_run(1, flipped)
    with pytest.raises(ClaimContradicted, match="removing RoPE costs more than removing the FFN"):
        run_seed_section(chapter_dir, monkeypatch, TYPICAL, stored)


@pytest.mark.parametrize("variant, value, claim", [
    ("no normalization", 1.90, "removing normalization does not hurt at this size"),
    ("no attention", 3.50, "removing the residual path hurts by far the most"),
    ("no position", 1.70, "removing RoPE hurts, but less than removing attention"),
    ("no residual", 3.45, "without residuals the loss ends at the unigram baseline"),
    ("no attention", 2.60, "without attention the loss ends near the bigram baseline"),
    ("no feed-forward", 1.73, "removing the FFN hurts"),
])
def test_a_contradicted_claim_fails_the_build(chapter_dir, monkeypatch, variant, value, claim):
    bad = list(TYPICAL)
    bad[VARIANTS.index(variant)] = value
    stored = three_seeds()
    stored[2] = stored_run(2, bad)
    with pytest.raises(ClaimContradicted, match=claim):
        run_seed_section(chapter_dir, monkeypatch, TYPICAL, stored)


def test_a_seed_run_records_its_fingerprint_and_machine(chapter_dir, monkeypatch):
    monkeypatch.setenv("MLEXP_SEED_RUN", "1")
    glued = {}
    monkeypatch.setattr(mlexp.evidence.seedtable, "glue", lambda name, value: glued.__setitem__(name, value))
    namespace = {"mlexp": mlexp, "ablation": dict(zip(VARIANTS, TYPICAL)), **BASELINES, **STEPS}
    exec(ablation_definitions(), namespace)
    exec(cell_with("mlexp.seed_section("), namespace)
    recorded = json.loads(glued["seed_provenance"])
    assert set(recorded["fingerprint"]) == set(provenance.INGREDIENTS)
    assert recorded["fingerprint"]["code"] != "unknown" and recorded["machine"]["name"] == THIS_CPU
    # The table's rows and the claims go with the run, for tools outside the chapter.
    assert recorded["rows"] == namespace["SEED_ROWS"]
    assert set(namespace["ABLATION_KEYS"].items()) < set(recorded["rows"].items())
    assert recorded["claims"] == list(namespace["claims"])
    assert namespace["seeds"] is None  # a seed run builds no table and judges nothing


def test_a_chapter_without_seed_data_yet_shows_its_own_run(chapter_dir, monkeypatch):
    """A new chapter builds before its first seed runs: the page says so instead of failing."""
    def offline(*args, **kwargs):
        raise OSError("no network")

    monkeypatch.setattr("urllib.request.urlopen", offline)
    namespace = {"mlexp": mlexp, "ablation": dict(zip(VARIANTS, TYPICAL)), **BASELINES, **STEPS}
    exec(ablation_definitions(), namespace)
    glued = {}
    monkeypatch.setattr(mlexp, "glue_md", lambda name, text: glued.__setitem__(name, text))
    exec(cell_with("mlexp.seed_section("), namespace)
    assert "No seed runs of this kind of machine" in glued["seed_table"]
    assert table_rows(glued["seed_table"])[0] == ["full model", "1.740", "—", "1.740"]


def test_runs_made_before_a_row_was_added_are_stale_not_a_crash(chapter_dir, monkeypatch):
    """A chapter that adds a row to its seed table builds before its seeds are rerun."""
    stored = three_seeds()
    for run in stored:
        del run["values"]["abl_no_norm"]
    glued = run_seed_section(chapter_dir, monkeypatch, TYPICAL, stored)
    note = glued["seed_table"]
    assert stale(note) and "the rows of the seed table changed" in glued["assessment"].stale_because
    assert table_rows(note)[0] == ["full model", "1.740", "—", "1.740"]  # this page alone
