"""Every code block of README.md, CONTRIBUTING.md and docs/*.md is run by a test, or listed in
NOT_RUNNABLE with the reason (CONTRIBUTING.md, *Docs that stay true*).

Here, the fast tier: commands that need no cluster (their output, where the doc shows it, compared with
what they print), inventories through the real parser, manifests parsed, Python snippets executed. Blocks
that need a cluster are run by tests/e2e/test_docs.py against the e2e session's cluster (docblocks.E2E).
"""

from __future__ import annotations

import ast
import inspect
import json
import shutil
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin.cluster import binaries, prometheus
from fakeplugin.server.calllog import read_calls
from fakeplugin.testing import FakepluginCluster
from tests.harness import docblocks
from tests.harness.docblocks import (
    CI_WORKFLOW,
    E2E,
    Block,
    Ref,
    block,
    blocks,
    commands,
    run,
    shows,
    shows_yaml,
)
from tests.harness.gangs import gang_job, no_execute
from tests.harness.paths import REPO
from tests.harness.servicemonitor import service_monitor_job
from tests.harness.tooling import unavailable

# Blocks nobody runs, and why. One entry per block; "" as the start of a first line: every block of its page.
NOT_RUNNABLE: dict[Ref, str] = {
    Ref("README.md", "hack/demo.sh"): "the two commands themselves: hack/test.sh runs this suite, and "
    "tests/e2e/test_demo.py runs `fakeplugin demo`, which is what hack/demo.sh runs after hack/setup.sh",
    Ref(
        "docs/local-cluster.md", "cat > my.yaml <<'YAML'"
    ): "brings up a second cluster in the user's default state dir; "
    "tests/e2e/test_cluster.py runs `cluster up`, `status` and `down`",
    Ref("docs/faults.md", "fakeplugin fault compute-domain"): "needs a node with a fabric, which the e2e "
    "session's seed lab has not; tests/test_faults.py checks the annotations these commands write",
    Ref("docs/architecture.md", "fakeplugin serve (one node)"): "a diagram",
    Ref("docs/architecture.md", "publish/"): "a diagram",
    Ref("docs/plugin.md", "kubelet ─unix socket─▶"): "a diagram",
    Ref("docs/benchmarks.md", ""): "measurements: each block is how a number of the page was taken (minutes "
    "to hours of a cluster at scale, some on fresh clones of past commits); bench/ is their code",
    Ref("docs/chart-fleet.md", "helm install fakeplugin"): "needs a cluster that runs our images and kwok's "
    "(kind): tests/kind/test_fleet.py installs this values file",
    Ref("docs/compute-domains.md", "fakeplugin serve --plugin compute-domains"): "a plugin server that runs "
    "until stopped, on a kubelet node; tests/e2e/test_compute_domains.py starts it on the local cluster",
    Ref("docs/compute-domains.md", "fakeplugin compute-domain-controller --print-crds"): "installs CRDs and "
    "runs a controller until stopped; tests/e2e/test_compute_domains.py runs the controller",
    Ref("docs/compute-domains.md", "helm install fakeplugin"): "kind: tests/kind/test_compute_domains.py "
    "installs the chart with resources.computeDomains.enabled=true",
    Ref("docs/consumable-shares.md", "invalid CLI flags:"): "output sample: tests/test_consumable_shares.py "
    "asserts each message",
    Ref("docs/consumable-shares.md", "fakeplugin cluster up --plugin-args"): "brings up a cluster of its "
    "own; tests/e2e/test_consumable_shares.py runs plugins with these flags",
    Ref("docs/consumable-shares.md", "error preparing devices for claim"): "output sample: "
    "tests/test_prepare_shares.py asserts the message",
    Ref("docs/fleet-view.md", "fakeplugin cluster up --inventory examples/gb200-nvl72.yaml"): "a cluster "
    "and servers that run until stopped: tests/e2e/test_fleet_view.py runs `cluster up --view-endpoint`, "
    "tests/test_view.py the server",
    Ref("docs/kind.md", ""): "kind: Docker, our images and a kind cluster; tests/kind runs the same steps",
    Ref("docs/test-tiers.md", "hack/test.sh --fast"): "the test commands themselves: this suite is what "
    "they run",
    Ref("docs/test-tiers.md", "tests/test_x.py::test_y"): "output sample: tests/test_tiers.py asserts the "
    "guard's message",
    Ref("docs/kubernetes-versions.md", ""): "a cold Go build of another Kubernetes version (about 13 min) "
    "and whole suites on it; hack/matrix.sh is that run",
    Ref("docs/kueue-kind.md", ""): "kind by hand, and its output; tests/kind/test_kueue.py runs all of it",
    Ref("docs/hpa.md", "pod (fakeplugin.dev/gpu-load: 90)"): "a diagram",
    Ref("docs/karpenter.md", "pod + ResourceClaim (Pending"): "a diagram",
    Ref("docs/karpenter.md", "fakeplugin cluster up --inventory examples/karpenter"): "builds Karpenter and "
    "brings up a cluster of its own; tests/e2e/test_karpenter.py runs this inventory, these claims and the "
    "default NodePool on one",
    Ref(
        "docs/hpa.md", "kubectl annotate pod -n hpa"
    ): "needs the cluster of tests/e2e/test_hpa.py, which runs this command (set_load)",
    Ref(
        "docs/hpa.md", "from fakeplugin.cluster import Cluster, keda"
    ): "builds KEDA and brings up a cluster of "
    "its own; tests/e2e/test_hpa.py starts its cluster with these arguments",
    Ref("docs/hpa.md", "externalRules:"): "prometheus-adapter has no build script here (the page says why); "
    "this rule and HPA were run by hand once, as the page reports",
    Ref("docs/rack-scale-jobs.md", "fakeplugin cluster up"): "a cluster of its own in the user's default "
    "state dir; tests/e2e/test_gangs.py starts one for this inventory and applies "
    "examples/rack-scale/",
    Ref("docs/rack-scale-jobs.md", "$ kubectl"): "what kubectl showed in one real run, as the page says; "
    "tests/e2e/test_gangs.py asserts the same facts (bound nodes, cliques, conditions, claims, the CD)",
    Ref("docs/kueue.md", "fakeplugin cluster up"): "builds Kueue from its module (--build) for a cluster of "
    "its own; tests/e2e/test_kueue.py applies these manifests on its session cluster",
    Ref("docs/local-cluster.md", "fakeplugin cluster build"): "a cold Go build (about 12 min) and a cluster "
    "of its own; tests/e2e/test_cluster.py runs `cluster up`, `status` and `down`",
    Ref("docs/local-cluster.md", "cluster.json"): "a listing of the state dir",
    Ref("docs/telemetry.md", "fakeplugin serve --inventory inv.yaml"): "a plugin and a fleet that run until "
    "stopped, with a cluster's objects; tests/e2e/test_telemetry.py runs serve with --telemetry-endpoint and "
    "sets the load, tests/test_faults.py checks the annotations these commands write",
    Ref("docs/telemetry.md", "mine.csv:3: unknown field"): "output sample: tests/test_telemetry.py asserts "
    "the message",
    Ref("docs/telemetry.md", "# HELP DCGM_FI_DEV_GPU_UTIL"): "output sample (UUIDs elided): "
    "tests/test_telemetry.py asserts the lines' format and labels against the exporter's",
    Ref("docs/install.md", ""): "installs and verifies a published release (PyPI, ghcr.io, Sigstore), not "
    "published yet; tests/test_workflows.py checks the release workflow that publishes them, "
    "tests/test_image.py installs the package into a clean virtualenv",
    Ref("docs/testing.md", "pip install fakeplugin"): "installs from PyPI; tests/test_image.py installs the "
    "package into a clean virtualenv",
    Ref("docs/prometheus.md", "pod with a claim"): "a diagram",
    Ref(
        "docs/prometheus.md", "fakeplugin cluster up"
    ): "a cluster of its own in the user's default state dir; "
    "tests/e2e/test_prometheus.py starts such a cluster (Cluster.up with what --with prometheus requests)",
    Ref(
        "docs/prometheus.md", 'DCGM_FI_DEV_GPU_UTIL{namespace="team-a"}'
    ): "PromQL against a running cluster: "
    "tests/e2e/test_prometheus.py runs each line against its cluster's Prometheus",
}


