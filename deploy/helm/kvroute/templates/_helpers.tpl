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

{{/* The router's --config file: router.config plus what the chart's own values set. */}}
{{- define "kvroute.routerConfig" -}}
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
  - {{ printf "%s=%s" $k $v | quote }}
{{- end }}
service-discovery-port: {{ .Values.discovery.port }}
service-discovery-namespace: {{ include "kvroute.discoveryNamespace" . }}
{{- end }}
{{- end -}}
