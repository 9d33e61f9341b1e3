// Command karpenter: Karpenter's kwok provider (sigs.k8s.io/karpenter/kwok, started as its own
// kwok/main.go starts it) with GPU instance types whose DRA devices Karpenter can simulate.
//
// The kwok provider never fills an instance type's DynamicResources, so with IGNORE_DRA_REQUESTS=false
// no pod with a ResourceClaim fits any of them. This program reads the same INSTANCE_TYPES_FILE_PATH
// as the provider; fakeplugin writes it (fakeplugin/karpenter/instancetypes.py) with two more fields
// per type, which the provider's own decoding ignores:
//
//	resourceSlices     the ResourceSlice specs (resource.k8s.io/v1) the node's DRA drivers publish, without
//	                   the values only a running node knows (UUIDs, PCI addresses): Karpenter's
//	                   ResourceSliceTemplates (pkg/cloudprovider/dynamicresources.go, v1.15.0)
//	attributeBindings  the devices that share such a value at runtime (a MIG device and its parent GPU)
//
// and hands them on to the provisioner. A template naming no instance type of the file is an error.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"unique"

	"github.com/samber/lo"
	resourcev1 "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kwok "sigs.k8s.io/karpenter/kwok/cloudprovider"
	"sigs.k8s.io/karpenter/kwok/options"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/overlay"
	"sigs.k8s.io/karpenter/pkg/controllers"
	"sigs.k8s.io/karpenter/pkg/controllers/node/health"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/operator"
)

type deviceRef struct {
	Driver string `json:"driver"`
	Pool   string `json:"pool"`
	Device string `json:"device"`
}

type attributeBinding struct {
	Attribute resourcev1.QualifiedName `json:"attribute"`
	Devices   []deviceRef              `json:"devices"`
}

type gpuInstanceType struct {
	Name              string                           `json:"name"`
	ResourceSlices    []resourcev1.ResourceSliceSpec `json:"resourceSlices"`
	AttributeBindings []attributeBinding               `json:"attributeBindings"`
}

func templates(path string) (map[string]cloudprovider.DynamicResources, error) {
	if path == "" {
		return nil, fmt.Errorf("INSTANCE_TYPES_FILE_PATH is not set: fakeplugin's instance types file is required")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var types []gpuInstanceType
	if err := json.Unmarshal(raw, &types); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[string]cloudprovider.DynamicResources{}
	for _, t := range types {
		if len(t.ResourceSlices) == 0 {
			continue
		}
		var dr cloudprovider.DynamicResources
		for _, spec := range t.ResourceSlices {
			dr.ResourceSliceTemplates = append(dr.ResourceSliceTemplates, template(spec))
		}
		for _, b := range t.AttributeBindings {
			dr.AttributeBindings = append(dr.AttributeBindings, &cloudprovider.AttributeBinding{
				Attribute: b.Attribute,
				Devices: lo.Map(b.Devices, func(d deviceRef, _ int) cloudprovider.DeviceID {
					return cloudprovider.DeviceID{
						Driver: unique.Make(d.Driver), Pool: unique.Make(d.Pool), Device: unique.Make(d.Device),
					}
				}),
			})
		}
		out[t.Name] = dr
	}
	return out, nil
}

func template(spec resourcev1.ResourceSliceSpec) *cloudprovider.ResourceSliceTemplate {
	return &cloudprovider.ResourceSliceTemplate{
		Driver:         unique.Make(spec.Driver),
		Pool:           cloudprovider.ResourcePool{Name: unique.Make(spec.Pool.Name)},
		SharedCounters: spec.SharedCounters,
		Devices: lo.Map(spec.Devices, func(d resourcev1.Device, _ int) cloudprovider.Device {
			return cloudprovider.Device{
				Name:                     unique.Make(d.Name),
				Attributes:               d.Attributes,
				Capacity:                 d.Capacity,
				AllowMultipleAllocations: lo.FromPtr(d.AllowMultipleAllocations),
				ConsumesCounters:         d.ConsumesCounters,
			}
		}),
	}
}

func main() {
	ctx, op := operator.NewOperator()
	logger := log.FromContext(ctx)
	instanceTypes, err := kwok.ConstructInstanceTypes(ctx)
	if err != nil {
		logger.Error(err, "failed constructing instance types")
		os.Exit(1)
	}
	path := options.FromContext(ctx).InstanceTypesFilePath
	dynamic, err := templates(path)
	if err != nil {
		logger.Error(err, "failed reading the instance types' ResourceSlice templates")
		os.Exit(1)
	}
	for _, it := range instanceTypes {
		if dr, ok := dynamic[it.Name]; ok {
			it.DynamicResources = dr
			delete(dynamic, it.Name)
			logger.Info("instance type with DRA devices", "instanceType", it.Name,
				"resourceSliceTemplates", len(dr.ResourceSliceTemplates), "attributeBindings", len(dr.AttributeBindings))
		}
	}
	if len(dynamic) > 0 {
		logger.Error(fmt.Errorf("%s: templates for unknown instance types %v", path, lo.Keys(dynamic)), "invalid instance types file")
		os.Exit(1)
	}

	overlayUndecoratedCloudProvider := kwok.NewCloudProvider(ctx, op.GetClient(), instanceTypes)
	cloudProvider := overlay.Decorate(overlayUndecoratedCloudProvider, op.GetClient(), op.InstanceTypeStore)
	repairPolicyMatcher := lo.Must(health.NewRepairPolicyMatcher(ctx, cloudProvider))
	clusterState := state.NewCluster(op.Clock, op.GetClient(), cloudProvider, state.WithRepairPolicyMatcher(repairPolicyMatcher))
	op.
		WithControllers(ctx, controllers.NewControllers(
			ctx,
			op.Manager,
			op.Clock,
			op.GetClient(),
			op.EventRecorder,
			cloudProvider,
			overlayUndecoratedCloudProvider,
			clusterState,
			op.InstanceTypeStore,
			op.PredictionStore,
		)...).Start(ctx)
}
