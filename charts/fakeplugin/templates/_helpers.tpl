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

{{/* The inventory file's text: the value is either the YAML map itself or its text (--set-file). */}}
{{- define "fakeplugin.inventory" -}}
{{- if kindIs "string" .Values.inventory -}}
{{- .Values.inventory -}}
{{- else -}}
{{- toYaml .Values.inventory -}}
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

{{/* Name of the compute-domain controller's Deployment, ServiceAccount, roles, bindings and Lease. */}}
{{- define "fakeplugin.controllerName" -}}
{{- printf "%s-controller" (include "fakeplugin.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Name of the kubelet plugin's extra ClusterRole, Role and bindings for its compute-domains container. */}}
{{- define "fakeplugin.kubeletPluginComputeDomainsName" -}}
{{- printf "%s-kubelet-plugin-compute-domains" (include "fakeplugin.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
