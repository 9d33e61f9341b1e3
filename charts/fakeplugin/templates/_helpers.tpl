{{/* Chart name, overridable with nameOverride. */}}
{{- define "fakeplugin.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release-qualified name, overridable with fullnameOverride. */}}
{{- define "fakeplugin.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "fakeplugin.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Name of the kubelet plugin's DaemonSet, ServiceAccount, ClusterRole and binding. */}}
{{- define "fakeplugin.kubeletPluginName" -}}
{{- printf "%s-kubelet-plugin" (include "fakeplugin.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "fakeplugin.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fakeplugin.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fakeplugin.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "fakeplugin.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "fakeplugin.driverName" -}}
{{- .Values.driverName | default "gpu.nvidia.com" -}}
{{- end -}}

{{- define "fakeplugin.image" -}}
{{- $image := .Values.image | default dict -}}
{{- printf "%s:%s" ($image.repository | default "fakeplugin") ($image.tag | default .Chart.AppVersion | toString) -}}
{{- end -}}

{{/* The inventory file's text: the value is either the YAML map itself or its text (--set-file). Where it has
no top-level `gpuOperator`, gpuOperator.mode becomes the file's (appended to the text: no re-serialising). */}}
{{- define "fakeplugin.inventory" -}}
{{- $mode := include "fakeplugin.gpuOperatorMode" . -}}
{{- if kindIs "string" .Values.inventory -}}
{{- if hasKey (fromYaml .Values.inventory) "gpuOperator" -}}
{{- .Values.inventory -}}
{{- else -}}
{{- printf "%s\n# The chart's gpuOperator.mode.\ngpuOperator: %s\n" (trimSuffix "\n" .Values.inventory) $mode -}}
{{- end -}}
{{- else -}}
{{- $inventory := deepCopy (.Values.inventory | default dict) -}}
{{- if not (hasKey $inventory "gpuOperator") -}}
{{- $_ := set $inventory "gpuOperator" $mode -}}
{{- end -}}
{{- toYaml $inventory -}}
{{- end -}}
{{- end -}}

{{/* gpuOperator.mode: none, clusterPolicy or gpuCluster (values.schema.json). */}}
{{- define "fakeplugin.gpuOperatorMode" -}}
{{- dig "mode" "none" (.Values.gpuOperator | default dict) -}}
{{- end -}}

{{/* The GPU Operator's DCGM exporter of gpuOperator.mode, with telemetry.enabled: the name of its Service and
the `app` label of its Service and pods, "" otherwise. NVIDIA/gpu-operator v26.3.1 (ClusterPolicy)
assets/state-dcgm-exporter/0400_service.yaml and 0800_daemonset.yaml: nvidia-dcgm-exporter; v26.7.0
(GPUCluster) manifests/state-dcgm-exporter/0500_service.yaml and 0700_daemonset.yaml: nvidia-dcgm-exporter-dra. */}}
{{- define "fakeplugin.operatorExporter" -}}
{{- if dig "enabled" false (.Values.telemetry | default dict) -}}
{{- $mode := include "fakeplugin.gpuOperatorMode" . -}}
{{- if eq $mode "clusterPolicy" -}}nvidia-dcgm-exporter
{{- else if eq $mode "gpuCluster" -}}nvidia-dcgm-exporter-dra
{{- end -}}
{{- end -}}
{{- end -}}

{{/* FEATURE_GATES: "Name=true,Other=false", names sorted (Helm ranges over maps in key order). */}}
{{- define "fakeplugin.featureGates" -}}
{{- $gates := list -}}
{{- range $name, $on := .Values.featureGates -}}
{{- $gates = append $gates (printf "%s=%t" $name $on) -}}
{{- end -}}
{{- join "," $gates -}}
{{- end -}}

{{/* Whether the ComputeDomain side is on (resources.computeDomains.enabled): "true" or "". */}}
{{- define "fakeplugin.computeDomains" -}}
{{- if dig "computeDomains" "enabled" false (.Values.resources | default dict) -}}true{{- end -}}
{{- end -}}

{{/* Whether ComputeDomain channels carry KEP-5007 binding conditions (resources.computeDomains.bindingConditions,
with .enabled): "true" or "". One value, so the plugins' slices and the controller that answers them agree. */}}
{{- define "fakeplugin.bindingConditions" -}}
{{- if and (include "fakeplugin.computeDomains" .) (dig "computeDomains" "bindingConditions" false (.Values.resources | default dict)) -}}true{{- end -}}
{{- end -}}

{{/* Name of the compute-domain controller's Deployment, ServiceAccount, roles, bindings and Lease. */}}
{{- define "fakeplugin.controllerName" -}}
{{- printf "%s-controller" (include "fakeplugin.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Name of the kubelet plugin's extra ClusterRole, Role and bindings for its compute-domains container. */}}
{{- define "fakeplugin.kubeletPluginComputeDomainsName" -}}
{{- printf "%s-kubelet-plugin-compute-domains" (include "fakeplugin.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The emulation's environment, the same for the kubelet plugin and the fleet (each a `fakeplugin` command
reading these flags' env vars): driver name, inventory, verbosity, NVIDIA feature gates, release, shares. */}}
{{- define "fakeplugin.emulationEnv" -}}
- name: DRIVER_NAME
  value: {{ include "fakeplugin.driverName" . | quote }}
- name: FAKEPLUGIN_INVENTORY
  value: /etc/fakeplugin/inventory.yaml
- name: LOG_VERBOSITY
  value: {{ .Values.logVerbosity | default 0 | quote }}
- name: FEATURE_GATES
  value: {{ include "fakeplugin.featureGates" . | quote }}
- name: DRIVER_RELEASE
  value: {{ .Values.driverRelease | quote }}
{{- if .Values.consumableShares }}
- name: CONSUMABLE_SHARES
  value: {{ .Values.consumableShares | quote }}
{{- end }}
{{- end -}}

{{/* Name of the fleet's ServiceAccount, ClusterRole (the owner of its Nodes) and binding; its Deployments
are <this>-<shard>. */}}
{{- define "fakeplugin.fleetName" -}}
{{- printf "%s-fleet" (include "fakeplugin.fullname" .) | trunc 60 | trimSuffix "-" -}}
{{- end -}}

{{/* Name of the kwok controller's Deployment, ConfigMap, ServiceAccount, ClusterRole and binding. */}}
{{- define "fakeplugin.kwokName" -}}
{{- printf "%s-kwok" (include "fakeplugin.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The value of fakeplugin.dev/fleet on the Nodes the fleet creates: the release, namespace-qualified. */}}
{{- define "fakeplugin.fleetOwner" -}}
{{- printf "%s.%s" .Release.Namespace .Release.Name | trunc 63 | trimSuffix "-" | trimSuffix "." -}}
{{- end -}}

{{/* Keeps a pod of ours off the simulated nodes (kwok's `type: kwok` label, fleet.nodeobjects). */}}
{{- define "fakeplugin.offSimulatedNodes" -}}
nodeAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    nodeSelectorTerms:
      - matchExpressions:
          - key: type
            operator: NotIn
            values: [kwok]
{{- end -}}
