{{/* Chart name, truncated to 63 characters (a DNS label). */}}
{{- define "tailpilot.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release + chart name unless the release name already contains it. */}}
{{- define "tailpilot.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Standard labels of every object of the chart. */}}
{{- define "tailpilot.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "tailpilot.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tailpilot
{{- end }}

{{/* Labels selecting the operator pod (immutable on the Deployment). */}}
{{- define "tailpilot.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tailpilot.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* ServiceAccount name. */}}
{{- define "tailpilot.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tailpilot.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* An image reference from repository, tag (default appVersion) and optional digest. */}}
{{- define "tailpilot.image" -}}
{{- $tag := default .root.Chart.AppVersion .image.tag -}}
{{- if .image.digest -}}
{{ .image.repository }}@{{ .image.digest }}
{{- else -}}
{{ .image.repository }}:{{ $tag }}
{{- end -}}
{{- end }}

{{/* Secret holding the webhook's bearer token: the user's (webhook.tokenSecret.name), else the generated one. */}}
{{- define "tailpilot.webhookTokenSecretName" -}}
{{- default (printf "%s-webhook-token" (include "tailpilot.fullname" . | trunc 50 | trimSuffix "-")) .Values.webhook.tokenSecret.name }}
{{- end }}

{{/*
Who the services' NetworkPolicies admit, as TAILPILOT_NETWORK_POLICY's JSON: the clients, the
Prometheus, and the operator's own pods (their namespace and selector labels). The activator
forwards the clients' requests, so where the clients are listed it is one of them; where they are
not (every source), adding it would narrow the rule to it.
*/}}
{{- define "tailpilot.networkPolicyPeers" -}}
{{- $prometheus := dict "namespaceSelector" .Values.networkPolicy.prometheus.namespaceSelector "podSelector" .Values.networkPolicy.prometheus.podSelector -}}
{{- $operatorNamespace := dict "matchLabels" (dict "kubernetes.io/metadata.name" .Release.Namespace) -}}
{{- $operatorPods := dict "matchLabels" (include "tailpilot.selectorLabels" . | fromYaml) -}}
{{- $operator := dict "namespaceSelector" $operatorNamespace "podSelector" $operatorPods -}}
{{- $clients := .Values.networkPolicy.tritonClients -}}
{{- if and $clients .Values.activator.enabled -}}
{{- $activatorPods := dict "matchLabels" (include "tailpilot.activatorSelectorLabels" . | fromYaml) -}}
{{- $clients = append $clients (dict "namespaceSelector" $operatorNamespace "podSelector" $activatorPods) -}}
{{- end -}}
{{- dict "clients" $clients "prometheus" (list $prometheus) "operator" (list $operator) | toJson -}}
{{- end }}

{{/* The activator's name (its Deployment, Service, ServiceAccount and RBAC): `<fullname>-activator`, within 63. */}}
{{- define "tailpilot.activatorName" -}}
{{- printf "%s-activator" (include "tailpilot.fullname" . | trunc 53 | trimSuffix "-") }}
{{- end }}

{{/* Labels selecting the activator's pods (immutable on the Deployment); never the operator's. */}}
{{- define "tailpilot.activatorSelectorLabels" -}}
app.kubernetes.io/name: {{ include "tailpilot.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: activator
{{- end }}

{{/* Standard labels of the activator's objects (`tailpilot.labels` with the activator's component). */}}
{{- define "tailpilot.activatorLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "tailpilot.activatorSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tailpilot
{{- end }}

{{/* The activator's ServiceAccount name. */}}
{{- define "tailpilot.activatorServiceAccountName" -}}
{{- if .Values.activator.serviceAccount.create }}
{{- default (include "tailpilot.activatorName" .) .Values.activator.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.activator.serviceAccount.name }}
{{- end }}
{{- end }}