def output_of(command: str) -> str:
    done = run(command)
    assert done.returncode == 0, f"{command}: {done.stderr}"
    return done.stdout


def run_commands(b: Block) -> None:
    """Every command succeeds; what the doc shows after a `$` command is part of its output."""
    for command in commands(b):
        out = output_of(command.line)
        if command.shown:
            if b.lang == "sh" and command.shown.lstrip().startswith(("...", "- ", "apiVersion")):
                assert shows_yaml(command.shown, out), f"{b}: {command.line} prints otherwise"
            else:
                assert shows(command.shown, out) == [], f"{b}: {command.line} prints otherwise"


def helm_template(b: Block) -> None:
    """`helm install` as `helm template`: the chart renders with the doc's values, no cluster needed."""
    try:
        helm = binaries.find("helm")
    except binaries.BinaryNotFound as exc:
        unavailable(str(exc))
    for command in commands(b):
        assert command.line.startswith("helm install "), f"{b}: {command.line}"
        out = output_of(command.line.replace("helm install ", f"{helm} template ", 1))
        kinds = {doc["kind"] for doc in yaml.safe_load_all(out) if doc}
        assert {"DaemonSet", "DeviceClass", "ConfigMap"} <= kinds, f"{b}: renders {sorted(kinds)}"


def validate_inventory(b: Block, tmp: Path) -> None:
    """The real parser, as `fakeplugin validate` runs it."""
    (tmp / "inventory.yaml").write_text(b.text)
    done = run(f"fakeplugin validate --inventory {tmp / 'inventory.yaml'}")
    assert done.returncode == 0, f"{b}: {done.stdout}{done.stderr}"


