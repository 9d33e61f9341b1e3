// Command gonvlib lists the GPUs NVML shows as NVIDIA's go-nvlib derives them (the library NVIDIA's DRA
// driver and device plugin build their devices with): per GPU its UUID, name, architecture, brand and CUDA
// compute capability strings, PCI bus ID and MIG state, and its MIG devices' UUIDs; one JSON document on
// stdout. tests/test_nvml_gonvlib.py runs it against the mock libnvidia-ml.so.1.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

type gpu struct {
	UUID                  string   `json:"uuid"`
	Name                  string   `json:"name"`
	Architecture          string   `json:"architecture"`
	Brand                 string   `json:"brand"`
	CudaComputeCapability string   `json:"cudaComputeCapability"`
	PCIBusID              string   `json:"pciBusID"`
	MigCapable            bool     `json:"migCapable"`
	MigEnabled            bool     `json:"migEnabled"`
	MigUUIDs              []string `json:"migUUIDs"`
}

func describe(d device.Device) (gpu, error) {
	var g gpu
	var ret nvml.Return
	var err error
	if g.UUID, ret = d.GetUUID(); ret != nvml.SUCCESS {
		return g, fmt.Errorf("uuid: %v", ret)
	}
	if g.Name, ret = d.GetName(); ret != nvml.SUCCESS {
		return g, fmt.Errorf("name: %v", ret)
	}
	for _, step := range []func() error{
		func() error { g.Architecture, err = d.GetArchitectureAsString(); return err },
		func() error { g.Brand, err = d.GetBrandAsString(); return err },
		func() error { g.CudaComputeCapability, err = d.GetCudaComputeCapabilityAsString(); return err },
		func() error { g.PCIBusID, err = d.GetPCIBusID(); return err },
		func() error { g.MigCapable, err = d.IsMigCapable(); return err },
		func() error { g.MigEnabled, err = d.IsMigEnabled(); return err },
	} {
		if err := step(); err != nil {
			return g, err
		}
	}
	g.MigUUIDs = []string{}
	err = d.VisitMigDevices(func(_ int, m device.MigDevice) error {
		uuid, ret := m.GetUUID()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("MIG uuid: %v", ret)
		}
		g.MigUUIDs = append(g.MigUUIDs, uuid)
		return nil
	})
	return g, err
}

func main() {
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		fmt.Fprintf(os.Stderr, "nvml init: %v\n", ret)
		os.Exit(1)
	}
	defer lib.Shutdown()
	gpus := []gpu{}
	err := device.New(lib).VisitDevices(func(_ int, d device.Device) error {
		g, err := describe(d)
		gpus = append(gpus, g)
		return err
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "go-nvlib: %v\n", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(gpus); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
}
