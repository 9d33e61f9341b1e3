"""Helpers shared by the test suites; test modules import them from here, never from each other
(tests/test_harness_layout.py checks it).

Unit and contract tests (tests/*.py):
- `DRIVER` (this package): the driver every unit test serves, fakeplugin's default (gpu.nvidia.com).
- factories: GpuDevice values, one per model (`T10`, `H200`), numbered copies with `numbered`.
- prepare: one node of Preparer tests over real files (`Node`), claims and results (`ref`, `result`,
  `claim_object`, `prepared`, `gpu`), opaque configs in an allocation (`opaque`, `with_configs`).
- server: the gRPC server on its own loop (`Running`) over a stand-in core (`CannedDriver`), wire claims.
- plugin: the real core and server over JSON claims, in-process or as `python -m tests.harness.plugin`.
- hosted: a NodePlugin as a host drives it (`Hosted`: Prepare through the runtime's claim checks).
- nvidia_smi: the fake nvidia-smi in a container view made from real CDI specs; the real tool's capture.
- smi_shells: the shell/awk pairs the fake nvidia-smi runs under (dash+mawk, busybox, gawk --posix).
- nvml: the mock NVML library through a real consumer (`probe`: nvml_probe.py, a script printing as JSON what
  nvidia-ml-py and PyTorch's raw ctypes calls get, in a process that finds the library by name), a
  container's description directory (`describe`), the devices and slice entries to check it against
  (`published`), for tests/test_nvml*.py.
- nvml_probe: that script.
- nvml_events: a consumer waiting on NVML's event API for an XID (tests/test_nvml_live.py).
- gonvlib: a Go program on NVIDIA's go-nvlib (tests/data/gonvlib/main.go), built into the build cache, and its
  answers through the mock library (tests/test_nvml_gonvlib.py, build tier).
- inventory: one node's devices from inventory GPU entries (MIG layouts, shares).
- computedomain: compute-domain.nvidia.com's test names, a fabric inventory, claims and configs, and `Api`
  (the plugin's API calls answered from dicts).
- golden: `check_golden` against tests/golden/.
- dashboard: NVIDIA's Grafana dashboard for dcgm-exporter, its queries and a selector evaluator.
- opaqueconfig: opaque device configs in one allocation (`result`, `entry`, `gpu_config`, `allocation`)
  and what prepare.opaqueconfig makes of them (`configs`, `settings`, `error_of`), for
  tests/test_opaqueconfig*.py.
- chart: the Helm chart rendered with helm (`render`, `refusal`, the golden `CASES`) and read (`objects`,
  `only`, `env_of`, `granted`, `parse_with_env`), for tests/test_chart*.py.
- cli: fakeplugin's commands as a subprocess (`render_cli`).
- rbac: every API call of each ComputeDomain component (controller, kubelet plugin, daemon), as a table.
- paths: the repository's files (`REPO`, `EXAMPLES`, `SEED_LAB`).
- imports: every import statement of a source, read with ast (`imports`), for the layout tests.
- tooling: `unavailable`, a missing tool skips here and fails in CI; `tool`, a binary of hack/build-k8s.sh.
- docblocks: the docs' code blocks (`blocks`, `Ref`), their commands run and output compared, and `E2E`,
  the blocks tests/e2e/test_docs.py runs (tests/test_docs.py checks every block is run or listed).
- mirror: a release mirror on 127.0.0.1 laid out as dl.k8s.io, etcd's and helm's releases lay out their
  files and checksums (`serve`, `publish_kube`, `publish_etcd`, `publish_helm`), for tests/test_downloads.py.
- tiers: the test tiers (markers `build`, `cluster`, `kind`; none: fast) and the fast tier's guard, a pytest
  plugin (pyproject's addopts).

End-to-end tests (tests/e2e, tests/kind):
- chart_install: a test release of the chart rendered (`render`, `release_args`) and a private API server
  that authorizes with RBAC (`running_rbac_apiserver`, `ApiServer`), for tests/e2e/test_chart_install*.py.
- kube: kubectl on any cluster (`apply`, `get`, `items`, `wait_for`, ...), claims the kubelet health-watches.
- seedlab: the e2e session's cluster, the seed lab: its nodes (`T10`, `A5000`), inventory, slices, claims.
- host: what a local cluster needs of this host (`require_cluster_host`) and must leave alone (`HostBefore`);
  a module's cluster of its own (`own_cluster`).
- gangs: a gang's worker pod and Job (`worker`, `gang_job`) and a failover's DeviceTaintRule (`no_execute`).
- domains: a ComputeDomain's status (`cd_status`, `ready_status`) and NVIDIA's channel-injection demo
  checked end to end (`channel_injection_ran`, `SPECS`, `CHANNEL_INJECTION`).
- kind: the kind e2e's cluster (`KindCluster`) and the names run.sh gives it; a claim's allocated GPUs
  (`allocated_uuids`) and those `nvidia-smi -L` listed (`smi_uuids`).
- kueue: examples/kueue's Jobs created (`create_job`) and what Kueue's Workload for one says (`admitted`,
  `pending`, `finished`, `usage`), on the local cluster and in kind.
- rayvenv: Ray from PyPI in a venv under the build cache (`python`, `RAY_VERSION`) and the accelerator type
  Ray derives from an NVML name (`accelerator_type`), for tests/e2e/test_ray.py (`--long`).
- servicemonitor: the scrape job prometheus-operator makes of the GPU Operator's DCGM exporter ServiceMonitor
  (`service_monitor_job`), for tests/kind/test_operator_prometheus.py and docs/prometheus.md's block.
- browser: a real headless chromium driven by selenium through Debian's chromedriver, offline
  (`chromium`), for the fleet view's page.

The objects tests apply (claims, templates, pods) come from fakeplugin.testing, as in users' tests.
"""

from fakeplugin import DEFAULT_DRIVER_NAME

DRIVER = DEFAULT_DRIVER_NAME
