// Command dra-anchor: the Go anchors of bench/prepare_vs_anchor.py beyond Kubernetes' own DRA test driver.
// A kubelet plugin on the upstream kubeletplugin helper (which GETs each claim before Prepare) with the
// test driver's flags, devices (device-NN in one slice of the node's pool) and its CDI JSON file per
// claim, plus, by --work:
//
//	durable  the checkpoint as NVIDIA's plugin writes it: the kubelet's checkpointmanager (marshal with
//	         the V1 and V2 checksums, temp file, write, fsync, rename), PrepareStarted before the CDI
//	         file and PrepareCompleted after it; one write per Unprepare. State kept in memory; calls
//	         serialised by the helper, as the test driver's are.
//	floor    the test driver's work alone, on this code: a check that the other modes add only theirs.
//	nvidia   NVIDIA's per-call work in its order (kubernetes-sigs/dra-driver-nvidia-gpu at 9593204,
//	         cmd/gpu-kubelet-plugin/): the helper unserialised (driver.go:135), the node-wide flock
//	         pu.lock polled every 100 ms (driver.go:388, :430; pkg/flock/flock.go:70-136), the state
//	         mutex (device_state.go:293, :489), getCheckpoint: flock cp.lock, read, verify
//	         (device_state.go:300, :493, :728-747), updateCheckpoint: flock cp.lock, read, verify,
//	         write (:342, :384, :577, :786-814), the CDI spec as YAML through a fresh CDI cache, which
//	         first reads every spec in the directory (cdi.go:378, :302, :363-376; vendor/github.com/
//	         NVIDIA/nvidia-container-toolkit/pkg/nvcdi/spec/spec.go:46-78; vendor/tags.cncf.io/
//	         container-device-interface/pkg/cdi/cache.go:108-121, :284-309), its chmod, one log line
//	         (driver.go:422); Unprepare removes the spec (cdi.go:308-316). docs/benchmarks.md lists it.
//
// The hardware work (NVML, MIG, time-slicing, MPS: off by default) and metrics are left out.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/checkpointmanager"
	"k8s.io/kubernetes/pkg/kubelet/checkpointmanager/checksum"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// The checkpoint, shaped as NVIDIA's (checkpoint.go, checkpointv.go, prepared.go): V2 and a V1 copy,
// each with its checksum; a claim's status and its prepared GPUs.
type gpuDevice struct {
	Info struct {
		UUID string `json:"uuid"`
	} `json:"info"`
	Device struct {
		Requests     []string `json:"Requests"`
		PoolName     string   `json:"PoolName"`
		DeviceName   string   `json:"DeviceName"`
		CDIDeviceIDs []string `json:"CDIDeviceIDs"`
	} `json:"device"`
}
type preparedDevice struct {
	Gpu *gpuDevice `json:"gpu"`
	Mig *struct{}  `json:"mig"`
}
type deviceGroup struct {
	Devices     []preparedDevice `json:"devices"`
	ConfigState struct{}         `json:"configState"`
}
type claimEntry struct {
	State           string                          `json:"checkpointState,omitempty"`
	Status          resourceapi.ResourceClaimStatus `json:"status,omitempty"`
	PreparedDevices []deviceGroup                   `json:"preparedDevices,omitempty"`
	Name            string                          `json:"name,omitempty"`
	Namespace       string                          `json:"namespace,omitempty"`
}
type claimsV1 struct {
	Claims map[string]claimEntry `json:"preparedClaims,omitempty"`
}
type claimsV2 struct {
	Checksum checksum.Checksum     `json:"checksum"`
	Claims   map[string]claimEntry `json:"preparedClaims,omitempty"`
}
type checkpoint struct {
	Checksum checksum.Checksum `json:"checksum"`
	V1       *claimsV1         `json:"v1,omitempty"`
	V2       *claimsV2         `json:"v2,omitempty"`
}

func (c *checkpoint) MarshalCheckpoint() ([]byte, error) {
	out := checkpoint{V1: &claimsV1{map[string]claimEntry{}}}
	for uid, e := range c.V2.Claims {
		out.V1.Claims[uid] = claimEntry{Status: e.Status, PreparedDevices: e.PreparedDevices}
	}
	v1, _ := json.Marshal(out)
	out.Checksum = checksum.New(v1)
	v2 := *c.V2
	v2.Checksum = 0
	b, _ := json.Marshal(v2)
	v2.Checksum = checksum.New(b)
	out.V2 = &v2
	return json.Marshal(out)
}

