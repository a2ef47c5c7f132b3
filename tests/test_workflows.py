"""The GitHub Actions workflows keep to the project's rules (fast; reads YAML only).

- every workflow parses;
- every action is pinned to a full commit SHA with a version comment (local ./ actions aside);
- every job has a timeout;
- the workflow token is read-only by default: only the Pages deploy job (pages, id-token)
  and the seed-runs merge job (contents, pull-requests) may write;
- no run: script writes an untrusted expression into the shell (inputs go through env:);
- the weekly cold build restores no execution cache, names no cache folder and ignores the
  execution record (MLEXP_COLD_BUILD=1).
"""

from __future__ import annotations

import pathlib
import re

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))

# (workflow file, job id) -> the write scopes that job may have.
ALLOWED_WRITES = {
    ("pages.yml", "deploy"): {"pages", "id-token"},
    ("seed-runs.yml", "merge"): {"contents", "pull-requests"},
}
SHA = re.compile(r"^[0-9a-f]{40}$")
USES_LINE = re.compile(r"^\s*(?:-\s*)?uses:\s*(?P<ref>\S+)(?P<rest>.*)$")
VERSION_COMMENT = re.compile(r"#\s*v\d+(\.\d+)*\s*$")
# Expressions that someone other than a maintainer can set, or that dispatch inputs carry.
UNTRUSTED_IN_RUN = re.compile(r"\$\{\{\s*(inputs\.|github\.event\.|github\.head_ref)")


def load(path: pathlib.Path) -> dict:
    doc = yaml.safe_load(path.read_text())
    # YAML 1.1 reads the key `on` as True.
    if True in doc:
        doc["on"] = doc.pop(True)
    return doc


def ids(paths):
    return [p.name for p in paths]


def test_the_workflows_exist():
    assert {p.name for p in WORKFLOWS} >= {"test.yml", "pages.yml", "seed-runs.yml", "cold-build.yml"}


@pytest.mark.parametrize("path", WORKFLOWS, ids=ids(WORKFLOWS))
def test_workflow_parses(path):
    doc = load(path)
    assert isinstance(doc, dict)
    assert doc.get("on"), f"{path.name}: no triggers"
    assert isinstance(doc.get("jobs"), dict) and doc["jobs"], f"{path.name}: no jobs"


def steps_of(doc):
    for job_id, job in doc["jobs"].items():
        for step in job.get("steps", []):
            yield job_id, step


@pytest.mark.parametrize("path", WORKFLOWS, ids=ids(WORKFLOWS))
def test_actions_are_pinned_to_a_commit_sha(path):
    doc = load(path)
    uses = [(job_id, step["uses"]) for job_id, step in steps_of(doc) if "uses" in step]
    uses += [(job_id, job["uses"]) for job_id, job in doc["jobs"].items() if "uses" in job]  # reusable workflows
    for job_id, ref in uses:
        if ref.startswith("./"):
            continue
        name, _, version = ref.partition("@")
        assert SHA.match(version), f"{path.name} job {job_id}: {ref} is not pinned to a 40-character commit SHA"
    # The line also names the version the SHA stands for, for readers and Dependabot.
    for line in path.read_text().splitlines():
        m = USES_LINE.match(line)
        if m and not m["ref"].startswith("./"):
            assert VERSION_COMMENT.search(m["rest"]), f"{path.name}: no '# vX.Y.Z' comment on: {line.strip()}"


@pytest.mark.parametrize("path", WORKFLOWS, ids=ids(WORKFLOWS))
def test_every_job_has_a_timeout(path):
    for job_id, job in load(path)["jobs"].items():
        if "uses" in job:  # a reusable workflow sets its own
            continue
        assert "timeout-minutes" in job, f"{path.name} job {job_id}: no timeout-minutes"


def write_scopes(permissions) -> set[str]:
    if permissions in (None, {}, "read-all"):
        return set()
    if permissions == "write-all":
        return {"*"}
    assert isinstance(permissions, dict), f"unexpected permissions: {permissions!r}"
    return {scope for scope, level in permissions.items() if level == "write"}


