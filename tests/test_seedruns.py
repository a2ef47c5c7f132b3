"""Seed runs: harvesting glued values, merging, spread, rankings, stale data and claims."""

import json
import pathlib

import nbformat
import pytest

from mlexp.evidence import seedruns, seedstats


def glued_notebook(values: dict) -> nbformat.NotebookNode:
    """An executed notebook as myst-nb leaves it: glue outputs carry a scrapbook name."""
    prefix = "application/papermill.record/"
    outputs = [nbformat.v4.new_output("stream", name="stdout", text="training...\n")]
    for name, value in values.items():
        if isinstance(value, str):
            data = {prefix + "text/markdown": value, prefix + "text/plain": "<IPython.core.display.Markdown object>"}
        else:
            data = {prefix + "text/plain": repr(value)}
        outputs.append(nbformat.v4.new_output("display_data", data=data, metadata={"scrapbook": {"name": name, "mime_prefix": prefix}}))
    figure = nbformat.v4.new_output(
        "display_data", data={prefix + "text/plain": "<Figure size 640x360 with 1 Axes>", prefix + "image/png": "iVBOR"},
        metadata={"scrapbook": {"name": "loss_figure", "mime_prefix": prefix}})
    cell = nbformat.v4.new_code_cell("glue(...)", outputs=outputs + [figure])
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Title"), cell])


def test_harvest_reads_numbers_and_markdown_and_skips_figures():
    nb = glued_notebook({"abl_full": 1.7384, "params_lm": 803712, "device_name": "CPU (2 threads)"})
    assert seedruns.harvest_glue(nb) == {"abl_full": 1.7384, "params_lm": 803712, "device_name": "CPU (2 threads)"}


def test_merge_orders_offsets_and_refuses_duplicates(tmp_path):
    for k in (2, 0, 1):
        seedruns.write_atomic(tmp_path / f"seed-{k}.json", {"notebook": "ch.ipynb", "runs": [{"offset": k, "values": {"x": k}}]})
    merged = seedruns.merge(sorted(tmp_path.glob("seed-*.json")))
    assert [r["offset"] for r in merged["runs"]] == [0, 1, 2] and merged["notebook"] == "ch.ipynb"
    with pytest.raises(ValueError, match="offset 1 appears twice"):
        seedruns.merge([tmp_path / "seed-1.json", tmp_path / "seed-1.json"])


def test_write_atomic_leaves_no_partial_file(tmp_path):
    target = tmp_path / "data.json"
    seedruns.write_atomic(target, {"runs": []})
    with pytest.raises(TypeError):
        seedruns.write_atomic(target, {"runs": [object()]})  # not JSON: fails half-way through
    assert json.loads(target.read_text()) == {"runs": []}
    assert [p.name for p in tmp_path.iterdir()] == ["data.json"]


def test_a_chapter_without_seed_section_is_refused(tmp_path, capsys):
    silent = tmp_path / "silent.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), silent)
    assert seedruns.main(["run", str(silent), "--offsets", "0"]) == 1
    assert "glued no 'seed_provenance'" in capsys.readouterr().err
    assert not seedruns.data_path(silent).exists()


def test_failed_run_writes_nothing(tmp_path):
    broken = tmp_path / "broken.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("raise RuntimeError('boom')")]), broken)
    assert seedruns.main(["run", str(broken), "--offsets", "0"]) == 1
    assert not seedruns.data_path(broken).exists()


# A small fixture: three seeds of an ablation, losses by variant.
RUNS = {
    0: {"full": 1.74, "no_norm": 1.72, "no_pos": 2.07, "no_attn": 2.49, "no_res": 3.35},
    1: {"full": 1.80, "no_norm": 1.76, "no_pos": 2.08, "no_attn": 2.49, "no_res": 3.36},
    2: {"full": 1.76, "no_norm": 1.73, "no_pos": 2.09, "no_attn": 2.50, "no_res": 3.36},
}


def test_mean_and_sample_sd():
    mean, sd = seedstats.mean_sd([RUNS[k]["full"] for k in RUNS])
    assert mean == pytest.approx(1.7666667) and sd == pytest.approx(0.0305505, rel=1e-5)
    assert seedstats.mean_sd([2.0]) == (2.0, 0.0)


def test_ranking_held_and_flipped():
    keys = ["full", "no_pos", "no_attn", "no_res"]
    assert seedstats.ranking(RUNS[0], keys) == ["no_res", "no_attn", "no_pos", "full"]
    assert seedstats.flipped_pairs(RUNS, keys) == []
    flipped = {**RUNS, 3: {**RUNS[2], "no_pos": 2.60}}  # position overtakes attention in one seed
    assert seedstats.flipped_pairs(flipped, keys) == [("no_pos", "no_attn")]