func (c *checkpoint) UnmarshalCheckpoint(b []byte) error {
	err := json.Unmarshal(b, c)
	if err == nil && c.V2 != nil && c.V2.Claims == nil {
		c.V2.Claims = map[string]claimEntry{} // as ToLatestVersion (checkpoint.go:47-49)
	}
	return err
}

func (c *checkpoint) VerifyChecksum() error {
	v1, _ := json.Marshal(checkpoint{V1: c.V1})
	if err := c.Checksum.Verify(v1); err != nil {
		return err
	}
	v2 := *c.V2
	v2.Checksum = 0
	b, _ := json.Marshal(v2)
	return c.V2.Checksum.Verify(b)
}

type plugin struct {
	work, driver, cdiDir, dir string
	mu                        sync.Mutex
	cpm                       checkpointmanager.CheckpointManager
	cp                        checkpoint // durable: the state, in memory
}

// flock as NVIDIA's pkg/flock: LOCK_EX|LOCK_NB, retried every 100 ms, 10 s timeout; closing releases.
func flock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for t0 := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			return func() { f.Close() }, nil
		} else if err != syscall.EWOULDBLOCK || time.Since(t0) > 10*time.Second {
			f.Close()
			return nil, fmt.Errorf("flock %s: %w", path, err)
		}
	}
}

// begin is what NVIDIA does before a claim's work: nvidia: pu.lock, the state mutex, getCheckpoint
// (flock cp.lock, read, verify); durable: the mutex and the checkpoint in memory. end undoes the locks.
func (p *plugin) begin() (cp *checkpoint, end func(), err error) {
	unlockPU := func() {}
	if p.work == "nvidia" {
		if unlockPU, err = flock(filepath.Join(p.dir, "pu.lock")); err != nil {
			return nil, nil, err
		}
	}
	p.mu.Lock()
	end = func() { p.mu.Unlock(); unlockPU() }
	if p.work != "nvidia" {
		return &p.cp, end, nil
	}
	if err = p.cpLocked(func() (err error) { cp, err = p.get(); return err }); err != nil {
		end()
		return nil, nil, err
	}
	return cp, end, nil
}

// update is NVIDIA's updateCheckpoint: under cp.lock, read, verify, mutate, write (durable: the write;
// floor: the state in memory only).
func (p *plugin) update(mutate func(*checkpoint)) error {
	if p.work != "nvidia" {
		if mutate(&p.cp); p.work == "floor" {
			return nil
		}
		return p.cpm.CreateCheckpoint("checkpoint.json", &p.cp)
	}
	return p.cpLocked(func() error {
		cp, err := p.get()
		if err != nil {
			return err
		}
		mutate(cp)
		return p.cpm.CreateCheckpoint("checkpoint.json", cp)
	})
}

func (p *plugin) cpLocked(fn func() error) error {
	release, err := flock(filepath.Join(p.dir, "cp.lock"))
	if err != nil {
		return err
	}
	defer release()
	return fn()
}

func (p *plugin) get() (*checkpoint, error) {
	cp := &checkpoint{}
	return cp, p.cpm.GetCheckpoint("checkpoint.json", cp)
}

func (p *plugin) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, c := range claims {
		devices, err := p.prepare(c)
		out[c.UID] = kubeletplugin.PrepareResult{Devices: devices, Err: err}
	}
	return out, nil
}