@pytest.mark.parametrize("path", WORKFLOWS, ids=ids(WORKFLOWS))
def test_the_token_is_read_only_but_where_a_job_must_write(path):
    doc = load(path)
    assert "permissions" in doc, f"{path.name}: no top-level permissions (the default may be write-all)"
    assert not write_scopes(doc["permissions"]), f"{path.name}: top-level permissions grant write"
    for job_id, job in doc["jobs"].items():
        allowed = ALLOWED_WRITES.get((path.name, job_id), set())
        granted = write_scopes(job.get("permissions"))
        assert granted <= allowed, f"{path.name} job {job_id}: may not write {sorted(granted - allowed)}"


def test_the_jobs_that_must_write_can():
    for (name, job_id), scopes in ALLOWED_WRITES.items():
        job = load(ROOT / ".github" / "workflows" / name)["jobs"][job_id]
        assert write_scopes(job.get("permissions")) == scopes, f"{name} job {job_id}"


@pytest.mark.parametrize("path", WORKFLOWS, ids=ids(WORKFLOWS))
def test_no_untrusted_expression_in_a_script(path):
    for job_id, step in steps_of(load(path)):
        script = step.get("run", "")
        assert not UNTRUSTED_IN_RUN.search(script), (
            f"{path.name} job {job_id}, step {step.get('name', script[:40])!r}: "
            "pass inputs and event data through env:, not ${{ }} in the script"
        )


@pytest.mark.parametrize("path", WORKFLOWS, ids=ids(WORKFLOWS))
def test_checkouts_keep_no_credentials(path):
    for job_id, step in steps_of(load(path)):
        if step.get("uses", "").startswith("actions/checkout@"):
            assert (step.get("with") or {}).get("persist-credentials") is False, f"{path.name} job {job_id}"


def test_one_torch_version_everywhere():
    """The workflows and Binder install the same PyTorch, inside requirements.txt's range."""
    versions = {p.name: load(p).get("env", {}).get("TORCH_VERSION") for p in WORKFLOWS}
    assert len(set(versions.values())) == 1 and None not in versions.values(), versions
    version = versions["test.yml"]
    binder = (ROOT / "binder" / "requirements.txt").read_text().split()
    assert f"torch=={version}+cpu" in binder
    assert "../requirements.txt" in binder  # Binder reuses the book's own requirements


def test_the_cold_build_runs_weekly_from_scratch():
    """A cache must never hide a chapter that no longer runs from scratch: once a week (and by
    hand) the book is built with no execution cache, then tested."""
    path = ROOT / ".github" / "workflows" / "cold-build.yml"
    doc = load(path)
    assert [entry["cron"] for entry in doc["on"]["schedule"]], "no cron schedule"
    assert "workflow_dispatch" in doc["on"]
    steps = [step for _, step in steps_of(doc)]
    settings = [doc.get("env", {}), *(job.get("env", {}) for job in doc["jobs"].values()),
                *(step.get("env", {}) for step in steps), *(step.get("run", "") for step in steps)]
    named = [setting for setting in settings if "MLEXP_EXECUTION_CACHE" in str(setting)]
    assert not named, f"the cold build must name no cache folder: {named}"
    for step in steps:
        if step.get("uses", "").startswith("actions/cache@"):
            assert "jupyter" not in str(step["with"]["path"]) + step["with"]["key"], step["name"]
    scripts = [step.get("run", "") for step in steps]
    build = [i for i, run in enumerate(scripts) if "jupyter-book build book/ -W --keep-going" in run]
    tests = [i for i, run in enumerate(scripts) if run.strip() == "python -m pytest"]
    assert build and tests and build[0] < tests[0], "README command 1, then the tests"
    cold = [step.get("env", {}).get("MLEXP_COLD_BUILD") for step in steps
            if "jupyter-book build" in step.get("run", "")]
    assert cold == ["1"], "the cold build must ignore the execution record (MLEXP_COLD_BUILD=1)"
