{{/* Labels of one component (name, component) plus part-of on object metadata. */}}
{{- define "callshield.labels" -}}
app.kubernetes.io/name: callshield-{{ . }}
app.kubernetes.io/component: {{ . }}
app.kubernetes.io/part-of: callshield
{{- end -}}

{{/* Pod-template labels: name and component (selectors match on name only). */}}
{{- define "callshield.podLabels" -}}
app.kubernetes.io/name: callshield-{{ . }}
app.kubernetes.io/component: {{ . }}
{{- end -}}

{{- define "callshield.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "callshield.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{- define "callshield.redisUrl" -}}
- name: REDIS_URL
  valueFrom:
    secretKeyRef:
      name: callshield-redis
      key: url
{{- end -}}

{{/* A change of the configuration rolls the pods (what Kustomize's name hash does). */}}
{{- define "callshield.configChecksum" -}}
checksum/config: {{ include (print $.Template.BasePath "/configmaps.yaml") . | sha256sum }}
{{- end -}}
