{{/* Names */}}
{{- define "ahp-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ahp-gateway.fullname" -}}
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

{{- define "ahp-gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels */}}
{{- define "ahp-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ahp-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "ahp-gateway.labels" -}}
helm.sh/chart: {{ include "ahp-gateway.chart" . }}
{{ include "ahp-gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ahp-gateway
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "ahp-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ahp-gateway.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The image reference. global.imageRegistry (a mirror shared by parent charts) replaces the registry
host of image.repository (its first segment when it contains "." or ":" or is "localhost"), or
prefixes a repository that names none.
*/}}
{{- define "ahp-gateway.imageRepository" -}}
{{- $repo := .Values.image.repository }}
{{- $registry := "" }}
{{- with .Values.global }}{{ $registry = default "" .imageRegistry | trimSuffix "/" }}{{ end }}
{{- if $registry }}
{{- $parts := splitList "/" $repo }}
{{- $first := first $parts }}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) }}
{{- $repo = rest $parts | join "/" }}
{{- end }}
{{- $repo = printf "%s/%s" $registry $repo }}
{{- end }}
{{- $repo }}
{{- end }}

{{- define "ahp-gateway.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" (include "ahp-gateway.imageRepository" .) .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" (include "ahp-gateway.imageRepository" .) (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* Fixed paths inside the container. */}}
{{- define "ahp-gateway.configDir" -}}/etc/ahp-gateway{{- end }}
{{- define "ahp-gateway.configPath" -}}/etc/ahp-gateway/gateway.yaml{{- end }}

{{/*
The gateway configuration as a YAML document: .Values.config (already merged over the chart's
defaults by Helm) with the listeners forced onto all interfaces, `shutdown` taken from
.Values.shutdown (so the drain timings always match the pod's grace period) and `reload.watch`
from .Values.reloadStrategy (hot: reload when the mounted files change; rollout: a pod keeps the
configuration it started with and changes arrive by a rolling update).
*/}}
{{- define "ahp-gateway.config" -}}
{{- $cfg := deepCopy (default (dict) .Values.config) }}
{{- $listen := default (dict) $cfg.listen }}
{{- $_ := set $listen "host" (default "0.0.0.0" $listen.host) }}
{{- $_ := set $cfg "listen" $listen }}
{{- $admin := default (dict) $cfg.admin }}
{{- $_ := set $admin "host" (default "0.0.0.0" $admin.host) }}
{{- $_ := set $cfg "admin" $admin }}
{{- $_ := set $cfg "shutdown" (dict "drainDelaySeconds" .Values.shutdown.drainDelaySeconds "drainTimeoutSeconds" .Values.shutdown.drainTimeoutSeconds) }}
{{- $reload := default (dict) $cfg.reload }}
{{- $_ := set $reload "watch" (eq .Values.reloadStrategy "hot") }}
{{- $_ := set $cfg "reload" $reload }}
{{- if and (not $cfg.inbound) (eq (include "ahp-gateway.inboundTokens" .) "true") }}
{{- $_ := set $cfg "inbound" (dict "auth" (dict "type" "bearer" "tokensFile" (printf "%s/%s" (trimSuffix "/" .Values.inboundAuth.mountPath) .Values.inboundAuth.key))) }}
{{- end }}
{{- $redisUrl := include "ahp-gateway.redisUrl" . }}
{{- if and $redisUrl (not $cfg.state) }}
{{- $redis := dict "url" $redisUrl "keyPrefix" .Values.state.redis.keyPrefix "timeoutMs" .Values.state.redis.timeoutMs }}
{{- if .Values.state.redis.passwordSecret.name }}
{{- $_ := set $redis "passwordEnv" "AHP_GATEWAY_REDIS_PASSWORD" }}
{{- end }}
{{- $_ := set $cfg "state" (dict "redis" $redis) }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/*
state.redis.url, or the trial Redis' Service when redis.enabled; empty: no shared state.
*/}}
{{- define "ahp-gateway.redisUrl" -}}
{{- if .Values.state.redis.url -}}
{{ .Values.state.redis.url }}
{{- else if .Values.redis.enabled -}}
redis://{{ include "ahp-gateway.fullname" . }}-redis:6379/0
{{- end -}}
{{- end }}

{{- define "ahp-gateway.listenPort" -}}
{{- $cfg := include "ahp-gateway.config" . | fromYaml }}
{{- $cfg.listen.port | default 8080 | int }}
{{- end }}

{{- define "ahp-gateway.adminPort" -}}
{{- $cfg := include "ahp-gateway.config" . | fromYaml }}
{{- $cfg.admin.port | default 9464 | int }}
{{- end }}

{{/* Policy files (name -> content): the chart's library, then .Values.policies over it. */}}
{{- define "ahp-gateway.policies" -}}
{{- $all := dict }}
{{- if .Values.defaultPolicies.enabled }}
{{- range $path, $_ := .Files.Glob "files/policies/*.yaml" }}
{{- $name := base $path }}
{{- if not (has $name $.Values.defaultPolicies.exclude) }}
{{- $_ := set $all $name ($.Files.Get $path) }}
{{- end }}
{{- end }}
{{- end }}
{{- range $name, $content := .Values.policies }}
{{- if $content }}
{{- $_ := set $all $name $content }}
{{- else }}
{{- $_ := unset $all $name }}
{{- end }}
{{- end }}
{{- toYaml $all }}
{{ "" }}
{{- end }}

{{/* Hash of everything mounted from ConfigMaps, for reloadStrategy: rollout. */}}
{{- define "ahp-gateway.configChecksum" -}}
{{- printf "%s\n---\n%s\n---\n%s" (include "ahp-gateway.config" .) (include "ahp-gateway.policies" .) (toYaml .Values.extraConfigFiles) | sha256sum }}
{{- end }}

{{/* Seconds Kubernetes waits between the preStop hook start and SIGKILL. */}}
{{- define "ahp-gateway.terminationGracePeriodSeconds" -}}
{{- $s := .Values.shutdown }}
{{- $needed := add (int $s.preStopSleepSeconds) (int $s.drainDelaySeconds) (int $s.drainTimeoutSeconds) }}
{{- if kindIs "invalid" $s.terminationGracePeriodSeconds }}
{{- add $needed 5 }}
{{- else if lt (int $s.terminationGracePeriodSeconds) (int $needed) }}
{{- fail (printf "shutdown.terminationGracePeriodSeconds (%d) must be at least preStopSleepSeconds + drainDelaySeconds + drainTimeoutSeconds (%d)" (int $s.terminationGracePeriodSeconds) (int $needed)) }}
{{- else }}
{{- int $s.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{/* "sleep" or "exec" for the preStop hook. */}}
{{- define "ahp-gateway.preStopHook" -}}
{{- $mode := .Values.shutdown.preStopHook }}
{{- if eq $mode "auto" }}
{{- if semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version }}sleep{{ else }}exec{{ end }}
{{- else }}
{{- $mode }}
{{- end }}
{{- end }}

{{/*
Every secret the configuration references must be provided by the chart: env:NAME / tokenEnv by
upstreamSecrets (or extraEnv with valueFrom), file:/path by a mount of upstreamSecretFiles (or
extraVolumeMounts). Fails the render with the hook id otherwise.
*/}}
{{- define "ahp-gateway.checkSecretRefs" -}}
{{- $envs := list }}
{{- range .Values.upstreamSecrets }}{{ $envs = append $envs .name }}{{ end }}
{{- range .Values.extraEnv }}{{ if .valueFrom }}{{ $envs = append $envs .name }}{{ end }}{{ end }}
{{- $dirs := list }}
{{- range .Values.upstreamSecretFiles }}{{ $dirs = append $dirs (include "ahp-gateway.secretMountPath" .) }}{{ end }}
{{- range .Values.extraVolumeMounts }}{{ $dirs = append $dirs .mountPath }}{{ end }}
{{- $cfg := default (dict) .Values.config }}
{{- range $hook := default (list) $cfg.hooks }}
{{- with $hook.authentication }}
{{- $refs := list }}
{{- if .tokenEnv }}{{ $refs = append $refs (printf "env:%s" .tokenEnv) }}{{ end }}
{{- if .tokenRef }}{{ $refs = append $refs .tokenRef }}{{ end }}
{{- if .clientSecretRef }}{{ $refs = append $refs .clientSecretRef }}{{ end }}
{{- range $ref := $refs }}
{{- if hasPrefix "env:" $ref }}
{{- $name := trimPrefix "env:" $ref }}
{{- if not (has $name $envs) }}
{{- fail (printf "hook %s references environment variable %s: add it to upstreamSecrets ({name: %s, secretName: ..., key: ...})" $hook.id $name $name) }}
{{- end }}
{{- else if hasPrefix "file:" $ref }}
{{- $path := trimPrefix "file:" $ref }}
{{- $found := false }}
{{- range $dir := $dirs }}{{ if hasPrefix (printf "%s/" (trimSuffix "/" $dir)) $path }}{{ $found = true }}{{ end }}{{ end }}
{{- if not $found }}
{{- fail (printf "hook %s references file %s, which is not under a mount of upstreamSecretFiles" $hook.id $path) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{- define "ahp-gateway.secretMountPath" -}}
{{- default (printf "/var/run/secrets/ahp-gateway/%s" .secretName) .mountPath | trimSuffix "/" }}
{{- end }}

{{/* "true" when the chart mounts the inbound bearer tokens Secret (no config.inbound given). */}}
{{- define "ahp-gateway.inboundTokens" -}}
{{- $cfg := default (dict) .Values.config }}
{{- $auth := default (dict) .Values.inboundAuth }}
{{- if and (not $cfg.inbound) (eq (default "bearer" $auth.type) "bearer") }}true{{ else }}false{{ end }}
{{- end }}

{{/* Name of the inbound tokens Secret: inboundAuth.existingSecret, else the one the chart creates. */}}
{{- define "ahp-gateway.inboundTokensSecret" -}}
{{- default (printf "%s-inbound-tokens" (include "ahp-gateway.fullname" .)) .Values.inboundAuth.existingSecret }}
{{- end }}

{{/* Namespace of every namespaced object: namespaceOverride, else the release namespace. */}}
{{- define "ahp-gateway.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
An `annotations:` block for top-level metadata (starts with its own newline, indented 2): commonAnnotations with the object's own annotations (extra)
over them; nothing when both are empty. Call: include ... (dict "ctx" $ "extra" .Values.x.annotations).
*/}}
{{- define "ahp-gateway.metadataAnnotations" -}}
{{- $all := merge (deepCopy (default (dict) .extra)) (deepCopy (default (dict) .ctx.Values.commonAnnotations)) }}
{{- with $all }}
  annotations:
    {{- toYaml . | nindent 4 }}
{{- end }}
{{- end }}

{{/*
The PromQL matcher that selects this release's series in files/alerts.yaml: prometheusRule.selector,
else the labels the Prometheus Operator puts on targets of the chart's ServiceMonitor (namespace and
Service name). Unlike the file's default `job=~".*ahp-gateway.*"` it still matches with nameOverride
or fullnameOverride, and keeps two releases apart.
*/}}
{{- define "ahp-gateway.alertSelector" -}}
{{- if .Values.prometheusRule.selector }}
{{- .Values.prometheusRule.selector }}
{{- else }}
{{- printf "namespace=%q, service=%q" (include "ahp-gateway.namespace" .) (include "ahp-gateway.fullname" .) }}
{{- end }}
{{- end }}

{{/* files/alerts.yaml with the gateway matcher and (optionally) the runbook base URL replaced. */}}
{{- define "ahp-gateway.alertRules" -}}
{{- $text := .Files.Get "files/alerts.yaml" | replace `job=~".*ahp-gateway.*"` (include "ahp-gateway.alertSelector" .) }}
{{- with .Values.prometheusRule.runbookBaseUrl }}
{{- $text = $text | replace "https://github.com/ahp-gateway/ahp-gateway/blob/main/grafana/README.md" (trimSuffix "/" .) }}
{{- end }}
{{- $text }}
{{- end }}

{{/*
Labels of the `helm test` pod: the chart's labels without app.kubernetes.io/instance (so no selector
of the release matches it) plus a component and the release, which the NetworkPolicy admits.
*/}}
{{- define "ahp-gateway.testLabels" -}}
{{- $labels := include "ahp-gateway.labels" . | fromYaml }}
{{- $_ := unset $labels "app.kubernetes.io/instance" }}
{{- $_ := set $labels "app.kubernetes.io/component" "helm-test" }}
{{- $_ := set $labels "ahp-gateway/test-of" .Release.Name }}
{{- toYaml $labels }}
{{- end }}