def validate_inventory_entries(b: Block, tmp: Path) -> None:
    """`nodes:` entries of an inventory, validated in the inventory of the example the page names."""
    example = yaml.safe_load((REPO / "examples" / "karpenter" / "inventory.yaml").read_text())
    assert "examples/karpenter/inventory.yaml" in (REPO / b.page).read_text()
    entries = yaml.safe_load(b.text)
    assert all(e in example["nodes"] for e in entries), (
        f"{b}: entries not in examples/karpenter/inventory.yaml"
    )
    (tmp / "inventory.yaml").write_text(yaml.safe_dump({**example, "nodes": entries}))
    done = run(f"fakeplugin validate --inventory {tmp / 'inventory.yaml'}")
    assert done.returncode == 0, f"{b}: {done.stdout}{done.stderr}"


def parse_manifest(b: Block) -> None:
    docs = list(yaml.safe_load_all(b.text))
    for doc in docs:
        assert {"apiVersion", "kind", "metadata"} <= set(doc), f"{b}: not a Kubernetes object"
        assert doc["metadata"]["name"], f"{b}: no name"


def the_example(path: str) -> Callable[[Block], None]:
    """A YAML block that is the example file `path` (named in the page's text), which a test applies."""

    def check(b: Block) -> None:
        assert path in (REPO / b.page).read_text(), f"{b}: the page does not name {path}"
        assert list(yaml.safe_load_all(b.text)) == list(yaml.safe_load_all((REPO / path).read_text())), (
            f"{b}: differs from {path}"
        )

    return check


def the_failover_job(b: Block) -> None:
    """The Job of docs/rack-scale-jobs.md, *A tray fails*: the one tests/e2e/test_gangs.py runs, but for
    the pod template's test defaults."""
    (doc,) = yaml.safe_load_all(b.text)
    built = gang_job(doc["metadata"]["name"], doc["spec"]["completions"])
    assert {k: v for k, v in doc["spec"].items() if k != "template"} == {
        k: v for k, v in built["spec"].items() if k != "template"
    }, f"{b}: differs from tests/harness/gangs.py gang_job"
    shown, run = doc["spec"]["template"]["spec"], built["spec"]["template"]["spec"]
    for key in ("schedulingGroup", "restartPolicy", "resourceClaims"):
        assert shown[key] == run[key], f"{b}: {key} differs from tests/harness/gangs.py gang_job"


