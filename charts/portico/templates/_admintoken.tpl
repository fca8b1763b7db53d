{{/*
The control plane's bootstrap admin token (issue 19): a Secret with one key
holding a ptk_ API token, mounted whole into the control plane pods as
PORTICO_ADMIN_TOKEN_FILE; the control plane registers its hash as an admin
token at start. The chart has `porticoctl certs k8s-sync
--admin-token-secret` create it once (never replaced, like the CA): in the
certificate sync Job when that runs, else in a token-only hook Job
(admin-token.yaml). Or the user brings it (existingSecret).
*/}}

{{/* Where the control plane mounts the token Secret. */}}
{{- define "portico.adminTokenDir" -}}
/etc/portico/admin-token
{{- end }}

{{- define "portico.adminTokenSecretName" -}}
{{- .Values.controlplane.adminToken.existingSecret | default (printf "%sadmin-token" (include "portico.tlsSecretPrefix" .)) }}
{{- end }}

{{/* The token file's path: the Secret's key in the mounted directory. */}}
{{- define "portico.adminTokenFile" -}}
{{- $t := .Values.controlplane.adminToken }}
{{- printf "%s/%s" (include "portico.adminTokenDir" .) (ternary $t.existingSecretKey "token" (ne $t.existingSecret "")) }}
{{- end }}

{{/* "true" when the control plane mounts a token Secret. */}}
{{- define "portico.adminTokenMounted" -}}
{{- $t := .Values.controlplane.adminToken }}
{{- if and .Values.controlplane.enabled (or $t.existingSecret $t.create) }}true{{ end }}
{{- end }}

{{/* "true" when the chart creates the token Secret (with porticoctl). */}}
{{- define "portico.adminTokenCreated" -}}
{{- $t := .Values.controlplane.adminToken }}
{{- if and .Values.controlplane.enabled $t.create (not $t.existingSecret) }}true{{ end }}
{{- end }}

{{/* "true" when the certificate sync Job and CronJob run (tls-sync.yaml). */}}
{{- define "portico.tlsSyncJobEnabled" -}}
{{- if and (not .Values.tls.certManager.enabled) .Values.tls.job.enabled (include "portico.tlsWorkloads" . | fromJsonArray) }}true{{ end }}
{{- end }}

{{/*
PORTICO_ADMIN_HOSTS: the admin API answers 421 to any other Host header.
The names of its Service in the cluster, and loopback for port-forwards.
*/}}
{{- define "portico.adminHosts" -}}
{{- include "portico.apiHosts" (list . "controlplane") }}
{{- end }}

{{/* PORTICO_ADMIN_HOSTS of component's API: (list $ "<component>"). */}}
{{- define "portico.apiHosts" -}}
{{- $ := index . 0 }}
{{- $svc := include "portico.component" (list $ (index . 1)) }}
{{- concat (include "portico.serviceDNSNames" (list $ $svc) | fromJsonArray) (list "localhost" "127.0.0.1" "::1") | join "," }}
{{- end }}

{{/*
The env and volume of an API that accepts the bootstrap admin token besides
the control plane (the scheduler): the same Secret, mounted the same way.
*/}}
{{- define "portico.adminTokenEnv" -}}
{{- if include "portico.adminTokenMounted" . }}
- name: PORTICO_ADMIN_TOKEN_FILE
  value: {{ include "portico.adminTokenFile" . }}
{{- end }}
{{- end }}

{{- define "portico.adminTokenVolumeMount" -}}
{{- if include "portico.adminTokenMounted" . }}
- {name: admin-token, mountPath: {{ include "portico.adminTokenDir" . }}, readOnly: true}
{{- end }}
{{- end }}

{{- define "portico.adminTokenVolume" -}}
{{- if include "portico.adminTokenMounted" . }}
- name: admin-token
  secret:
    secretName: {{ include "portico.adminTokenSecretName" . }}
    defaultMode: 0440
{{- end }}
{{- end }}

{{/* PORTICO_ADMIN_HOSTS of kvnode: both Services, each pod's name, loopback. */}}
{{- define "portico.kvnodeHosts" -}}
{{- $svc := include "portico.component" (list . "kvnode") }}
{{- $headless := printf "%s-headless" $svc }}
{{- $names := concat (include "portico.serviceDNSNames" (list . $svc) | fromJsonArray) (include "portico.serviceDNSNames" (list . $headless) | fromJsonArray) }}
{{- $names = concat $names (list (printf "*.%s.%s.svc" $headless .Release.Namespace) (printf "*.%s.%s.svc.%s" $headless .Release.Namespace .Values.clusterDomain) "localhost" "127.0.0.1" "::1") }}
{{- $names | join "," }}
{{- end }}
