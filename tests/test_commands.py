"""The README's two commands are the ones CI, the workflows and the tests use, and
`jupyter-book build book/` works as typed, from the top-level configuration."""

import pathlib
import re

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILD = "jupyter-book build book/ -W --keep-going"
TEST = "python -m pytest"


def readme_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    return [b.strip() for b in blocks if "pip install -r requirements.txt" in b]


def test_the_readme_has_exactly_two_set_up_commands():
    build, test = readme_commands()
    assert build.endswith(BUILD) and test.endswith(TEST)
    for command in (build, test):
        assert command.startswith("pip install torch==2.13.0 && pip install -r requirements.txt && ")
    # test-only references come without their dependencies (mup's would pull torchvision)
    assert "pip install --no-deps -r requirements-test.txt && " in test
    workflow = (ROOT / ".github" / "workflows" / "test.yml").read_text()
    assert "pip install --no-deps -r requirements-test.txt" in workflow


def test_ci_and_the_workflows_run_the_readme_commands():
    ci = (ROOT / ".ci" / "run").read_text()
    assert BUILD in ci and TEST in ci
    for workflow in ("test.yml", "pages.yml"):
        text = (ROOT / ".github" / "workflows" / workflow).read_text()
        assert f"run: {BUILD}" in text, f"{workflow} does not build the way the README says"


def test_jupyter_book_finds_the_top_level_configuration_from_book():
    """`jupyter-book build book/` looks for book/_toc.yml, and up from book/ for _config.yml."""
    from jupyter_book.cli.main import find_config_path

    folder, found = find_config_path(ROOT / "book")
    assert found and folder == ROOT, "the top-level _config.yml is not found from book/"
    toc = ROOT / "book" / "_toc.yml"
    assert toc.resolve() == (ROOT / "_toc.yml").resolve(), "book/_toc.yml must lead to the top-level _toc.yml"
    assert yaml.safe_load(toc.read_text())["root"] == "intro"


def test_only_html_is_built_so_sphinx_figure_numbers_stay_off():
    """sphinx-jupyterbook-latex forces numfig on ("Fig. 1" before "Figure 1.1")."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["latex"]["use_jupyterbook_latex"] is False
    assert config["sphinx"]["config"]["numfig"] is False
