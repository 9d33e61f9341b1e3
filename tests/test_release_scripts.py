"""The release workflow's own scripts (.github/workflows/release.yaml): hack/release-version.sh, which fails
the release unless the tag names fakeplugin.__version__, and hack/changelog-section.sh, the release notes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import fakeplugin
from tests.harness.paths import REPO

VERSION_CHECK = REPO / "hack" / "release-version.sh"
NOTES = REPO / "hack" / "changelog-section.sh"


def run(*argv: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", *map(str, argv)], capture_output=True, text=True, timeout=30, env=env)


def test_the_tag_of_the_package_version_passes_and_is_written_as_the_step_output(tmp_path: Path) -> None:
    output = tmp_path / "github-output"
    env = {"PATH": "/usr/bin:/bin", "GITHUB_OUTPUT": str(output)}
    done = run(VERSION_CHECK, f"v{fakeplugin.__version__}", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{fakeplugin.__version__}\n"
    assert output.read_text() == f"version={fakeplugin.__version__}\n"


def test_a_tag_of_another_version_fails_naming_both(tmp_path: Path) -> None:
    output = tmp_path / "github-output"
    done = run(VERSION_CHECK, "v9.8.7", env={"PATH": "/usr/bin:/bin", "GITHUB_OUTPUT": str(output)})
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"release tag v9.8.7 is version 9.8.7, but fakeplugin.__version__ is {fakeplugin.__version__}"
    )
    assert not output.exists()


def test_a_tag_that_is_no_version_fails() -> None:
    for tag in (fakeplugin.__version__, "vnext", "v0.2", "release-0.2.0"):
        done = run(VERSION_CHECK, tag)
        assert done.returncode == 1, tag
        assert f"release tag {tag}: not v followed by a version" in done.stderr


def test_the_workflow_checks_the_tag_with_this_script() -> None:
    workflow = (REPO / ".github" / "workflows" / "release.yaml").read_text()
    assert 'run: hack/release-version.sh "$GITHUB_REF_NAME"' in workflow
    assert 'hack/changelog-section.sh "$VERSION" >notes.md' in workflow
    assert "--notes-file notes.md" in workflow


def test_the_notes_of_0_2_0_are_exactly_its_changelog_section() -> None:
    changelog = (REPO / "CHANGELOG.md").read_text()
    start = changelog.index("## [0.2.0] - ")
    section = changelog[changelog.index("\n", start) + 1 : changelog.index("\n## [0.1.0] - ")]
    done = run(NOTES, "0.2.0")
    assert done.returncode == 0, done.stderr
    assert done.stdout == section.strip("\n") + "\n"
    assert done.stdout.startswith("### Added\n")
    assert "### Fixed\n- Installed from a wheel" in done.stdout
    assert "## [" not in done.stdout


def test_the_last_section_ends_at_the_end_of_the_file_and_a_missing_one_fails(tmp_path: Path) -> None:
    changelog = tmp_path / "CHANGELOG.md"
    changelog.write_text(
        "# Changelog\n\n## [1.0.0] - 2027-01-02\n\n### Added\n- b\n\n## [1.0.0-rc.1] - 2027-01-01\n\n- a\n\n"
    )
    assert run(NOTES, "1.0.0", changelog).stdout == "### Added\n- b\n"
    assert run(NOTES, "1.0.0-rc.1", changelog).stdout == "- a\n"
    missing = run(NOTES, "1.0", changelog)
    assert missing.returncode == 1
    assert "has no section for version 1.0 (## [1.0] ...)" in missing.stderr