def test_lower_in_every_run():
    assert seedstats.lower_in_every_run(RUNS, "no_norm", "full")
    assert not seedstats.lower_in_every_run({**RUNS, 3: {"no_norm": 1.9, "full": 1.8}}, "no_norm", "full")


def test_drift_and_spread():
    keys = ["full", "no_norm"]
    assert seedstats.largest_drift(RUNS[0], RUNS[0], keys) == (0.0, "no_norm")
    drift, key = seedstats.largest_drift({**RUNS[0], "full": 1.746}, RUNS[0], keys)
    assert key == "full" and drift == pytest.approx(0.006)
    spread, key = seedstats.largest_spread(RUNS, keys)
    assert key == "full" and spread == pytest.approx(0.0305505, rel=1e-5)


def test_contradicted_claim_fails_and_names_itself():
    seedstats.check_claim("removing the residual path hurts most",
                          lambda v: seedstats.ranking(v, list(v))[0] == "no_res", RUNS)
    with pytest.raises(seedstats.ClaimContradicted, match="'removing normalization hurts'.*\\[0, 1, 2\\]"):
        seedstats.check_claim("removing normalization hurts", lambda v: v["no_norm"] > v["full"], RUNS)


def test_load_seed_data_reads_the_local_file(tmp_path, monkeypatch):
    data = {"runs": [{"offset": 1, "values": {"x": 2.0}}]}
    seedruns.write_atomic(tmp_path / "ch.seeds.json", data)
    monkeypatch.chdir(tmp_path)
    assert seedstats.load_seed_data("ch.seeds.json", "book/ch.seeds.json") == data


def run_of(kind, offset, x):
    return {"offset": offset, "values": {"x": x}, "provenance": {"machine": {"kind": kind}}}


def test_merge_keeps_other_kinds_and_replaces_the_same_kind(tmp_path):
    chapter = tmp_path / "ch.seeds.json"
    seedruns.write_atomic(chapter, {"notebook": "ch.ipynb", "runs": [run_of("fp32", k, k) for k in (0, 1, 2)]})
    seedruns.write_atomic(tmp_path / "gpu-0.json", {"notebook": "ch.ipynb", "runs": [run_of("cuda-bf16", 0, 9)]})
    seedruns.write_atomic(tmp_path / "cpu-1.json", {"notebook": "ch.ipynb", "runs": [run_of("fp32", 1, 7)]})
    merged = seedruns.merge([tmp_path / "gpu-0.json", tmp_path / "cpu-1.json"], into=chapter)
    assert [(seedruns.run_kind(r), r["offset"], r["values"]["x"]) for r in merged["runs"]] == [
        ("cuda-bf16", 0, 9), ("fp32", 0, 0), ("fp32", 1, 7), ("fp32", 2, 2)]


def test_a_run_stores_its_fingerprint_and_machine(tmp_path):
    """The runner keeps the machine the chapter's kernel described (a dict with its kind),
    not a name of its own, and merges by kind and offset."""
    recorded = {"fingerprint": {"code": "c", "mlexp": "m", "corpus": "k", "torch": "t"},
                "machine": {"kind": "fp32", "name": "a CPU", "capability": "AVX2", "threads": 2}}
    source = ("import json\nfrom myst_nb import glue\n"
              f"glue('seed_provenance', json.dumps({recorded!r}), display=False)\n"
              "glue('abl_full', 1.74, display=False)")
    chapter = tmp_path / "chapter.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)]), chapter)
    assert seedruns.main(["run", str(chapter), "--offsets", "0"]) == 0
    (run,) = json.loads(seedruns.data_path(chapter).read_text())["runs"]
    assert run["values"] == {"abl_full": 1.74}
    assert run["provenance"]["machine"] == recorded["machine"]
    assert run["provenance"]["fingerprint"] == recorded["fingerprint"]
    assert seedruns.run_kind(run) == "fp32"