func (p *plugin) prepare(claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	uid := string(claim.UID)
	cp, end, err := p.begin()
	if err != nil {
		return nil, err
	}
	defer end()
	if e, ok := cp.V2.Claims[uid]; ok && e.State == "PrepareCompleted" {
		return kubeletDevices(e), nil
	}
	started := claimEntry{State: "PrepareStarted", Status: claim.Status, Name: claim.Name, Namespace: claim.Namespace}
	if err := p.update(func(cp *checkpoint) { cp.V2.Claims[uid] = started }); err != nil {
		return nil, err
	}
	done := claimEntry{State: "PrepareCompleted", Status: claim.Status, PreparedDevices: []deviceGroup{{}}}
	var edits []cdispec.Device
	for _, r := range claim.Status.Allocation.Devices.Results {
		d := &gpuDevice{}
		d.Info.UUID = "GPU-" + uid[:8] + "-" + r.Device
		d.Device.Requests, d.Device.PoolName, d.Device.DeviceName = []string{r.Request}, r.Pool, r.Device
		name := uid + "-" + r.Device
		d.Device.CDIDeviceIDs = []string{p.driver + "/test=claim-" + uid + "-" + r.Request}
		if p.work == "nvidia" {
			d.Device.CDIDeviceIDs = []string{"k8s." + p.driver + "/claim=" + name}
		}
		done.PreparedDevices[0].Devices = append(done.PreparedDevices[0].Devices, preparedDevice{Gpu: d})
		edits = append(edits, cdispec.Device{Name: name, ContainerEdits: cdispec.ContainerEdits{
			DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/nvidia" + strings.TrimPrefix(r.Device, "device-")}}}})
	}
	if err := p.writeCDI(claim, edits); err != nil {
		return nil, err
	}
	if err := p.update(func(cp *checkpoint) { cp.V2.Claims[uid] = done }); err != nil {
		return nil, err
	}
	if p.work == "nvidia" {
		klog.Infof("Returning newly prepared devices for claim '%s/%s:%s': %v", claim.Namespace, claim.Name, uid, kubeletDevices(done))
	}
	return kubeletDevices(done), nil
}

// writeCDI: the test driver's JSON file (app/kubeletplugin.go), or NVIDIA's transient YAML spec through
// a fresh CDI cache (its per-claim spec: the claim's GPUs' device nodes and the driver's common edits,
// here a typical host's driver libraries), then its chmod.
func (p *plugin) writeCDI(claim *resourceapi.ResourceClaim, devices []cdispec.Device) error {
	uid := string(claim.UID)
	if p.work != "nvidia" {
		for _, r := range claim.Status.Allocation.Devices.Results {
			spec := fmt.Sprintf(`{"cdiVersion":"0.3.0","kind":"%s/test","devices":[{"name":"claim-%s-%s","containerEdits":{"env":["claim_%s_%s=true"]}}]}`,
				p.driver, uid, r.Request, claim.Name, r.Request)
			if err := os.WriteFile(p.cdiFile(uid, r.Request), []byte(spec), 0o644); err != nil {
				return err
			}
		}
		return nil
	}
	common := cdispec.ContainerEdits{Env: []string{"NVIDIA_VISIBLE_DEVICES=void"}}
	for _, n := range []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"} {
		common.DeviceNodes = append(common.DeviceNodes, &cdispec.DeviceNode{Path: "/dev/" + n})
	}
	for _, lib := range []string{"cuda", "nvidia-ml", "nvidia-ptxjitcompiler", "nvidia-nvvm", "nvidia-opencl", "nvidia-cfg", "nvidia-gpucomp", "nvidia-allocator", "nvidia-pkcs11", "nvidia-eglcore", "nvidia-glcore", "nvidia-tls", "nvidia-glsi", "nvidia-fbc", "nvidia-rtcore", "nvoptix", "nvidia-encode", "nvcuvid", "nvidia-opticalflow", "GLX_nvidia", "EGL_nvidia", "GLESv2_nvidia", "GLESv1_CM_nvidia", "nvidia-egl-gbm"} {
		path := "/usr/lib/x86_64-linux-gnu/lib" + lib + ".so.580.95.05"
		common.Mounts = append(common.Mounts, &cdispec.Mount{HostPath: path, ContainerPath: path, Options: []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}})
	}
	for _, h := range []string{"create-symlinks", "update-ldcache", "disable-device-node-modification"} {
		common.Hooks = append(common.Hooks, &cdispec.Hook{HookName: "createContainer", Path: "/usr/bin/nvidia-cdi-hook", Args: []string{"nvidia-cdi-hook", h}})
	}
	spec := &cdispec.Spec{Version: "0.5.0", Kind: "k8s." + p.driver + "/claim", Devices: devices, ContainerEdits: common}
	name := filepath.Base(p.cdiFile(uid, ""))
	cache, _ := cdiapi.NewCache(cdiapi.WithAutoRefresh(false), cdiapi.WithSpecDirs(p.cdiDir))
	if err := cache.WriteSpec(spec, name); err != nil {
		return err
	}
	root, err := os.OpenRoot(p.cdiDir)
	if err != nil {
		return err
	}
	defer root.Close()
	return root.Chmod(name, 0o644)
}

func kubeletDevices(e claimEntry) []kubeletplugin.Device {
	var out []kubeletplugin.Device
	for _, g := range e.PreparedDevices {
		for _, d := range g.Devices {
			c := d.Gpu.Device
			out = append(out, kubeletplugin.Device{Requests: c.Requests, PoolName: c.PoolName, DeviceName: c.DeviceName, CDIDeviceIDs: c.CDIDeviceIDs})
		}
	}
	return out
}

func (p *plugin) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := map[types.UID]error{}
	for _, c := range claims {
		out[c.UID] = p.unprepare(string(c.UID))
	}
	return out, nil
}

