{{/* The release's name for every object: RELEASE-goodput, or RELEASE when it already says goodput. */}}
{{- define "goodput.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "goodput.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "goodput.labels" -}}
{{ include "goodput.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "goodput.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "goodput.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding tenants.yaml, or "" when there are no tenants. */}}
{{- define "goodput.tenantsSecret" -}}
{{- if .Values.tenantsSecret.existingSecret -}}
{{- .Values.tenantsSecret.existingSecret -}}
{{- else if .Values.tenants -}}
{{- printf "%s-tenants" (include "goodput.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/*
goodput.yaml: the user's config with the settings the chart owns. The
ports are the container's; the tenants file is the Secret's mount, named
relative to the config's folder (/etc/goodput/config), as the gateway
resolves it.
*/}}
{{- define "goodput.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) -}}
{{- if or (hasKey $cfg "tenants") (hasKey $cfg "tenants_file") -}}
{{- fail "config.tenants and config.tenants_file: put tenants in the chart's tenants: (or tenantsSecret.existingSecret), which is stored in a Secret" -}}
{{- end -}}
{{- $_ := set $cfg "listen" ":8080" -}}
{{- $_ := set $cfg "admin_listen" ":9090" -}}
{{- $_ := set $cfg "shutdown_grace" (printf "%ds" (int .Values.shutdownGraceSeconds)) -}}
{{- if include "goodput.tenantsSecret" . -}}
{{- $_ := set $cfg "tenants_file" "../tenants/tenants.yaml" -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}
