"""Where a local cluster keeps its files (pure: paths only, nothing is created here).

<state>/cluster.json      what `up` started: ports, processes (pid + expected command line), nodes
<state>/admin.kubeconfig  credential-less kubeconfig (anonymous auth, AlwaysAllow)
<state>/lock              held by `up`, `down` and restarts
<state>/pki/              service-account key pair; serving certs the components generate
<state>/etcd/             etcd data
<state>/nodes/<name>/     per kubelet node: CDI dir, fake CRI socket and records, kubelet config,
                          sysctl stand-ins, the dirs bound over /var/lib and /var/log, boot ID
<state>/kubelet/<i>/      kubelet root dirs, kept short: the plugin's sockets live below them and
                          unix socket paths must fit in 108 bytes
<state>/kueue/            with `--with kueue`: its Configuration, webhook certificates, its /etc layer
<state>/prometheus/       with `--with prometheus`: prometheus.yml and data/ (its TSDB)
<state>/keda/             with KEDA: its certificates, the unix sockets of its metrics server's bridges
<state>/karpenter/        with Karpenter: its instance types file, the unix sockets of its bridge
<state>/logs/             one log per process (`down` keeps them unless asked to purge)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# sun_path is 108 bytes including the terminating NUL.
MAX_SOCKET_PATH = 107
# The longest socket the plugin creates below a kubelet root: <root>/plugins/<driver>/dra.sock.
PLUGIN_SOCKET_SUFFIX = "/plugins/gpu.nvidia.com/dra.sock"


@dataclass(frozen=True)
class StateLayout:
    root: Path

    @property
    def cluster_file(self) -> Path:
        return self.root / "cluster.json"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "admin.kubeconfig"

    @property
    def lock_file(self) -> Path:
        return self.root / "lock"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def token_file(self) -> Path:
        return self.pki / "tokens.csv"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def scheduler_config(self) -> Path:
        return self.root / "kube-scheduler.yaml"

    @property
    def kwok_config(self) -> Path:
        """kwok's --config: the Stages of the simulated nodes (fakeplugin.fleet.stages)."""
        return self.root / "kwok.yaml"

    @property
    def kcm_volume_plugin_dir(self) -> Path:
        """kube-controller-manager's FlexVolume dir (it creates it; the default is under /usr)."""
        return self.root / "kcm-volume-plugins"

    @property
    def kubectl_cache(self) -> Path:
        """kubectl's discovery cache for Cluster.kubectl (not ~/.kube/cache: it goes with the cluster)."""
        return self.root / "kubectl-cache"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def log(self, process: str) -> Path:
        """Log file of a process named like `kube-apiserver` or `kubelet/<node>`."""
        return self.logs / (process.replace("/", "_") + ".log")

    def node(self, name: str, index: int) -> KubeletDirs:
        return KubeletDirs(
            name=name, dir=self.root / "nodes" / name, kubelet_root=self.root / "kubelet" / str(index)
        )

    def runtime_entries(self) -> list[Path]:
        """Everything `down` removes (logs stay unless purged)."""
        return [
            self.cluster_file,
            self.kubeconfig,
            self.kwok_config,
            self.scheduler_config,
            self.pki,
            self.etcd_data,
            self.kcm_volume_plugin_dir,
            self.root / "nodes",
            self.root / "kubelet",
            self.kubectl_cache,
            self.kueue,
            self.prometheus,
            self.keda,
            self.karpenter,
        ]

    @property
    def kueue(self) -> Path:
        """Kueue's manager (`--with kueue`): its Configuration, certificates, the layer over /etc."""
        return self.root / "kueue"

    @property
    def prometheus(self) -> Path:
        """Prometheus (`--with prometheus`): its config and TSDB."""
        return self.root / "prometheus"

    @property
    def keda(self) -> Path:
        """KEDA's operator and metrics API server: their certificates, the bridges' unix sockets."""
        return self.root / "keda"

    @property
    def karpenter(self) -> Path:
        """Karpenter (`--with karpenter`): its instance types file, the unix sockets of its bridge."""
        return self.root / "karpenter"


@dataclass(frozen=True)
class KubeletDirs:
    """The files of one kubelet node."""

    name: str
    dir: Path
    kubelet_root: Path

    @property
    def registrar_dir(self) -> Path:
        return self.kubelet_root / "plugins_registry"

    @property
    def plugins_dir(self) -> Path:
        return self.kubelet_root / "plugins"

    @property
    def pod_resources_socket(self) -> Path:
        return self.kubelet_root / "pod-resources" / "kubelet.sock"

    @property
    def cdi(self) -> Path:
        """The node's CDI spec dir: the plugin writes here, the fake CRI resolves from here."""
        return self.dir / "cdi"

    @property
    def cri_socket(self) -> Path:
        return self.dir / "cri.sock"

    @property
    def containers_dir(self) -> Path:
        """The fake CRI's per-container records: <namespace>_<pod>_<container>.json."""
        return self.dir / "containers"

    @property
    def kubelet_config(self) -> Path:
        return self.dir / "kubelet.yaml"

    @property
    def boot_id_file(self) -> Path:
        return self.dir / "boot_id"

    @property
    def sysctl_dir(self) -> Path:
        """Stand-in files bound over the six /proc/sys entries the kubelet tunes."""
        return self.dir / "sysctl"

    @property
    def var_lib(self) -> Path:
        """Bound over /var/lib for the kubelet: /var/lib/kubelet/device-plugins is hard-coded."""
        return self.dir / "var-lib"

    @property
    def var_log(self) -> Path:
        """Bound over /var/log for the kubelet: /var/log/containers is hard-coded."""
        return self.dir / "var-log"

    @property
    def pod_logs_dir(self) -> Path:
        return self.dir / "pod-logs"

    @property
    def volume_plugin_dir(self) -> Path:
        """FlexVolume dir; the kubelet creates it, default /usr/libexec/kubernetes/..."""
        return self.dir / "volume-plugins"

    def sockets(self) -> list[Path]:
        return [
            self.cri_socket,
            Path(str(self.kubelet_root) + PLUGIN_SOCKET_SUFFIX),
            self.pod_resources_socket,
        ]


def too_long_sockets(dirs: list[KubeletDirs]) -> list[str]:
    """Socket paths over the unix limit, for an error that names them."""
    return [str(p) for d in dirs for p in d.sockets() if len(str(p).encode()) > MAX_SOCKET_PATH]
