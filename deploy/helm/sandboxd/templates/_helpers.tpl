{{/* The namespace the controller goes into. */}}
{{- define "sandboxd.namespace" -}}
{{- default .Release.Namespace .Values.namespace.name -}}
{{- end }}

{{/* The namespace of the leader-election Lease, and of the Role that reaches it. */}}
{{- define "sandboxd.leaseNamespace" -}}
{{- default (include "sandboxd.namespace" .) .Values.controller.leaderElectionNamespace -}}
{{- end }}

{{- define "sandboxd.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
app.kubernetes.io/part-of: sandboxd
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ include "sandboxd.tag" . | quote }}
{{- end }}

{{/* The controller's selector labels (the Deployment's, the Service's, the PDB's). */}}
{{- define "sandboxd.selectorLabels" -}}
app.kubernetes.io/name: sandboxd-controller
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sandboxd.tag" -}}
{{- default .Chart.AppVersion .Values.image.tag -}}
{{- end }}

{{- define "sandboxd.image" -}}
{{- printf "%s:%s" .Values.image.repository (include "sandboxd.tag" .) -}}
{{- end }}

{{/* The controller's arguments: each value of `controller` that is set, as the flag it names. */}}
{{- define "sandboxd.controllerArgs" -}}
{{- $c := .Values.controller -}}
{{- $flags := list
  (list "leaderElect" "leader-elect")
  (list "leaderElectionId" "leader-election-id")
  (list "clusterDomain" "cluster-domain")
  (list "kubeApiQps" "kube-api-qps")
  (list "kubeApiBurst" "kube-api-burst")
  (list "kubeApiTimeout" "kube-api-timeout")
  (list "apiConnections" "api-connections")
  (list "sandboxConcurrentWorkers" "sandbox-concurrent-workers")
  (list "sandboxClaimConcurrentWorkers" "sandbox-claim-concurrent-workers")
  (list "sandboxWarmPoolMaxBatchSize" "sandbox-warm-pool-max-batch-size")
  (list "sandboxWarmPoolReadinessGracePeriod" "sandbox-warm-pool-readiness-grace-period")
  (list "sandboxWarmPoolUnschedulableRecheckInterval" "sandbox-warm-pool-unschedulable-recheck-interval")
  (list "sandboxWarmPoolMaxRefillRate" "sandbox-warm-pool-max-refill-rate")
  (list "sandboxWarmPoolReplenishDelay" "sandbox-warm-pool-replenish-delay")
  (list "sandboxWriteBehindWindow" "sandbox-write-behind-window")
  (list "watchNamespace" "namespace")
  (list "defaultRuntimeClass" "default-runtime-class")
  (list "sandboxdProbe" "sandboxd-probe")
  (list "sandboxdGrpcPort" "sandboxd-grpc-port")
  (list "sandboxdRestPort" "sandboxd-rest-port")
  (list "logLevel" "log-level")
  (list "logFormat" "log-format")
-}}
- --leader-election-namespace={{ include "sandboxd.leaseNamespace" . }}
- --metrics-bind-address=:{{ .Values.metrics.port }}
- --sandboxd-image={{ default (printf "ghcr.io/sandboxd/sandboxd-injector:%s" .Chart.AppVersion) $c.sandboxdImage }}
{{- range $flags }}
{{- $v := index $c (index . 0) }}
{{- if not (or (kindIs "invalid" $v) (eq (toString $v) "")) }}
- --{{ index . 1 }}={{ $v }}
{{- end }}
{{- end }}
{{- with $c.registryMirrors }}
{{- $mirrors := list }}
{{- range $registry, $list := . }}
{{- range $list }}
{{- $mirrors = append $mirrors (printf "%s=%s" $registry .) }}
{{- end }}
{{- end }}
- {{ printf "--registry-mirror=%s" (join "," $mirrors) | quote }}
{{- end }}
{{- with $c.insecureRegistries }}
- {{ printf "--insecure-registries=%s" (join "," .) | quote }}
{{- end }}
{{- range $c.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* The rules of the kind (ClusterRole or Role) in files/rbac/role.yaml, the copy of
controller/config/rbac/role.yaml (or in .file: files/rbac/router-role.yaml, the router's): the
chart grants what the kustomize manifests grant. */}}
{{- define "sandboxd.rules" -}}
{{- $kind := .kind -}}
{{- $file := default "files/rbac/role.yaml" .file -}}
{{- $found := list -}}
{{- range (.root.Files.Get $file | splitList "\n---") }}
{{- $o := fromYaml . }}
{{- if eq (toString $o.kind) $kind }}
{{- $found = append $found $o.rules }}
{{- end }}
{{- end }}
{{- if ne (len $found) 1 }}
{{- fail (printf "%s holds %d %s, not one" $file (len $found) $kind) }}
{{- end }}
{{- toYaml (first $found) }}
{{- end }}

{{/* The router's selector labels (its Deployment's, Service's and PDB's). */}}
{{- define "sandboxd.routerSelectorLabels" -}}
app.kubernetes.io/name: sandboxd-router
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The Secret of the router's E2B API keys: router.e2b.existingSecret, else the chart's. */}}
{{- define "sandboxd.e2bSecret" -}}
{{- default (printf "%s-e2b-api-keys" .Release.Name | trunc 63 | trimSuffix "-") .Values.router.e2b.existingSecret -}}
{{- end }}

{{/* The router's arguments: its ports, the cache, and each value of `router` that is set, as
the flag it names. */}}
{{- define "sandboxd.routerArgs" -}}
{{- $r := .Values.router -}}
{{- $flags := list
  (list "cacheNamespace" "cache-namespace")
  (list "wakeTimeout" "wake-timeout")
  (list "clusterDomain" "cluster-domain")
  (list "shutdownTimeout" "shutdown-timeout")
  (list "logLevel" "log-level")
  (list "logFormat" "log-format")
-}}
- --http-bind-address=:{{ $r.port }}
- --health-probe-bind-address=:{{ $r.probePort }}
- --metrics-bind-address=:{{ $r.metricsPort }}
{{- if $r.cacheEnabled }}
- --cache-enabled
{{- end }}
- --authz-mode={{ $r.authzMode }}
{{- if eq $r.authzMode "scoped-token" }}
- --authz-scoped-token-secret-file=/etc/sandboxd-router/scoped-token/{{ $r.scopedTokenSecret.key }}
{{- end }}
{{- if $r.e2b.enabled }}
- --e2b-api
- --e2b-api-keys-secret={{ include "sandboxd.namespace" . }}/{{ include "sandboxd.e2bSecret" . }}
{{- with $r.e2b.domain }}
- --e2b-domain={{ . }}
{{- end }}
{{- with $r.e2b.envdVersion }}
- --e2b-envd-version={{ . }}
{{- end }}
{{- with $r.e2b.createTimeout }}
- --e2b-create-timeout={{ . }}
{{- end }}
{{- end }}
{{- range $flags }}
{{- $v := index $r (index . 0) }}
{{- if not (or (kindIs "invalid" $v) (eq (toString $v) "")) }}
- --{{ index . 1 }}={{ $v }}
{{- end }}
{{- end }}
{{- range $r.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}
