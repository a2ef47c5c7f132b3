"""Colab's path, without Colab: a reader opens a chapter from GitHub, its first cell installs
mlexp from the repository, and the seed section reads the stored runs over HTTP.

The stand-ins: a fresh virtual environment holding only PyTorch (Colab has it installed), the
repository's committed HEAD in place of GitHub (`git+file://`, so an uncommitted file is not
there, as it would not be on GitHub), a folder outside the checkout in place of /content, and a
local HTTP server in place of raw.githubusercontent.com. A package list that misses a
dependency, a module left out of the package, a data file missing from the repository or a
wrong URL in the first cell fails this test.
"""

import functools
import http.server
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import threading

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "book").glob("part*/chapter*.ipynb"))
TORCH = "torch==2.13.0"  # what the README installs first; Colab brings its own


def code_cells(notebook: pathlib.Path) -> list[str]:
    cells = json.loads(notebook.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def repository_url() -> str:
    return yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: p.stem)
def test_every_chapter_installs_mlexp_from_the_repository_on_colab(notebook):
    setup = code_cells(notebook)[0]
    assert f'"git+{repository_url()}"' in setup, f"{notebook.name}'s first cell installs from elsewhere"


@pytest.fixture(scope="module")
def raw_files():
    """A local server for the repository's raw files, as raw.githubusercontent.com serves main."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(ROOT))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


def test_a_chapter_runs_its_setup_and_seed_section_outside_the_checkout(tmp_path, raw_files):
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.skip("the checkout is not a git repository")
    venv = tmp_path / "colab-python"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "-q", TORCH], check=True)

    notebook = ROOT / "book/part1/chapter01.ipynb"
    cells = code_cells(notebook)
    setup = cells[0].replace(f"git+{repository_url()}", f"git+file://{ROOT}")
    glue_cell = next(c for c in cells if "ABLATION_KEYS = {" in c)
    seed_cell = next(c for c in cells if "mlexp.seed_section(" in c)
    stored = json.loads(notebook.with_suffix("").with_suffix(".seeds.json").read_text())
    seed_0 = min(stored["runs"], key=lambda r: r["offset"])["values"]  # this run's stand-in
    glue_defs = glue_cell.split('mlexp.glue("ablation_steps"')[0]
    script = setup + "\n" + textwrap.dedent(f"""\
        assert "site-packages" in mlexp.__file__, mlexp.__file__
        print("device:", device_name)
        # The seed section, with seed 0's stored numbers standing in for this run's.
        shown = {{}}
        mlexp.glue_md = lambda name, text: shown.__setitem__(name, text)
        values = {seed_0!r}
        namespace = {{"mlexp": mlexp, "unigram_loss": values["unigram_loss"],
                     "bigram_loss": values["bigram_loss"],
                     "ABLATION_STEPS": values["ablation_steps"]}}
        exec({glue_defs!r}, namespace)
        namespace["ablation"] = {{
            name: values[key] for name, key in namespace["ABLATION_KEYS"].items()
        }}
        exec({seed_cell!r}, namespace)
        print(shown["seed_table"])
        """)
    # /content/drive/notebook: the setup cell looks two folders up for a checkout.
    content = tmp_path / "content" / "drive" / "notebook"
    content.mkdir(parents=True)
    env = {
        **os.environ,
        "MLEXP_REPOSITORY_RAW": raw_files,
        "PYTHONPATH": "",
        "MPLBACKEND": "Agg",
    }
    env.pop("MLEXP_SEED_RUN", None)
    out = subprocess.run([python, "-c", script], cwd=content, env=env, capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "device: CPU (" in out.stdout and "float32" in out.stdout
    table = [line for line in out.stdout.splitlines() if line.startswith("| ")]
    assert len(table) > 2, out.stdout
    offsets = sorted(r["offset"] for r in stored["runs"])
    assert f"Seeds {' / '.join(map(str, offsets))}" in table[0], "the stored runs were not read"
    # The notebook file is not at hand on Colab: its code hash is unknown, never "changed".
    assert "the chapter's code cells" not in out.stdout
