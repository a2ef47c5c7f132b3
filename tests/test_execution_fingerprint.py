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
    monkeypatch.setattr(fingerprint_ext, "fingerprint", lambda: "code-v1")
    fingerprint_ext.reset_stale_cache(fake_app(cache))
    (cache / "executed-notebook").write_text("outputs")
    fingerprint_ext.reset_stale_cache(fake_app(cache))
    assert (cache / "executed-notebook").exists(), "same code: the cache must survive"
    monkeypatch.setattr(fingerprint_ext, "fingerprint", lambda: "code-v2")
    fingerprint_ext.reset_stale_cache(fake_app(cache))
    assert not (cache / "executed-notebook").exists(), "mlexp changed: the cache must be emptied"
    assert (cache / fingerprint_ext.STAMP).read_text().strip() == "code-v2"


def test_fingerprint_covers_the_stored_seed_runs(monkeypatch, tmp_path):
    """A refreshed seed data file must re-execute its chapter: the seed table reads it."""
    (tmp_path / "mlexp").mkdir()
    (tmp_path / "mlexp" / "a.py").write_text("x = 1\n")
    (tmp_path / "requirements.txt").write_text("torch\n")
    seeds = tmp_path / "book" / "part1" / "chapter01.seeds.json"
    seeds.parent.mkdir(parents=True)
    seeds.write_text('{"runs": []}')
    monkeypatch.setattr(fingerprint_ext, "ROOT", tmp_path)
    before = fingerprint_ext.fingerprint()
    seeds.write_text('{"runs": [{"offset": 0}]}')
    assert fingerprint_ext.fingerprint() != before
