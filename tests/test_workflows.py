"""Our GitHub workflows, the action and docs/ci.md's workflow, linted by actionlint (build tier: the
actionlint `hack/build-k8s.sh --only actionlint` builds; CI fails without it): syntax, expressions, job
needs and outputs, permissions, the inputs of known actions, shellcheck on every `run:` script. The
action's script itself is tests/test_action.py's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.harness.docblocks import CI_WORKFLOW, block
from tests.harness.paths import REPO
from tests.harness.tooling import lint_workflow

WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.y*ml"))
# How docs/ci.md names the action; in the lint, this repository's action.yml (`uses: ./`), so that
# actionlint checks each `with:` against the action's inputs.
PUBLISHED = "<owner>/fakeplugin@v0.2.0"


@pytest.mark.build
@pytest.mark.parametrize("workflow", WORKFLOWS, ids=[w.name for w in WORKFLOWS])
def test_the_workflow_passes_actionlint(workflow: Path) -> None:
    done = lint_workflow(workflow, REPO)
    assert done.returncode == 0, done.stdout + done.stderr


def project_with(tmp: Path, workflow: str) -> Path:
    """A project of this repository's action.yml and one workflow, as actionlint finds a project."""
    (tmp / ".git").mkdir()
    (tmp / ".github" / "workflows").mkdir(parents=True)
    shutil.copy(REPO / "action.yml", tmp / "action.yml")
    path = tmp / ".github" / "workflows" / "doc.yaml"
    path.write_text(workflow)
    return path


@pytest.mark.build
def test_the_workflow_of_docs_ci_passes_actionlint_with_the_actions_inputs(tmp_path: Path) -> None:
    text = block(CI_WORKFLOW).text
    assert text.count(f"uses: {PUBLISHED}") == 2
    path = project_with(tmp_path, text.replace(PUBLISHED, "./"))
    done = lint_workflow(path, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.build
def test_a_workflow_with_an_input_the_action_lacks_fails(tmp_path: Path) -> None:
    text = (
        block(CI_WORKFLOW)
        .text.replace(PUBLISHED, "./")
        .replace("mode: down", "mode: down\n          gpus: 8")
    )
    done = lint_workflow(project_with(tmp_path, text), tmp_path)
    assert done.returncode == 1
    assert 'input "gpus" is not defined in action "fakeplugin GPU cluster"' in done.stdout


def test_every_workflow_and_the_action_is_yaml_with_its_parts() -> None:
    assert [w.name for w in WORKFLOWS] == ["ci.yaml", "kind.yaml", "release.yaml"]
    for workflow in WORKFLOWS:
        doc = yaml.safe_load(workflow.read_text())
        assert {"name", True, "jobs"} <= set(doc), workflow.name  # YAML 1.1 reads the key `on` as True
        assert doc["permissions"] == {"contents": "read"}, workflow.name
    action = yaml.safe_load((REPO / "action.yml").read_text())
    assert {"name", "description", "inputs", "outputs", "runs"} <= set(action)


def test_the_release_jobs_publish_with_their_own_permissions() -> None:
    doc = yaml.safe_load((REPO / ".github" / "workflows" / "release.yaml").read_text())
    assert doc[True] == {"push": {"tags": ["v*"]}}
    jobs = doc["jobs"]
    assert list(jobs) == ["build", "pypi", "image", "chart", "github-release"]
    assert "permissions" not in jobs["build"]  # the workflow's: contents read
    assert jobs["pypi"]["permissions"] == {"id-token": "write"}
    assert jobs["pypi"]["environment"]["name"] == "pypi"
    attest = {"id-token": "write", "attestations": "write", "artifact-metadata": "write"}
    assert jobs["image"]["permissions"] == {"contents": "read", "packages": "write", **attest}
    assert jobs["chart"]["permissions"] == {"contents": "read", "packages": "write", **attest}
    assert jobs["github-release"]["permissions"] == {"contents": "write", **attest}
    assert jobs["github-release"]["needs"] == ["build", "pypi", "image", "chart"]
    uses = {job: [s.get("uses", "") for s in spec["steps"]] for job, spec in jobs.items()}
    assert "pypa/gh-action-pypi-publish@release/v1" in uses["pypi"]
    assert {"docker/build-push-action@v7", "sigstore/cosign-installer@v4", "actions/attest@v4"} <= set(
        uses["image"]
    )
    build_steps = [s.get("run", "") for s in jobs["build"]["steps"]]
    assert "hack/release.sh --out dist/" in build_steps
    push = next(s for s in jobs["image"]["steps"] if s.get("id") == "push")["with"]
    assert push["platforms"] == "linux/amd64,linux/arm64" and push["push"] is True
    assert push["tags"] == "${{ steps.name.outputs.image }}:${{ needs.build.outputs.version }}"


def test_ci_runs_the_fast_tier_on_pull_requests() -> None:
    doc = yaml.safe_load((REPO / ".github" / "workflows" / "ci.yaml").read_text())
    assert "pull_request" in doc[True]
    assert "hack/test.sh --fast" in [s.get("run") for s in doc["jobs"]["fast"]["steps"]]
