{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "kvroute.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release-scoped resource name. */}}
{{- define "kvroute.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if eq .Release.Name (include "kvroute.name" .) -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "kvroute.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kvroute.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kvroute.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kvroute.labels" -}}
{{ include "kvroute.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kvroute.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kvroute.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kvroute.discoveryNamespace" -}}
{{- default .Release.Namespace .Values.discovery.namespace -}}
{{- end -}}

{{- define "kvroute.adminSecretName" -}}
{{- default (include "kvroute.fullname" .) .Values.adminToken.existingSecret -}}
{{- end -}}

{{- define "kvroute.apiKeySecretName" -}}
{{- default (include "kvroute.fullname" .) .Values.apiKey.existingSecret -}}
{{- end -}}

{{/* The data of the chart's own Secret: empty when every secret value comes from an existing Secret. */}}
{{- define "kvroute.secretData" -}}
{{- if and .Values.adminToken.value (not .Values.adminToken.existingSecret) }}
admin-token: {{ .Values.adminToken.value | b64enc | quote }}
{{- end }}
{{- if and .Values.apiKey.value (not .Values.apiKey.existingSecret) }}
{{- range (regexSplit "[\\s,]+" (toString .Values.apiKey.value) -1) }}
{{- if and . (lt (len .) 8) }}
{{- fail "apiKey.value: each key must be at least 8 characters (the router refuses shorter ones)" }}
{{- end }}
{{- end }}
api-key: {{ .Values.apiKey.value | b64enc | quote }}
{{- end }}
{{- end -}}

{{/* The job label Prometheus gives the router's targets: the Service's name under the chart's ServiceMonitor. */}}
{{- define "kvroute.metricsJob" -}}
{{- default (include "kvroute.fullname" .) .Values.prometheusRule.job -}}
{{- end -}}

{{/*
Refuses what would start a router that cannot work: router.config keys the chart owns (set
through the environment, which beats the file; or written into the file by the chart, which
would repeat the key), and a router without any way to find workers.
*/}}
{{- define "kvroute.checkConfig" -}}
{{- range $k, $v := .Values.router.config }}
{{- if eq $k "host" "port" "log-level" "logLevel" "log-format" "logFormat" }}
{{- fail (printf "router.config.%s: the chart sets it through the environment (which overrides the config file): use router.port or router.logLevel (the router listens on 0.0.0.0 and logs JSON)" $k) }}
{{- else if eq $k "worker-urls" "workerUrls" "selector" "service-discovery" "serviceDiscovery" "service-discovery-port" "serviceDiscoveryPort" "service-discovery-namespace" "serviceDiscoveryNamespace" }}
{{- fail (printf "router.config.%s: the chart writes it from router.workerUrls and discovery.* (enabled, selector, port, namespace): set those instead" $k) }}
{{- else if eq $k "admin-port" "adminPort" "admin-host" "adminHost" }}
{{- fail (printf "router.config.%s: would move /metrics and the admin routes off the port the Service, the probes and the ServiceMonitor use; not supported by the chart" $k) }}
{{- else if eq $k "admin-token" "adminToken" "api-key" "api-keys" "apiKeys" }}
{{- fail (printf "router.config.%s: a credential does not belong in the ConfigMap: use adminToken.value / adminToken.existingSecret or apiKey.value / apiKey.existingSecret" $k) }}
{{- else if eq $k "record-trace" "recordTrace" }}
{{- /* The deepest mount holding the path decides, as in the container: it must be writable. */}}
{{- $path := printf "%v" $v }}
{{- $best := dict "depth" 0 "writable" false }}
{{- if hasPrefix "/etc/kvroute/" $path }}
{{- $_ := set $best "depth" (len "/etc/kvroute") }}
{{- end }}
{{- if $.Values.recording.enabled }}
{{- $mp := trimSuffix "/" $.Values.recording.path }}
{{- if and (hasPrefix (printf "%s/" $mp) $path) (gt (len $mp) $best.depth) }}
{{- $_ := set $best "depth" (len $mp) }}
{{- $_ := set $best "writable" true }}
{{- end }}
{{- end }}
{{- range $.Values.extraVolumeMounts }}
{{- $mp := trimSuffix "/" (printf "%v" .mountPath) }}
{{- if and (hasPrefix (printf "%s/" $mp) $path) (gt (len $mp) $best.depth) }}
{{- $_ := set $best "depth" (len $mp) }}
{{- $_ := set $best "writable" (not .readOnly) }}
{{- end }}
{{- end }}
{{- if not $best.writable }}
{{- fail (printf "router.config.%s: the root filesystem is read-only and %s is not under a writable volume: set recording.enabled=true and write under recording.path (%s), or mount a writable volume over its directory with extraVolumeMounts (the router would exit at start)" $k $path $.Values.recording.path) }}
{{- end }}
{{- end }}
{{- end }}
{{- if not (or .Values.discovery.enabled .Values.router.workerUrls .Values.adminToken.value .Values.adminToken.existingSecret (hasKey .Values.router.config "models") (hasKey .Values.router.config "model-group") (hasKey .Values.router.config "modelGroups") (hasKey .Values.router.config "mock-workers") (hasKey .Values.router.config "mockWorkers")) }}
{{- fail "no workers: with discovery.enabled=false give router.workerUrls (or model groups in router.config: models, model-group or modelGroups), or an admin token (adminToken.value or .existingSecret) to add workers through POST /ranks; the router would exit with \"no workers\"" }}
{{- end }}
{{- end -}}

{{/* The router's --config file: router.config plus what the chart's own values set. */}}
{{- define "kvroute.routerConfig" -}}
{{- include "kvroute.checkConfig" . }}
{{- with .Values.router.config }}
{{ toYaml . }}
{{- end }}
{{- with .Values.router.workerUrls }}
worker-urls:
{{ toYaml . }}
{{- end }}
{{- if .Values.discovery.enabled }}
{{- if not .Values.discovery.selector }}
{{- fail "discovery.selector: give the worker pods' labels (e.g. app: sglang), or set discovery.enabled=false and router.workerUrls" }}
{{- end }}
service-discovery: true
selector:
{{- range $k, $v := .Values.discovery.selector }}
  - {{ printf "%s=%v" $k $v | quote }}
{{- end }}
service-discovery-port: {{ .Values.discovery.port }}
service-discovery-namespace: {{ include "kvroute.discoveryNamespace" . }}
{{- end }}
{{- end -}}