def the_failover_rule(b: Block) -> None:
    """The DeviceTaintRule of the same section: tests/harness/gangs.py no_execute's for its device."""
    (doc,) = yaml.safe_load_all(b.text)
    selector = doc["spec"]["deviceSelector"]
    assert doc == no_execute(selector["pool"], selector["device"]), (
        f"{b}: differs from tests/harness/gangs.py no_execute"
    )


def excerpt_of(command: str) -> Callable[[Block], None]:
    """A YAML block that shows part of what `command` (named in the page's text) prints."""

    def check(b: Block) -> None:
        assert command in " ".join((REPO / b.page).read_text().split()), (
            f"{b}: the page names another command"
        )
        assert shows_yaml(b.text, output_of(command)), f"{b}: `{command}` prints otherwise"

    return check


def promtool_commands(b: Block) -> None:
    """`promtool` commands, as run_commands runs them, where Debian's package is installed."""
    if shutil.which("promtool") is None:
        unavailable(f"promtool not found in PATH; {prometheus.INSTALL}")
    run_commands(b)


def chart_pod_annotations(b: Block) -> None:
    """The plugin pods' annotations with telemetry.enabled=true, as the chart renders them."""
    try:
        helm = binaries.find("helm")
    except binaries.BinaryNotFound as exc:
        unavailable(str(exc))
    out = output_of(f"{helm} template fakeplugin charts/fakeplugin -n x --set telemetry.enabled=true")
    (ds,) = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "DaemonSet"]
    assert yaml.safe_load(b.text).items() <= ds["spec"]["template"]["metadata"]["annotations"].items(), b


def the_operator_scrape_job(b: Block) -> None:
    """The scrape job Prometheus runs in tests/kind/test_operator_prometheus.py (ClusterPolicy mode)."""
    assert yaml.safe_load(b.text) == [service_monitor_job("nvidia-dcgm-exporter")], b


def a_call_log_record(b: Block, tmp: Path) -> None:
    """The record as read_calls (and `fakeplugin calls --file`) reads it."""
    (tmp / "calls.jsonl").write_text(b.text)
    (record,) = read_calls(tmp / "calls.jsonl", claim="team-a/gpu")
    assert record == json.loads(b.text)
    assert output_of(f"fakeplugin calls --file {tmp / 'calls.jsonl'}").strip()


class Recorder:
    """Stands for FakepluginCluster and a cluster it returns: every call is bound to the real method's
    signature (a wrong keyword raises the TypeError a user would get), recorded, and returns the recorder."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, inspect.BoundArguments]] = []

    def __getattr__(self, name: str) -> Callable[..., Recorder]:
        real = getattr(FakepluginCluster, name)
        bound_to_class = isinstance(inspect.getattr_static(FakepluginCluster, name), classmethod)

        def call(*args: Any, **kwargs: Any) -> Recorder:
            signature = inspect.signature(real)
            self.calls.append(
                (
                    name,
                    signature.bind(*args, **kwargs)
                    if bound_to_class
                    else signature.bind(self, *args, **kwargs),
                )
            )
            return self

        return call

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.calls.append(("close", inspect.signature(FakepluginCluster.close).bind(self)))


def python_against_a_recorder(b: Block) -> None:
    recorder = Recorder()
    exec(
        compile(b.text.replace("    ...\n", "    pass\n"), str(b), "exec"),
        {"Path": Path, "FakepluginCluster": recorder},
    )
    assert [name for name, _ in recorder.calls] == ["start", "close", "attach"]
    assert recorder.calls[0][1].arguments["simulated_nodes"] == 2


def a_conftest(b: Block, tmp: Path) -> None:
    """The snippet as a user's conftest.py: the session gets its inventory, a valid one, starting nothing."""
    (tmp / "conftest.py").write_text(b.text)
    (tmp / "test_fleet.py").write_text(
        textwrap.dedent(
            """
            import subprocess

            def test_the_fleet_is_the_sessions_inventory(fakeplugin_inventory):
                assert fakeplugin_inventory.name == "fleet.yaml"
                argv = ["fakeplugin", "validate", "--inventory", str(fakeplugin_inventory)]
                subprocess.run(argv, check=True)
            """
        )
    )
    done = run(f"{sys.executable} -m pytest -q -p no:cacheprovider {tmp}", cwd=tmp)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def a_counters_file(b: Block) -> None:
    """A counters file: what --telemetry-counters reads, every record a simulated field."""
    from fakeplugin.telemetry import counters, exporters, samples

    chosen = counters.parse(b.text, str(b))
    assert [c.field for c in chosen][:2] == ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"]
    assert all(samples.is_simulated(c, exporters.exporter_release(None)) for c in chosen)