// cdiFile: the test driver's JSON file of a claim's request, or NVIDIA's YAML spec of the claim.
func (p *plugin) cdiFile(uid, request string) string {
	if p.work == "nvidia" {
		return filepath.Join(p.cdiDir, cdiapi.GenerateTransientSpecName("k8s."+p.driver, "claim", uid)+".yaml")
	}
	return filepath.Join(p.cdiDir, p.driver+"-"+uid+"-"+request+".json")
}

func (p *plugin) unprepare(uid string) error {
	cp, end, err := p.begin()
	if err != nil {
		return err
	}
	defer end()
	e, ok := cp.V2.Claims[uid]
	if !ok {
		return nil
	}
	files := []string{p.cdiFile(uid, "")} // NVIDIA's: one per claim
	if p.work != "nvidia" {
		files = nil
		for _, d := range kubeletDevices(e) {
			files = append(files, p.cdiFile(uid, d.Requests[0]))
		}
	}
	for _, f := range files {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return p.update(func(cp *checkpoint) { delete(cp.V2.Claims, uid) })
}

func (p *plugin) HandleError(ctx context.Context, err error, msg string) { klog.ErrorS(err, msg) }

// WatchHealthStatus: no device health, as the test driver without health and NVIDIA's plugin without
// NVMLDeviceHealthCheck. The helper answers the kubelet Unimplemented (kubeletplugin v0.37, health.go);
// the method is part of its DRAPlugin interface from Kubernetes 1.37, so the anchors build on 1.37+.
func (p *plugin) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

func main() {
	p := &plugin{}
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server")
	qps := flag.Float64("kube-api-qps", 50, "client QPS")
	burst := flag.Int("kube-api-burst", 100, "client burst")
	node := flag.String("node-name", "", "the node this plugin serves (its pool)")
	numDevices := flag.Int("num-devices", 4, "devices device-00... in the node's slice")
	datadir := flag.String("datadir", kubeletplugin.KubeletPluginsDir, "the DRA socket, checkpoint and locks go to DIR/DRIVER")
	registry := flag.String("plugin-registration-path", kubeletplugin.KubeletRegistryDir, "registration socket directory")
	flag.StringVar(&p.cdiDir, "cdi-dir", "/var/run/cdi", "CDI spec directory")
	flag.StringVar(&p.driver, "drivername", "test-driver.cdi.k8s.io", "DRA driver name")
	flag.StringVar(&p.work, "work", "durable", "per-call work: durable, nvidia or floor (the test driver's alone)")
	flag.Parse()
	if *node == "" || (p.work != "durable" && p.work != "nvidia" && p.work != "floor") {
		klog.Fatal("--node-name is required; --work is durable, nvidia or floor")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		klog.Fatal(err)
	}
	config.QPS, config.Burst = float32(*qps), *burst
	client := kubernetes.NewForConfigOrDie(config)
	p.dir = filepath.Join(*datadir, p.driver)
	for _, d := range []string{p.dir, p.cdiDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			klog.Fatal(err)
		}
	}
	if p.cpm, err = checkpointmanager.NewCheckpointManager(p.dir); err != nil {
		klog.Fatal(err)
	}
	p.cp = checkpoint{V2: &claimsV2{Claims: map[string]claimEntry{}}}
	if err := p.cpm.CreateCheckpoint("checkpoint.json", &p.cp); err != nil { // device_state.go:282-285
		klog.Fatal(err)
	}
	helper, err := kubeletplugin.Start(ctx, p, kubeletplugin.DriverName(p.driver), kubeletplugin.NodeName(*node),
		kubeletplugin.KubeClient(client), kubeletplugin.PluginDataDirectoryPath(p.dir),
		kubeletplugin.RegistrarDirectoryPath(*registry), kubeletplugin.Serialize(p.work != "nvidia"))
	if err != nil {
		klog.Fatal(err)
	}
	devices := make([]resourceapi.Device, *numDevices)
	for i := range devices {
		devices[i].Name = fmt.Sprintf("device-%02d", i)
	}
	slice := resourceslice.Slice{Devices: devices}
	if err := helper.PublishResources(ctx, resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{*node: {Slices: []resourceslice.Slice{slice}}}}); err != nil {
		klog.Fatal(err)
	}
	<-ctx.Done()
	helper.Stop()
}
