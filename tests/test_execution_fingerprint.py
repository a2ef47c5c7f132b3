"""The build's execution cache is emptied when mlexp, the corpus or the requirements change."""

import importlib.util
import pathlib
import types

ROOT = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("execution_fingerprint", ROOT / "book/_ext/execution_fingerprint.py")
fingerprint_ext = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fingerprint_ext)


def fake_app(cache: pathlib.Path):
    config = types.SimpleNamespace(nb_execution_mode="cache", nb_execution_cache_path=str(cache))
    return types.SimpleNamespace(config=config, outdir=str(cache.parent / "html"))


def test_fingerprint_covers_library_corpus_and_requirements(monkeypatch, tmp_path):
    first = fingerprint_ext.fingerprint()
    assert first == fingerprint_ext.fingerprint()
    data = tmp_path / "data"
    data.mkdir()
    (data / "tinyshakespeare.txt").write_text("not the corpus")
    monkeypatch.setenv("MLEXP_DATA", str(data))
    monkeypatch.setattr("mlexp.data._verify", lambda path, sha256: None)
    assert fingerprint_ext.fingerprint() != first  # another corpus, another fingerprint


def test_cache_is_kept_for_the_same_code_and_cleared_when_it_changes(monkeypatch, tmp_path):
    cache = tmp_path / ".jupyter_cache"
    monkeypatch.setattr(fingerprint_ext, "seed_data_fingerprints", lambda: {})
    monkeypatch.setattr(fingerprint_ext, "fingerprint", lambda: "code-v1")
    fingerprint_ext.reset_stale_cache(fake_app(cache))
    (cache / "executed-notebook").write_text("outputs")
    fingerprint_ext.reset_stale_cache(fake_app(cache))
    assert (cache / "executed-notebook").exists(), "same code: the cache must survive"
    monkeypatch.setattr(fingerprint_ext, "fingerprint", lambda: "code-v2")
    fingerprint_ext.reset_stale_cache(fake_app(cache))
    assert not (cache / "executed-notebook").exists(), "mlexp changed: the cache must be emptied"


def test_new_seed_data_reruns_only_its_chapter(monkeypatch, tmp_path):
    """A chapter's seed table reads its seed data: new data runs that chapter again, not the others."""
    import nbformat
    from jupyter_cache import get_cache

    cache_dir = tmp_path / ".jupyter_cache"
    monkeypatch.setattr(fingerprint_ext, "fingerprint", lambda: "code-v1")
    data = {str(tmp_path / "chapter01.ipynb"): "seeds-a", str(tmp_path / "chapter02.ipynb"): "seeds-a"}
    monkeypatch.setattr(fingerprint_ext, "seed_data_fingerprints", lambda: dict(data))
    fingerprint_ext.reset_stale_cache(fake_app(cache_dir))  # the first build writes the stamp
    notebooks = {}
    for name in ("chapter01", "chapter02"):
        path = tmp_path / f"{name}.ipynb"
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"print('{name}')")])
        nbformat.write(nb, path)
        notebooks[name] = str(path)
        get_cache(cache_dir).cache_notebook_bundle(
            __import__("jupyter_cache.base", fromlist=["CacheBundleIn"]).CacheBundleIn(nb, str(path)),
            check_validity=False)
    fingerprint_ext.reset_stale_cache(fake_app(cache_dir))
    assert len(get_cache(cache_dir).list_cache_records()) == 2
    data[notebooks["chapter02"]] = "seeds-b"
    fingerprint_ext.reset_stale_cache(fake_app(cache_dir))
    left = {r.uri for r in get_cache(cache_dir).list_cache_records()}
    assert left == {notebooks["chapter01"]}


def test_seed_data_fingerprints_follow_each_chapters_file(monkeypatch, tmp_path):
    seeds = tmp_path / "book" / "part1" / "chapter01.seeds.json"
    seeds.parent.mkdir(parents=True)
    seeds.write_text('{"runs": []}')
    monkeypatch.setattr(fingerprint_ext, "ROOT", tmp_path)
    before = fingerprint_ext.seed_data_fingerprints()
    assert list(before) == [str(seeds.with_name("chapter01.ipynb"))]
    seeds.write_text('{"runs": [{"offset": 0}]}')
    assert fingerprint_ext.seed_data_fingerprints() != before
