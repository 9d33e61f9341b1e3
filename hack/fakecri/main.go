// Command fakecri serves the CRI runtime and image services on a unix socket so that a real kubelet
// can run pods without containers.
//
// It is the upstream in-memory fake (k8s.io/cri-client/pkg/fake, the one kubemark's hollow nodes use)
// with one addition: CreateContainer resolves the container's CDI devices against the node's CDI spec
// directories with the real CDI library, injecting them into an OCI spec as containerd does, and
// writes what came out to <output-dir>/<podNamespace>_<podName>_<container>.json (atomically). An
// unresolvable device fails CreateContainer, as in containerd; the record is written either way.
//
// Built by hack/build-k8s.sh inside the kubernetes wrapper module.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// record is what one CreateContainer call asked for and what CDI injection produced.
type record struct {
	PodNamespace string            `json:"podNamespace"`
	PodName      string            `json:"podName"`
	PodUID       string            `json:"podUID"`
	Container    string            `json:"container"`
	Attempt      uint32            `json:"attempt"`
	CreatedAt    string            `json:"createdAt"`
	CDIDevices   []string          `json:"cdiDevices"`
	Env          []string          `json:"env"`
	Mounts       []oci.Mount       `json:"mounts"`
	DeviceNodes  []oci.LinuxDevice `json:"deviceNodes"`
	Hooks        *oci.Hooks        `json:"hooks,omitempty"`
	SpecErrors   []string          `json:"specErrors,omitempty"`
	Error        string            `json:"error,omitempty"`
}

// runtime is the upstream fake with CreateContainer intercepted; every other call goes to the fake.
type runtime struct {
	*fake.RemoteRuntime
	cdi       *cdi.Cache
	outputDir string
}

func (r *runtime) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	rec := r.resolve(req.GetConfig(), req.GetSandboxConfig().GetMetadata())
	if err := writeRecord(r.outputDir, rec); err != nil {
		return nil, status.Errorf(codes.Internal, "fakecri: writing container record: %v", err)
	}
	if rec.Error != "" {
		return nil, status.Error(codes.Unknown, rec.Error)
	}
	resp, err := r.RemoteRuntime.CreateContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	r.createLog(resp.ContainerId, req.GetSandboxConfig().GetLogDirectory(), req.GetConfig().GetLogPath())
	return resp, nil
}

// createLog gives the container the (empty) log file a runtime would write, so the kubelet's log
// rotation and `kubectl logs` find one. The directory is the kubelet's podLogsDir.
func (r *runtime) createLog(id, dir, name string) {
	if dir == "" || name == "" {
		return
	}
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		log.Printf("fakecri: container log dir: %v", err)
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		log.Printf("fakecri: container log: %v", err)
		return
	}
	f.Close()
	r.RuntimeService.Lock()
	defer r.RuntimeService.Unlock()
	if c, ok := r.RuntimeService.Containers[id]; ok {
		c.LogPath = path
	}
}

// resolve builds the container's OCI spec from the kubelet's config and injects its CDI devices.
func (r *runtime) resolve(cfg *runtimeapi.ContainerConfig, pod *runtimeapi.PodSandboxMetadata) record {
	rec := record{
		PodNamespace: pod.GetNamespace(),
		PodName:      pod.GetName(),
		PodUID:       pod.GetUid(),
		Container:    cfg.GetMetadata().GetName(),
		Attempt:      cfg.GetMetadata().GetAttempt(),
		CreatedAt:    time.Now().UTC().Format(time.RFC3339Nano),
		CDIDevices:   []string{},
	}
	spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	for _, kv := range cfg.GetEnvs() {
		// string(): KeyValue.Value is a string in k8s.io/cri-api up to v0.36.1, bytes in v0.36.3 and v0.37.x.
		spec.Process.Env = append(spec.Process.Env, kv.GetKey()+"="+string(kv.GetValue()))
	}
	for _, m := range cfg.GetMounts() {
		opts := []string{"rbind"}
		if m.GetReadonly() {
			opts = append(opts, "ro")
		}
		spec.Mounts = append(spec.Mounts, oci.Mount{Destination: m.GetContainerPath(), Type: "bind", Source: m.GetHostPath(), Options: opts})
	}
	for _, d := range cfg.GetCDIDevices() {
		rec.CDIDevices = append(rec.CDIDevices, d.GetName())
	}
	if len(rec.CDIDevices) > 0 {
		// Refresh on every call: the plugin writes its spec just before the kubelet creates the container.
		if err := r.cdi.Refresh(); err != nil {
			rec.SpecErrors = strings.Split(err.Error(), "\n")
		}
		if _, err := r.cdi.InjectDevices(spec, rec.CDIDevices...); err != nil {
			rec.Error = fmt.Sprintf("failed to inject CDI devices: %v", err)
		}
	}
	rec.Env = append([]string{}, spec.Process.Env...)
	rec.Mounts = append([]oci.Mount{}, spec.Mounts...)
	rec.DeviceNodes = append([]oci.LinuxDevice{}, spec.Linux.Devices...)
	rec.Hooks = spec.Hooks
	return rec
}

