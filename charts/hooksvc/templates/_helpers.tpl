{{/*
Names, labels and the parts every hooksvc pod shares. The objects mirror k8s/base (its
comments say why each setting is what it is); tests/deploy/test_chart.py compares them.
*/}}

{{/* <fullname>: the release name, or <release>-hooksvc; every object's name starts with it. */}}
{{- define "hooksvc.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of an object's metadata: (dict "root" $ "component" "web"), component optional. */}}
{{- define "hooksvc.labels" -}}
{{- $root := .root -}}
app.kubernetes.io/name: hooksvc
app.kubernetes.io/part-of: hooksvc
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- if $root.Values.helmLabels }}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
{{- end }}
{{- with $root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Labels of a component's pods, and the selector that finds them. */}}
{{- define "hooksvc.selectorLabels" -}}
app.kubernetes.io/name: hooksvc
app.kubernetes.io/component: {{ . }}
{{- end -}}

{{- define "hooksvc.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "hooksvc.tlsSecret" -}}
{{- .Values.tls.secretName | default (printf "%s-webhook-tls" (include "hooksvc.fullname" .)) -}}
{{- end -}}

{{- define "hooksvc.serviceName" -}}
{{- printf "%s-webhook-service" (include "hooksvc.fullname" .) -}}
{{- end -}}

{{/* The image, and its pull policy when one is set. */}}
{{- define "hooksvc.containerImage" -}}
image: {{ include "hooksvc.image" . | quote }}
{{- with .Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end -}}

{{/* What every hooksvc container reads: production mode, the TLS directory, the Secrets. */}}
{{- define "hooksvc.env" -}}
- name: HOOKSVC_ENV
  value: production
- name: HOOKSVC_TLS_DIR
  value: /etc/hooksvc/tls
{{- range $ref := list (list "DATABASE_URL" .Values.secrets.databaseUrl) (list "CELERY_BROKER_URL" .Values.secrets.brokerUrl) (list "HOOKSVC_SECRET_KEY" .Values.secrets.secretKey) }}
- name: {{ index $ref 0 }}
  valueFrom:
    secretKeyRef:
      name: {{ (index $ref 1).name }}
      key: {{ (index $ref 1).key }}
{{- end }}
{{- with .Values.handlers }}
- name: HOOKSVC_HANDLERS
  value: {{ toJson . | quote }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The restricted Pod Security Standard, for the pod and for each container. */}}
{{- define "hooksvc.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "hooksvc.containerSecurityContext" -}}
runAsNonRoot: true
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "hooksvc.tmpMount" -}}
- name: tmp
  mountPath: /tmp
{{- end -}}

{{- define "hooksvc.tmpVolume" -}}
- name: tmp
  emptyDir:
    medium: Memory
    sizeLimit: 64Mi
{{- end -}}

{{/* Upgrades: a new pod starts only once this release's migrate Job is done. */}}
{{- define "hooksvc.waitForMigrations" -}}
- name: wait-for-migrations
  {{- include "hooksvc.containerImage" . | nindent 2 }}
  args: ["wait-for-migrations"]
  env:
    {{- include "hooksvc.env" . | nindent 4 }}
  resources:
    {{- toYaml .Values.waitForMigrations.resources | nindent 4 }}
  securityContext:
    {{- include "hooksvc.containerSecurityContext" . | nindent 4 }}
  volumeMounts:
    {{- include "hooksvc.tmpMount" . | nindent 4 }}
{{- end -}}

{{/* Pod-level settings shared by every workload: the ServiceAccount and pull Secrets. */}}
{{- define "hooksvc.podCommon" -}}
serviceAccountName: {{ include "hooksvc.fullname" . }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . }}
  {{- end }}
{{- end }}
{{- end -}}