def test_the_build_run_is_stored_as_offset_0(tmp_path):
    """The book build already ran the chapter with seed offset 0: harvest stores that run
    instead of making it again, keeping the chapter's other offsets."""
    from nbclient import NotebookClient

    recorded = {"fingerprint": {"code": "c", "mlexp": "m", "corpus": "k", "torch": "t"},
                "machine": {"kind": "fp32", "name": "a CPU", "capability": "AVX2", "threads": 2},
                "rows": {"full model": "abl_full"}, "claims": []}
    source = ("import json\nfrom myst_nb import glue\n"
              f"glue('seed_provenance', json.dumps({recorded!r}), display=False)\n"
              "glue('abl_full', 1.74, display=False)\nglue('hands_on_minutes', 6.5, display=False)")
    chapter = tmp_path / "chapter.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)]), chapter)
    seedruns.write_atomic(seedruns.data_path(chapter), {"notebook": chapter.name, "runs": [
        run_of("fp32", 0, 9), run_of("fp32", 1, 7)]})
    executed = nbformat.read(chapter, as_version=4)
    NotebookClient(executed, kernel_name="python3").execute()
    nbformat.write(executed, tmp_path / "executed.ipynb")
    assert seedruns.main(["harvest", str(tmp_path / "executed.ipynb"), "--notebook", str(chapter)]) == 0
    runs = json.loads(seedruns.data_path(chapter).read_text())["runs"]
    assert [(r["offset"], r["values"].get("abl_full", r["values"].get("x"))) for r in runs] == [(0, 1.74), (1, 7)]
    assert runs[0]["provenance"]["run_seconds"] == 390.0
    assert runs[0]["provenance"]["rows"] == {"full model": "abl_full"}
    with pytest.raises(ValueError, match="hands_on_minutes"):
        seedruns.harvest_build(chapter, chapter)  # the source, not what the build executed


def test_harvest_reads_the_glue_file_myst_nb_writes_beside_the_executed_notebook(tmp_path):
    """The build's executed copy keeps no glue outputs: myst-nb writes them to <name>.glue.json."""
    recorded = {"fingerprint": {"code": "c", "mlexp": "m", "corpus": "k", "torch": "t"},
                "machine": {"kind": "fp32", "name": "a CPU"}, "rows": {}, "claims": []}

    def glued(name, value):
        return {"output_type": "display_data", "data": {"text/plain": repr(value)},
                "metadata": {"scrapbook": {"name": name, "mime_prefix": "application/papermill.record/"}}}

    executed = tmp_path / "chapter.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")]), executed)
    (tmp_path / "chapter.glue.json").write_text(json.dumps({
        "seed_provenance": glued("seed_provenance", json.dumps(recorded)),
        "abl_full": glued("abl_full", 1.74), "hands_on_minutes": glued("hands_on_minutes", 2.0)}))
    run = seedruns.harvest_build(executed, executed)
    assert run["offset"] == 0 and run["values"]["abl_full"] == 1.74
    assert run["provenance"]["run_seconds"] == 120.0 and run["provenance"]["machine"]["name"] == "a CPU"


def chapter_gluing(tmp_path, seed_values: dict | None) -> pathlib.Path:
    """A chapter whose seed table has two rows, of which it glues only ``a`` on its own; ``b``
    it computes in its seed cell, as Chapter 6 does for its outcome codes."""
    recorded = {"fingerprint": {"code": "c", "mlexp": "m", "corpus": "k", "torch": "t"},
                "machine": {"kind": "fp32", "name": "a CPU"}, "rows": {"A": "a", "B": "b"}, "claims": []}
    source = ("import json\nfrom myst_nb import glue\n"
              f"glue('seed_provenance', json.dumps({recorded!r}), display=False)\n"
              "glue('a', 1.5, display=False)\n")
    if seed_values is not None:
        source += f"glue('seed_values', json.dumps({seed_values!r}), display=False)\n"
    chapter = tmp_path / "chapter.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)]), chapter)
    return chapter


def test_a_row_computed_in_the_seed_cell_is_stored(tmp_path):
    chapter = chapter_gluing(tmp_path, {"a": 1.5, "b": 2.0})
    assert seedruns.main(["run", str(chapter), "--offsets", "1"]) == 0
    (run,) = json.loads(seedruns.data_path(chapter).read_text())["runs"]
    assert run["values"]["a"] == 1.5 and run["values"]["b"] == 2.0
    assert "seed_values" not in run["values"]


def test_a_run_lacking_a_rows_value_is_refused_and_stores_nothing(tmp_path, capsys):
    """Stored without row b, the run could never fill the table: the build would call every
    stored run stale. The runner says so instead of writing it."""
    chapter = chapter_gluing(tmp_path, None)
    assert seedruns.main(["run", str(chapter), "--offsets", "1"]) == 1
    assert "no value for the seed table's rows ['b']" in capsys.readouterr().err
    assert not seedruns.data_path(chapter).exists()
