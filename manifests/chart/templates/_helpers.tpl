{{/*
The objects' name: `<release>-watch` (workload-update-guard-watch for the release the add-on
installs), so that they never take the names of manifests/base (the Jobs' ServiceAccounts and
RBAC, which hack/job.sh applies before every run): both can be installed at once.
*/}}
{{- define "wug.fullname" -}}
{{- printf "%s-watch" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "wug.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "wug.labels" -}}
{{ include "wug.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/*
repository:tag, the tag the chart's appVersion unless image.tag says otherwise; with a digest,
repository:tag@digest, and the tag must then be given and be this chart's appVersion: a digest
pins one build, and the tag says which version it is. So a `helm upgrade` to a new chart with the
old digest (`--reuse-values`, the install's values file) is refused rather than running the old
binary under the new chart's name.
*/}}
{{- define "wug.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- with .Values.image.digest -}}
{{- if not $.Values.image.tag -}}
{{- fail (printf "image.digest %s needs image.tag, the version it was pushed as (hack/image.sh push prints REF:VERSION@sha256:...): --set image.tag=%s,image.digest=... for this chart" . $.Chart.AppVersion) -}}
{{- end -}}
{{- if ne $tag $.Chart.AppVersion -}}
{{- fail (printf "image.tag %s with image.digest %s pins a build of version %s, but this chart is version %s: give this version's digest with --set image.tag=%s,image.digest=sha256:... (hack/image.sh push prints it), or drop both to run %s:%s" $tag . $tag $.Chart.AppVersion $.Chart.AppVersion $.Values.image.repository $.Chart.AppVersion) -}}
{{- end -}}
{{- printf "%s:%s@%s" $.Values.image.repository $tag . -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/*
Whether the Prometheus operator's monitoring.coreos.com/v1 KIND is to be rendered: `enabled`
true or false says so; null (the default) renders it where the cluster serves that kind
(`.Capabilities`; `helm template` without `--api-versions` has no cluster, so none). Call with
(dict "root" $ "enabled" VALUE "kind" "PrometheusRule").
*/}}
{{- define "wug.monitoringOn" -}}
{{- if kindIs "invalid" .enabled -}}
{{- if .root.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" .kind) }}true{{ end -}}
{{- else if .enabled }}true{{ end -}}
{{- end -}}

{{/*
The guard's settings as environment variables: each key of `guard:` maps to the one variable it
names (docs/configuration.md); a key not in this map fails the render (values.schema.json also
refuses it, with the list). null leaves the binary's default.
*/}}
{{- define "wug.guardEnvNames" -}}
kubevirtNamespace: KUBEVIRT_NAMESPACE
kubevirtName: KUBEVIRT_NAME
managedChartNamespace: MANAGEDCHART_NAMESPACE
managedChartName: MANAGEDCHART_NAME
logFormat: LOG_FORMAT
rustLog: RUST_LOG
watchResyncSeconds: WATCH_RESYNC_SECONDS
fleetWaitSeconds: FLEET_WAIT_SECONDS
deadlineSeconds: DEADLINE_SECONDS
preEvenIfNotNeeded: PRE_EVEN_IF_NOT_NEEDED
fallbackMethods: FALLBACK_METHODS
allowMissing: ALLOW_MISSING
stepKubevirt: STEP_KUBEVIRT
stepComparePatches: STEP_COMPARE_PATCHES
stepChartValues: STEP_CHART_VALUES
{{- end -}}

{{/*
The container's env: the guard's settings (but those named in `omit`), then `overrides` (a dict
NAME: value, the phase's own), then extraEnv (a number or boolean value as a string). A name set twice fails the render (the API server
would keep the last one and warn). Call with (dict "root" $ "overrides" (dict ...) "omit" (list ...)).
*/}}
{{- define "wug.env" -}}
{{- $root := .root -}}
{{- $names := include "wug.guardEnvNames" $root | fromYaml -}}
{{- $env := dict -}}
{{- range $key, $value := $root.Values.guard -}}
{{- $name := get $names $key -}}
{{- if not $name -}}
{{- fail (printf "guard.%s is not a setting of the guard; the settings: %s" $key (keys $names | sortAlpha | join ", ")) -}}
{{- end -}}
{{- if and (not (kindIs "invalid" $value)) (not (has $name ($.omit | default list))) -}}
{{- $_ := set $env $name (include "wug.string" $value) -}}
{{- end -}}
{{- end -}}
{{- range $name, $value := .overrides -}}
{{- $_ := set $env $name (include "wug.string" $value) -}}
{{- end -}}
{{- range $name := keys $env | sortAlpha }}
- name: {{ $name }}
  value: {{ get $env $name | quote }}
{{- end -}}
{{- range $root.Values.extraEnv -}}
{{- if hasKey $env .name -}}
{{- fail (printf "extraEnv: %s is already set by the chart (guard: or the phase)" .name) -}}
{{- end -}}
{{- $item := deepCopy . -}}
{{- if hasKey $item "value" -}}
{{- $_ := set $item "value" (include "wug.string" $item.value) -}}
{{- end }}
- {{ toJson $item }}
{{- end -}}
{{- end -}}

{{/* The pod's and the container's hardening: the Jobs' (manifests/job/job.yaml). */}}
{{- define "wug.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{- define "wug.containerSecurityContext" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities: {drop: [ALL]}
{{- end -}}

{{/*
Where the pod runs and how it pulls: imagePullSecrets, priorityClassName, nodeSelector, affinity
and tolerations, the same for the Deployment's pod and the uninstall hook's. The hook (a Job,
"hook" true) also tolerates a cordoned node, as the Jobs do: it must run on a cluster whose
nodes are all cordoned.
*/}}
{{- define "wug.scheduling" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- with .root.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- $tolerations := .root.Values.tolerations | default list -}}
{{- if .hook -}}
{{- $tolerations = prepend $tolerations (dict "key" "node.kubernetes.io/unschedulable" "operator" "Exists" "effect" "NoSchedule") | uniq -}}
{{- end -}}
{{- with $tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
A pod template's metadata: the chart's selector labels and the component, podLabels and
podAnnotations. A podLabel that would change what the chart selects by fails the render. Call
with (dict "root" $ "component" "watch").
*/}}
{{- define "wug.podMetadata" -}}
{{- $labels := include "wug.selectorLabels" .root | fromYaml -}}
{{- $_ := set $labels "app.kubernetes.io/component" .component -}}
{{- range $key, $value := .root.Values.podLabels -}}
{{- if hasKey $labels $key -}}
{{- fail (printf "podLabels: %s is set by the chart (it selects its pods by it)" $key) -}}
{{- end -}}
{{- end -}}
labels:
  {{- toYaml (merge $labels (.root.Values.podLabels | default dict)) | nindent 2 }}
{{- with .root.Values.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A value as the environment takes it: whole numbers without an exponent (YAML's 1000000 is a
float64 to the template, which toString writes 1e+06). */}}
{{- define "wug.string" -}}
{{- if and (kindIs "float64" .) (eq (float64 (int64 .)) .) -}}
{{- int64 . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}


{{/* The metrics Service's name, `<release>-watch-metrics`: also the `job` label Prometheus gives
its target (a ServiceMonitor's default), which the guard-down alert reads. */}}
{{- define "wug.metricsName" -}}
{{- printf "%s-metrics" (include "wug.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The alerts' runbooks: `metrics.prometheusRule.runbookBase`, else, when the image is the
release's (ghcr.io/OWNER/NAME of Chart.yaml's `home`, as `hack/chart.sh where` derives it), this
version's docs/troubleshooting.md at `home` (main's for a `-dev` build, whose pages describe it).
An image from anywhere else may be an air-gapped cluster's copy, where github.com cannot be
reached: refused rather than a link that does not open in the night.
*/}}
{{- define "wug.runbookBase" -}}
{{- $home := .Chart.Home | default "" -}}
{{- $owner := regexReplaceAll "^https://github\\.com/([^/]+)/[^/]+$" $home "${1}" | lower -}}
{{- $released := printf "ghcr.io/%s/%s" $owner .Chart.Name -}}
{{- $tree := ternary "main" (printf "v%s" .Chart.AppVersion) (contains "-" .Chart.AppVersion) -}}
{{- if .Values.metrics.prometheusRule.runbookBase -}}
{{- .Values.metrics.prometheusRule.runbookBase -}}
{{- else if and (ne $owner $home) (eq .Values.image.repository $released) -}}
{{- printf "%s/blob/%s/docs/troubleshooting.md" $home $tree -}}
{{- else -}}
{{- fail (printf "metrics.prometheusRule.runbookBase is empty and the image %s is not the release's %s: github.com may be out of reach from here, so the alerts' runbooks need a copy of docs/troubleshooting.md your operators can open: --set metrics.prometheusRule.runbookBase=URL (where github.com is reachable: %s/blob/%s/docs/troubleshooting.md), or metrics.prometheusRule.enabled=false" .Values.image.repository $released $home $tree) -}}
{{- end -}}
{{- end -}}
