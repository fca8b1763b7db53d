{{/* The text of NOTES.txt; a named template so the chart test can render it. */}}
{{- define "portico.notes" -}}
{{- $ns := .Release.Namespace }}
{{- $cp := include "portico.component" (list . "controlplane") }}
{{- $gw := include "portico.component" (list . "envoy") -}}
Portico {{ .Chart.AppVersion }} is installed: release {{ .Release.Name }}, namespace {{ $ns }}.
{{- if and (not .Values.postgresql.existingSecret) (not .Values.postgresql.url) (not .Values.postgresql.bundled.enabled) (or .Values.controlplane.enabled .Values.scheduler.enabled) }}

WARNING: no database configured. The control plane and scheduler read
PORTICO_DATABASE_URL from the Secret {{ include "portico.databaseSecretName" . }} (key {{ .Values.postgresql.existingSecretKey }}), which
this release did not create. Create it:
  kubectl -n {{ $ns }} create secret generic {{ include "portico.databaseSecretName" . }} \
    --from-literal={{ .Values.postgresql.existingSecretKey }}='postgres://USER:PASSWORD@HOST:5432/portico?sslmode=require'
or upgrade with --set postgresql.url=... (or postgresql.bundled.enabled=true to try it out).
{{- end }}
{{- if and .Values.ratelimitsvc.enabled (not (include "portico.redisAddr" .)) }}

NOTE: no Redis configured (redis.addr): ratelimitsvc keeps buckets in memory
per replica, so every limit is multiplied by the number of replicas.
{{- end }}

1. Wait until everything is ready:
  kubectl -n {{ $ns }} get pods -l app.kubernetes.io/instance={{ .Release.Name }} -w
{{- if .Values.controlplane.enabled }}

2. Reach the admin API (it is never exposed outside the cluster). It speaks
   TLS with a certificate of the release's CA for its Service name, and every
   call needs a credential:
  kubectl -n {{ $ns }} port-forward svc/{{ $cp }} 18080:18080 &
  kubectl -n {{ $ns }} get secret {{ include "portico.tlsSecretName" (list . "controlplane") }} -o jsonpath='{.data.ca\.crt}' | base64 -d > portico-ca.crt
  ADMIN=https://{{ $cp }}.{{ $ns }}.svc:18080
  TLS="--cacert portico-ca.crt --resolve {{ $cp }}.{{ $ns }}.svc:18080:127.0.0.1"
{{- if include "portico.adminTokenMounted" . }}
  TOKEN=$(kubectl -n {{ $ns }} get secret {{ include "portico.adminTokenSecretName" . }} -o jsonpath='{.data.{{ (include "portico.adminTokenFile" .) | base | replace "." "\\." }}}' | base64 -d)
   That is the bootstrap admin token. Give people and automation their own
   API tokens (POST $ADMIN/admin/v1/tokens), then revoke this one
   (DELETE $ADMIN/admin/v1/tokens/<the 16 hex characters after ptk_>): see
   "Admin API access" in the chart's README.
{{- else }}
   No bootstrap admin token (controlplane.adminToken): use an operator
   client certificate (add --cert/--key to TLS) or an API token you were
   given, as TOKEN.
{{- end }}

3. Start a demo upstream (the echo server in the Portico image):
  kubectl -n {{ $ns }} run echo --image={{ include "portico.image" (list . dict) }} --port 18900 \
    --command -- /usr/local/bin/echo-upstream --addr :18900
  kubectl -n {{ $ns }} expose pod echo --port 18900

4. Push the first cluster and route (every change is a new config version
   that the gateways ACK over xDS):
  curl -s $TLS -H "Authorization: Bearer $TOKEN" -X POST $ADMIN/admin/v1/clusters -H 'Idempotency-Key: c1' \
    -d '{"name":"echo","endpoints":[{"address":"echo.{{ $ns }}.svc.{{ .Values.clusterDomain }}","port":18900}]}'
  curl -s $TLS -H "Authorization: Bearer $TOKEN" -X POST $ADMIN/admin/v1/routes -H 'Idempotency-Key: r1' \
    -d '{"name":"echo","match":{"pathPrefix":"/echo"},"cluster":"echo","auth":{"mode":"none"}}'
  curl -s $TLS -H "Authorization: Bearer $TOKEN" $ADMIN/admin/v1/config/versions
  curl -s $TLS -H "Authorization: Bearer $TOKEN" $ADMIN/admin/v1/nodes      # each gateway with its ACKed version
{{- end }}
{{- if .Values.envoy.enabled }}

5. Send traffic through Envoy:
{{- if eq .Values.envoy.service.type "LoadBalancer" }}
  GW=$(kubectl -n {{ $ns }} get svc {{ $gw }} -o jsonpath='{.status.loadBalancer.ingress[0].ip}{.status.loadBalancer.ingress[0].hostname}')
  curl -i http://$GW:{{ .Values.envoy.service.port }}/echo
{{- else if eq .Values.envoy.service.type "NodePort" }}
  PORT=$(kubectl -n {{ $ns }} get svc {{ $gw }} -o jsonpath='{.spec.ports[0].nodePort}')
  NODE=$(kubectl get nodes -o jsonpath='{.items[0].status.addresses[0].address}')
  curl -i http://$NODE:$PORT/echo
{{- end }}
  # or, from your machine without an external address:
  kubectl -n {{ $ns }} port-forward svc/{{ $gw }} 10000:{{ .Values.envoy.service.port }} &
  curl -i localhost:10000/echo
{{- end }}

JWT providers, API keys, rate limits and rollouts use the same admin API:
see "Pushing config" in the project README.
{{- end }}