def the_action_workflow(b: Block) -> None:
    """docs/ci.md's workflow: YAML whose steps of the action give only action.yml's inputs, the cluster
    taken down last whatever happened; tests/test_workflows.py lints it with actionlint (build tier)."""
    workflow = yaml.safe_load(b.text)
    (steps,) = [job["steps"] for job in workflow["jobs"].values()]
    inputs = set(yaml.safe_load((REPO / "action.yml").read_text())["inputs"])
    ours = [s for s in steps if s.get("uses", "").endswith("/fakeplugin@v0.2.0")]
    assert len(ours) == 2 and all(set(s.get("with", {})) <= inputs for s in ours), b
    assert steps[-1] == ours[-1] and ours[-1]["with"] == {"mode": "down"} and ours[-1]["if"] == "always()", b
    assert "${{ steps.gpu.outputs.kubeconfig }}" in b.text and ours[0]["id"] == "gpu", b
    assert any(s.get("uses", "").startswith("actions/cache@") for s in steps), b


# How each runnable block is run here.
FAST: dict[Ref, Callable[..., None]] = {
    Ref("README.md", "$ fakeplugin render --inventory examples/seed-lab.yaml"): run_commands,
    Ref("docs/emulation.md", "$ fakeplugin render --inventory examples/seed-lab.yaml"): run_commands,
    Ref("docs/deploying.md", "helm install fakeplugin"): helm_template,
    Ref("docs/inventory.md", 'driverVersion: "580.126.20"'): validate_inventory,
    Ref("docs/local-cluster.md", 'driverVersion: "580.159.04"'): validate_inventory,
    Ref("docs/plugin.md", '{"time":'): a_call_log_record,
    Ref("docs/compute-domains.md", "fakeplugin render"): run_commands,
    Ref("docs/compute-domains.md", "$ fakeplugin fault compute-domain --help"): run_commands,
    Ref("docs/compute-domains.md", "$ fakeplugin serve --help"): run_commands,
    Ref("docs/consumable-shares.md", "- name: gpu-0"): excerpt_of(
        "fakeplugin render --inventory examples/seed-lab.yaml --driver-release 0.5.0-dev "
        "--feature-gates ConsumableShares=true --consumable-shares memory"
    ),
    Ref("docs/consumable-shares.md", "apiVersion: resource.k8s.io/v1"): parse_manifest,
    Ref("docs/driver-releases.md", "fakeplugin render"): run_commands,
    Ref("docs/hpa.md", "apiVersion: keda.sh/v1alpha1"): the_example("examples/hpa/scaledobject.yaml"),
    Ref("docs/rack-scale-jobs.md", "driverVersion:"): the_example("examples/rack-scale/inventory.yaml"),
    Ref("docs/rack-scale-jobs.md", "apiVersion: resource.nvidia.com"): the_example(
        "examples/rack-scale/compute-domain.yaml"
    ),
    Ref("docs/rack-scale-jobs.md", "apiVersion: scheduling.k8s.io"): the_example(
        "examples/rack-scale/gang.yaml"
    ),
    Ref("docs/rack-scale-jobs.md", "apiVersion: batch/v1"): the_failover_job,
    Ref("docs/rack-scale-jobs.md", "apiVersion: resource.k8s.io/v1"): the_failover_rule,
    Ref("docs/testing.md", "# conftest.py"): a_conftest,
    Ref("docs/testing.md", "with FakepluginCluster.start"): python_against_a_recorder,
    Ref("docs/prometheus.md", "promtool check rules"): promtool_commands,
    Ref("docs/prometheus.md", 'prometheus.io/scrape: "true"'): chart_pod_annotations,
    Ref("docs/prometheus.md", "- job_name: serviceMonitor/"): the_operator_scrape_job,
    Ref("docs/telemetry.md", "# my dashboard's metrics"): a_counters_file,
    Ref("docs/fleet-view.md", "$ fakeplugin view --help"): run_commands,
    Ref("docs/karpenter.md", "- instanceType: {name: gpu-h100-8x"): validate_inventory_entries,
    CI_WORKFLOW: the_action_workflow,
}
HELM = (helm_template, chart_pod_annotations)  # helm, from hack/build-k8s.sh: the build tier


