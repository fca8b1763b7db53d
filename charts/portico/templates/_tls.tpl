{{/*
Workload identity: one Secret per component (tls.crt, tls.key, ca.crt),
written by cert-manager, by the hook Job / CronJob (porticoctl certs
k8s-sync), or by the user, and mounted as a whole directory.
*/}}

{{/* Where every pod mounts its Secret. */}}
{{- define "portico.tlsDir" -}}
/etc/portico/tls
{{- end }}

{{- define "portico.tlsSecretPrefix" -}}
{{- .Values.tls.secretPrefix | default (printf "%s-tls-" (include "portico.fullname" .)) }}
{{- end }}

{{/* A component's Secret: (list $ "envoy") */}}
{{- define "portico.tlsSecretName" -}}
{{- printf "%s%s" (include "portico.tlsSecretPrefix" (index . 0)) (index . 1) }}
{{- end }}

{{- define "portico.tlsCASecretName" -}}
{{- include "portico.tlsSecretName" (list . "ca") }}
{{- end }}

{{/* The SPIFFE role of each component's certificate. */}}
{{- define "portico.tlsRoles" -}}
{{- dict "envoy" "gateway" "controlplane" "controlplane" "extauthz" "extauthz" "ratelimitsvc" "ratelimit" "scheduler" "scheduler" "kvnode" "kvnode" "cachenode" "cachenode" | toJson }}
{{- end }}

{{/* The names a Service answers to in the cluster: (list $ "svc-name"), JSON. */}}
{{- define "portico.serviceDNSNames" -}}
{{- $ := index . 0 }}
{{- $svc := index . 1 }}
{{- list $svc (printf "%s.%s" $svc $.Release.Namespace) (printf "%s.%s.svc" $svc $.Release.Namespace) (printf "%s.%s.svc.%s" $svc $.Release.Namespace $.Values.clusterDomain) | toJson }}
{{- end }}

{{/*
Certificates of the enabled components, as a JSON list of
{name, role, id, secret, dns}. DNS SANs are for clients that verify host
names (Prometheus, curl, redis-cli --tls); Portico's own clients verify the
SPIFFE ID. StatefulSets also get their pods' stable names (a wildcard of
the headless Service). The gateway is a client only: no DNS names.
*/}}
{{- define "portico.tlsWorkloads" -}}
{{- $ := . }}
{{- $roles := include "portico.tlsRoles" . | fromJson }}
{{- $out := list }}
{{- range $c := list "envoy" "controlplane" "extauthz" "ratelimitsvc" "scheduler" "kvnode" "cachenode" }}
{{- if (index $.Values $c).enabled }}
{{- $svc := include "portico.component" (list $ $c) }}
{{- $dns := list }}
{{- if ne $c "envoy" }}
{{- $dns = include "portico.serviceDNSNames" (list $ $svc) | fromJsonArray }}
{{- end }}
{{- if has $c (list "kvnode" "cachenode") }}
{{- $headless := printf "%s-headless" $svc }}
{{- $dns = concat $dns (include "portico.serviceDNSNames" (list $ $headless) | fromJsonArray) }}
{{- $dns = append $dns (printf "*.%s.%s.svc" $headless $.Release.Namespace) }}
{{- $dns = append $dns (printf "*.%s.%s.svc.%s" $headless $.Release.Namespace $.Values.clusterDomain) }}
{{- end }}
{{- $role := get $roles $c }}
{{- $out = append $out (dict "name" $c "role" $role "id" (printf "spiffe://%s/%s/%s" $.Values.tls.trustDomain $role $c) "secret" (include "portico.tlsSecretName" (list $ $c)) "dns" $dns) }}
{{- end }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/*
PORTICO_TLS_* for a Portico binary: its certificate, key and CA bundle from
the mounted Secret, re-read by the binary every 5 s.
*/}}
{{- define "portico.tlsEnv" -}}
- name: PORTICO_TLS_CERT_FILE
  value: {{ include "portico.tlsDir" . }}/tls.crt
- name: PORTICO_TLS_KEY_FILE
  value: {{ include "portico.tlsDir" . }}/tls.key
- name: PORTICO_TLS_CA_FILE
  value: {{ include "portico.tlsDir" . }}/ca.crt
- name: PORTICO_TRUST_DOMAIN
  value: {{ .Values.tls.trustDomain | quote }}
{{- end }}

{{- define "portico.tlsVolumeMount" -}}
- {name: tls, mountPath: {{ include "portico.tlsDir" . }}, readOnly: true}
{{- end }}

{{/*
The Secret volume of a component: (list $ "envoy"). The whole Secret, never
subPath: the kubelet updates a Secret volume in place (an atomic symlink
swap), which is the rotation; a subPath mount would freeze the files.
*/}}
{{- define "portico.tlsVolume" -}}
- name: tls
  secret:
    secretName: {{ include "portico.tlsSecretName" . }}
    defaultMode: 0440
{{- end }}

{{/* The renewal fraction for `k8s-sync --before`: renewBefore / duration. */}}
{{- define "portico.tlsRenewFraction" -}}
{{- $life := include "portico.durationMs" .Values.tls.duration | float64 }}
{{- $before := include "portico.durationMs" .Values.tls.renewBefore | float64 }}
{{- if or (le $before 0.0) (ge $before $life) }}
{{- fail (printf "tls.renewBefore (%s) must be shorter than tls.duration (%s)" .Values.tls.renewBefore .Values.tls.duration) }}
{{- end }}
{{- printf "%.4f" (divf $before $life) }}
{{- end }}