// writeRecord replaces <dir>/<ns>_<pod>_<container>.json atomically (names cannot contain "_").
func writeRecord(dir string, rec record) error {
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	name := filepath.Join(dir, fmt.Sprintf("%s_%s_%s.json", rec.PodNamespace, rec.PodName, rec.Container))
	tmp, err := os.CreateTemp(dir, ".record-*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), name)
}

type dirList []string

func (d *dirList) String() string     { return strings.Join(*d, ",") }
func (d *dirList) Set(v string) error { *d = append(*d, v); return nil }

func main() {
	socket := flag.String("socket", "", "unix socket path to serve the CRI on (required)")
	outputDir := flag.String("output-dir", "", "directory for the per-container JSON records (required)")
	var cdiDirs dirList
	flag.Var(&cdiDirs, "cdi-spec-dir", "CDI spec directory (repeatable; default /etc/cdi and /var/run/cdi)")
	flag.Parse()
	if *socket == "" || *outputDir == "" {
		log.Fatal("fakecri: --socket and --output-dir are required")
	}
	if len(cdiDirs) == 0 {
		cdiDirs = dirList{"/etc/cdi", "/var/run/cdi"}
	}
	if err := os.MkdirAll(*outputDir, 0o755); err != nil {
		log.Fatalf("fakecri: %v", err)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(cdiDirs...), cdi.WithAutoRefresh(false))
	if err != nil {
		log.Fatalf("fakecri: CDI cache: %v", err)
	}

	fakeRuntime := fake.NewFakeRemoteRuntime()
	fakeRuntime.RuntimeService.FakeStatus = &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}
	// Say cgroupfs explicitly: an empty RuntimeConfig means "keep the kubelet's own setting".
	fakeRuntime.RuntimeService.FakeLinuxConfiguration = &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS}
	// The kubelet refuses images of size 0 (ImageInspectError) and wants an image filesystem to garbage-collect.
	fakeRuntime.ImageService.SetFakeImageSize(1 << 20)
	fakeRuntime.ImageService.SetFakeFilesystemUsage([]*runtimeapi.FilesystemUsage{{
		Timestamp:  time.Now().UnixNano(),
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: *outputDir},
		UsedBytes:  &runtimeapi.UInt64Value{Value: 0},
		InodesUsed: &runtimeapi.UInt64Value{Value: 0},
	}})
	rt := &runtime{RemoteRuntime: fakeRuntime, cdi: cache, outputDir: *outputDir}

	if err := os.Remove(*socket); err != nil && !os.IsNotExist(err) {
		log.Fatalf("fakecri: removing stale socket: %v", err)
	}
	listener, err := net.Listen("unix", *socket)
	if err != nil {
		log.Fatalf("fakecri: %v", err)
	}
	server := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(server, rt)
	runtimeapi.RegisterImageServiceServer(server, rt)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		sig := <-signals
		log.Printf("fakecri: %v, stopping", sig)
		server.Stop()
	}()
	log.Printf("fakecri: serving CRI on %s; CDI spec dirs %s; records in %s", *socket, cdiDirs.String(), *outputDir)
	if err := server.Serve(listener); err != nil {
		log.Fatalf("fakecri: %v", err)
	}
	os.Remove(*socket)
}