def where(b: Block) -> list[str]:
    tables = {"FAST": FAST, "E2E": E2E, "NOT_RUNNABLE": NOT_RUNNABLE}
    return [name for name, table in tables.items() for ref in table if ref.matches(b)]


def test_every_block_is_run_or_listed_once() -> None:
    problems = [f"{b}: {b.first!r} is in {where(b) or 'no table'}" for b in blocks() if len(where(b)) != 1]
    assert problems == [], "run each block in a test, or list it in NOT_RUNNABLE with a reason"


def test_every_table_entry_names_a_block() -> None:
    all_blocks = blocks()
    refs = [*FAST, *E2E, *NOT_RUNNABLE]
    assert [ref for ref in refs if not any(ref.matches(b) for b in all_blocks)] == []
    single = [ref for ref in [*FAST, *E2E] if sum(ref.matches(b) for b in all_blocks) != 1]
    assert single == [], "a runnable block is named by exactly one entry"


@pytest.mark.parametrize(
    "ref",
    [
        # helm, from hack/build-k8s.sh: the build tier (tests/harness/tiers.py)
        pytest.param(
            ref,
            marks=[pytest.mark.build] if FAST[ref] in HELM else [],
            id=f"{ref.page}:{ref.starts[:30]}",
        )
        for ref in FAST
    ],
)
def test_the_block_runs(ref: Ref, tmp_path: Path) -> None:
    check = FAST[ref]
    b = block(ref)
    check(b, tmp_path) if "tmp" in inspect.signature(check).parameters else check(b)


def test_a_doc_whose_output_differs_fails() -> None:
    b = Block("x.md", 1, "sh", "$ fakeplugin profiles\nh201 no such profile\n")
    with pytest.raises(AssertionError, match="prints otherwise"):
        run_commands(b)


def test_a_wrong_keyword_in_a_snippet_fails_as_it_would_for_a_user() -> None:
    b = Block("x.md", 1, "python", 'with FakepluginCluster.start(Path("f.yaml"), workers=2) as c:\n    ...\n')
    with pytest.raises(TypeError, match="workers"):
        python_against_a_recorder(b)


def test_commands_join_continuations_and_heredocs_and_keep_shown_output() -> None:
    b = Block("x.md", 1, "sh", "$ a \\\n  --b  # note\nout 1\n...\n$ cat <<'E'\nx # y\nE\n")
    assert commands(b) == [("a --b", "out 1\n...\n"), ("cat <<'E'\nx # y\nE", "")]


def test_a_block_nobody_runs_is_named_with_its_page_and_line() -> None:
    b = Block("new.md", 7, "sh", "fakeplugin something\n")
    assert where(b) == []
    assert str(b) == "new.md:7"


def test_the_readme_indexes_every_page() -> None:
    readme = (REPO / "README.md").read_text()
    index = readme[readme.index("## Docs") :]
    assert [p.name for p in sorted((REPO / "docs").glob("*.md")) if f"(docs/{p.name})" not in index] == []


def test_the_e2e_module_runs_each_e2e_block() -> None:
    source = ast.parse((REPO / "tests" / "e2e" / "test_docs.py").read_text())
    used = {
        n.id
        for n in ast.walk(source)
        if isinstance(n, ast.Name) and isinstance(getattr(docblocks, n.id, None), Ref)
    }
    assert {getattr(docblocks, name) for name in used} == set(E2E)
