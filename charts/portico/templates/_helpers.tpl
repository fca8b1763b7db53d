{{/* Names, labels, images and the pieces every pod shares. */}}

{{- define "portico.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-scoped base name; component objects append -<component>. */}}
{{- define "portico.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Usage: include "portico.component" (list $ "envoy") -> <fullname>-envoy */}}
{{- define "portico.component" -}}
{{- printf "%s-%s" (include "portico.fullname" (index . 0)) (index . 1) }}
{{- end }}

{{/* Fully qualified Service name: (list $ "extauthz") */}}
{{- define "portico.fqdn" -}}
{{- $ := index . 0 }}
{{- printf "%s.%s.svc.%s" (include "portico.component" .) $.Release.Namespace $.Values.clusterDomain }}
{{- end }}

{{- define "portico.selectorLabels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ include "portico.name" $ }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "portico.labels" -}}
{{- $ := index . 0 -}}
helm.sh/chart: {{ printf "%s-%s" $.Chart.Name $.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "portico.selectorLabels" . }}
app.kubernetes.io/version: {{ $.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $.Release.Service }}
app.kubernetes.io/part-of: portico
{{- end }}

{{/* Labels selecting every pod of this release (NetworkPolicy peers). */}}
{{- define "portico.releaseLabels" -}}
app.kubernetes.io/name: {{ include "portico.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Image reference: (list $ .Values.<component>.image). Empty fields of the
component's image fall back to .Values.image; a digest wins over the tag.
*/}}
{{- define "portico.image" -}}
{{- $ := index . 0 }}
{{- $img := index . 1 | default dict }}
{{- $repo := $img.repository | default $.Values.image.repository }}
{{- $digest := $img.digest | default $.Values.image.digest }}
{{- $tag := $img.tag | default $.Values.image.tag | default $.Chart.AppVersion }}
{{- if $digest }}
{{- printf "%s@%s" $repo $digest }}
{{- else }}
{{- printf "%s:%s" $repo (toString $tag) }}
{{- end }}
{{- end }}

{{/* An upstream image (bundled deps, Envoy): repository/tag/digest only. */}}
{{- define "portico.upstreamImage" -}}
{{- if .digest }}
{{- printf "%s@%s" .repository .digest }}
{{- else }}
{{- printf "%s:%s" .repository (toString .tag) }}
{{- end }}
{{- end }}

{{- define "portico.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Common pod-spec scheduling fields: (list $ .Values.<component>) */}}
{{- define "portico.scheduling" -}}
{{- $c := index . 1 }}
{{- with $c.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Environment every Portico binary reads. */}}
{{- define "portico.commonEnv" -}}
- name: PORTICO_LOG_FORMAT
  value: {{ .Values.log.format | quote }}
- name: PORTICO_LOG_LEVEL
  value: {{ .Values.log.level | quote }}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: PORTICO_NODE_ID
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end }}

{{- define "portico.databaseSecretName" -}}
{{- .Values.postgresql.existingSecret | default (include "portico.component" (list . "database")) }}
{{- end }}

{{- define "portico.databaseEnv" -}}
- name: PORTICO_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "portico.databaseSecretName" . }}
      key: {{ .Values.postgresql.existingSecretKey }}
{{- end }}

{{/* ratelimitsvc's Redis address: bundled, external, or empty (memory). */}}
{{- define "portico.redisAddr" -}}
{{- if .Values.redis.bundled.enabled }}
{{- printf "%s:6379" (include "portico.component" (list . "redis")) }}
{{- else }}
{{- .Values.redis.addr }}
{{- end }}
{{- end }}

{{/* The control plane's xDS address, for Envoy and the xDS clients. */}}
{{- define "portico.xdsHost" -}}
{{- include "portico.fqdn" (list . "controlplane") }}
{{- end }}

{{/* PDB for a component: (list $ "component" .Values.<component>.pdb) */}}
{{- define "portico.pdb" -}}
{{- $ := index . 0 }}
{{- $name := index . 1 }}
{{- $pdb := index . 2 }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "portico.component" (list $ $name) }}
  labels:
    {{- include "portico.labels" (list $ $name) | nindent 4 }}
spec:
  {{- if hasKey $pdb "minAvailable" }}
  minAvailable: {{ $pdb.minAvailable }}
  {{- else }}
  maxUnavailable: {{ $pdb.maxUnavailable | default 1 }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "portico.selectorLabels" (list $ $name) | nindent 6 }}
{{- end }}

{{/* HPA for a Deployment: (list $ "component" .Values.<component>.autoscaling) */}}
{{- define "portico.hpa" -}}
{{- $ := index . 0 }}
{{- $name := index . 1 }}
{{- $as := index . 2 }}
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {{ include "portico.component" (list $ $name) }}
  labels:
    {{- include "portico.labels" (list $ $name) | nindent 4 }}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {{ include "portico.component" (list $ $name) }}
  minReplicas: {{ $as.minReplicas }}
  maxReplicas: {{ $as.maxReplicas }}
  metrics:
    - type: Resource
      resource:
        name: cpu
        target:
          type: Utilization
          averageUtilization: {{ $as.targetCPUUtilizationPercentage }}
  behavior:
    scaleDown:
      # Scale in slowly: a removed gateway drains its connections first.
      stabilizationWindowSeconds: 300
      policies:
        - type: Pods
          value: 1
          periodSeconds: 60
{{- end }}

{{/*
ServiceMonitor: (list $ "component" "port-name" "/path" tls). Selects the
component's metrics Service by labels. With tls the port is HTTPS:
Prometheus verifies the component's certificate against the CA bundle of
its Secret (ca.crt) and its Service name (a DNS SAN of the certificate).
*/}}
{{- define "portico.serviceMonitor" -}}
{{- $ := index . 0 }}
{{- $name := index . 1 }}
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ include "portico.component" (list $ $name) }}
  labels:
    {{- include "portico.labels" (list $ $name) | nindent 4 }}
    {{- with $.Values.serviceMonitor.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  selector:
    matchLabels:
      {{- include "portico.selectorLabels" (list $ $name) | nindent 6 }}
      portico.io/metrics: "true"
  namespaceSelector:
    matchNames: [{{ $.Release.Namespace | quote }}]
  endpoints:
    - port: {{ index . 2 }}
      path: {{ index . 3 }}
      interval: {{ $.Values.serviceMonitor.interval }}
      scrapeTimeout: {{ $.Values.serviceMonitor.scrapeTimeout }}
      {{- if index . 4 }}
      scheme: https
      tlsConfig:
        ca:
          secret:
            name: {{ include "portico.tlsSecretName" (list $ $name) }}
            key: ca.crt
        serverName: {{ printf "%s.%s.svc" (include "portico.component" (list $ $name)) $.Release.Namespace }}
      {{- end }}
{{- end }}

{{/* Replica count unless an HPA owns it: (list .Values.<component>) */}}
{{- define "portico.replicas" -}}
{{- $c := index . 0 }}
{{- if not (and $c.autoscaling $c.autoscaling.enabled) }}
replicas: {{ $c.replicas }}
{{- end }}
{{- end }}

{{/*
"true" when the cache runs as a cluster: 16384 slots over primaries and
their replicas, the slot map in kvnode's Raft tier (CP keyspace "cache").
*/}}
{{- define "portico.cacheCluster" -}}
{{- if and .Values.cachenode.enabled .Values.cachenode.cluster.enabled }}true{{ end }}
{{- end }}

{{/* kvnode's HTTP addresses (every pod's stable name), comma-separated. */}}
{{- define "portico.kvnodeHTTPAddrs" -}}
{{- $full := include "portico.component" (list . "kvnode") }}
{{- $domain := printf "%s-headless.%s.svc.%s" $full .Release.Namespace .Values.clusterDomain }}
{{- $addrs := list }}
{{- range $i := until (int .Values.kvnode.replicas) }}
{{- $addrs = append $addrs (printf "%s-%d.%s:18400" $full $i $domain) }}
{{- end }}
{{- join "," $addrs }}
{{- end }}

{{/*
Arguments of `cachectl … topology init` (a YAML list): every cache pod in
ordinal order, id = pod name, host = its stable name in the headless
Service; pods 0..primaries-1 are the primaries, the rest their replicas.
init publishes only when no map is stored, so it is safe to run again.
*/}}
{{- define "portico.cacheTopologyInitArgs" -}}
{{- $cl := .Values.cachenode.cluster }}
{{- $full := include "portico.component" (list . "cachenode") }}
{{- $domain := printf "%s-headless.%s.svc.%s" $full .Release.Namespace .Values.clusterDomain }}
{{- $args := list "--kv-addrs" (include "portico.kvnodeHTTPAddrs" .) "--cluster" $cl.name "--timeout" $cl.topologyInit.timeout "topology" "init" "--replicas" (toString (int $cl.replicasPerPrimary)) }}
{{- range $i := until (int (include "portico.cacheReplicas" .)) }}
{{- $args = append $args "--node" }}
{{- $args = append $args (printf "%s-%d=%s-%d.%s:7000@17000" $full $i $full $i $domain) }}
{{- end }}
{{- toYaml $args }}
{{- end }}

{{/* cachenode pods: primaries × (1 + replicasPerPrimary) in cluster mode, else replicas. */}}
{{- define "portico.cacheReplicas" -}}
{{- $c := .Values.cachenode }}
{{- if include "portico.cacheCluster" . }}
{{- mul (int $c.cluster.primaries) (add1 (int $c.cluster.replicasPerPrimary)) }}
{{- else }}
{{- int $c.replicas }}
{{- end }}
{{- end }}

{{/* Bus secret: (Secret name, key), or nothing. */}}
{{- define "portico.cacheClusterSecretName" -}}
{{- $cl := .Values.cachenode.cluster }}
{{- if $cl.existingSecret }}
{{- $cl.existingSecret }}
{{- else if $cl.secret }}
{{- include "portico.component" (list . "cachenode-cluster") }}
{{- end }}
{{- end }}

{{/* A Go duration ("500ms", "1m30s") in milliseconds, for comparisons. */}}
{{- define "portico.durationMs" -}}
{{- $units := dict "ns" 0.000001 "us" 0.001 "µs" 0.001 "ms" 1.0 "s" 1000.0 "m" 60000.0 "h" 3600000.0 }}
{{- $total := 0.0 }}
{{- range $part := regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h)" (toString .) -1 }}
{{- $n := regexFind "^[0-9]+(\\.[0-9]+)?" $part }}
{{- $total = addf $total (mulf (float64 $n) (get $units (trimPrefix $n $part))) }}
{{- end }}
{{- $total }}
{{- end }}

{{/*
The cache's namespaces Secret: namespacesExistingSecret, or the chart's
<fullname>-cachenode-namespaces when namespaces are set or requireAuth is on
(generated passwords, secrets.yaml), or nothing (only the default namespace).
*/}}
{{- define "portico.cacheNamespacesSecret" -}}
{{- $c := .Values.cachenode }}
{{- if $c.enabled }}
{{- if $c.namespacesExistingSecret }}
{{- $c.namespacesExistingSecret }}
{{- else if or $c.namespaces $c.requireAuth }}
{{- include "portico.component" (list . "cachenode-namespaces") }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Secret holding the Redis password (key redis-password): redis.existingSecret,
or the chart's <fullname>-redis for the bundled Redis, or nothing.
*/}}
{{- define "portico.redisSecretName" -}}
{{- if .Values.redis.existingSecret }}
{{- .Values.redis.existingSecret }}
{{- else if .Values.redis.bundled.enabled }}
{{- include "portico.component" (list . "redis") }}
{{- end }}
{{- end }}
