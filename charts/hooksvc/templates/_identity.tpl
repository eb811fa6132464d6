{{/*
The sign-in settings of the web pods (values `identity`), in the shape k8s/base gives them:
the provider's settings in a ConfigMap <fullname>-sign-in-<hash>, the client secret from a
Secret (optional: a public client has none), the role rules in a ConfigMap
<fullname>-roles-<hash> mounted for HOOKSVC_ROLES_FILE. The names carry a hash of the data,
as Kustomize's configMapGenerator gives them, so that new settings roll the pods (a process
reads them once). Left at the defaults they are k8s/base's: no issuer (local accounts only)
and the rules of files/roles.yaml (k8s/base/roles.yaml: none).

With identity.existing.enabled the chart writes neither ConfigMap: every setting comes from
objects the operator creates and keeps, each optional (the clusterctl files read them so,
as clusterctl replaces its own objects at each upgrade). The settings are then `env` entries
that name those objects: an `env` entry wins over `envFrom`, so web.extraEnvFrom cannot set
them.
*/}}

{{/* The sign-in ConfigMap's data (k8s/base/kustomization.yaml's literals). */}}
{{- define "hooksvc.signInData" -}}
{{- $id := .Values.identity -}}
{{- if and (not $id.localLogin) (not $id.oidc.issuer) -}}
{{- fail "identity.localLogin=false needs identity.oidc.issuer: nobody could sign in" -}}
{{- end -}}
{{- if $id.oidc.issuer -}}
{{- $_ := required "identity.oidc.clientId is required with identity.oidc.issuer" $id.oidc.clientId -}}
{{- end -}}
HOOKSVC_OIDC_ISSUER: {{ $id.oidc.issuer | quote }}
HOOKSVC_OIDC_CLIENT_ID: {{ $id.oidc.clientId | quote }}
HOOKSVC_OIDC_SCOPES: {{ $id.oidc.scopes | quote }}
HOOKSVC_OIDC_GROUPS_CLAIM: {{ $id.oidc.groupsClaim | quote }}
HOOKSVC_LOCAL_LOGIN: {{ ternary "1" "0" $id.localLogin | quote }}
{{- end -}}

{{/* The roles ConfigMap's data: identity.roles, or files/roles.yaml as it is. */}}
{{- define "hooksvc.rolesData" -}}
roles.yaml: |
{{- with .Values.identity.roles }}
  {{- dict "rules" . | toYaml | nindent 2 }}
{{- else }}
{{ $.Files.Get "files/roles.yaml" | trimSuffix "\n" | indent 2 }}
{{- end }}
{{- end -}}

{{/* <fullname>-<what>-<10 hex digits of the data's hash>. */}}
{{- define "hooksvc.hashedName" -}}
{{- printf "%s-%s-%s" (include "hooksvc.fullname" .root) .what (.data | sha256sum | trunc 10) -}}
{{- end -}}

{{/* identity.existing.enabled refuses the values it would ignore. */}}
{{- define "hooksvc.checkExisting" -}}
{{- $id := .Values.identity -}}
{{- if $id.existing.enabled -}}
{{- range $set := list (list "identity.oidc.issuer" $id.oidc.issuer) (list "identity.oidc.clientId" $id.oidc.clientId) (list "identity.localLogin=false" (not $id.localLogin)) (list "identity.roles" $id.roles) }}
{{- if index $set 1 -}}
{{- fail (printf "%s is not read with identity.existing.enabled: set it in the ConfigMap %s instead" (index $set 0) $id.existing.configMap) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The sign-in settings of the web container, in k8s/base/web.yaml's order. */}}
{{- define "hooksvc.identityEnv" -}}
{{- include "hooksvc.checkExisting" . -}}
{{- $id := .Values.identity -}}
{{- $existing := $id.existing.enabled -}}
{{- $name := $id.existing.configMap -}}
{{- if not $existing -}}
{{- $name = include "hooksvc.hashedName" (dict "root" $ "what" "sign-in" "data" (include "hooksvc.signInData" .)) -}}
{{- end -}}
{{- range $key := list "HOOKSVC_OIDC_ISSUER" "HOOKSVC_OIDC_CLIENT_ID" }}
- name: {{ $key }}
  valueFrom:
    configMapKeyRef:
      name: {{ $name }}
      key: {{ $key }}
      {{- if $existing }}
      optional: true
      {{- end }}
{{- end }}
- name: HOOKSVC_OIDC_CLIENT_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ $id.oidc.clientSecret.name }}
      key: {{ $id.oidc.clientSecret.key }}
      optional: true
{{- $keys := list "HOOKSVC_OIDC_SCOPES" "HOOKSVC_OIDC_GROUPS_CLAIM" "HOOKSVC_LOCAL_LOGIN" }}
{{- if $existing }}
{{- /* Paths too: without the operator's file there is none to read (a missing roles file
stops the process). */ -}}
{{- $keys = concat $keys (list "HOOKSVC_OIDC_CA_FILE" "HOOKSVC_ROLES_FILE") }}
{{- end }}
{{- range $key := $keys }}
- name: {{ $key }}
  valueFrom:
    configMapKeyRef:
      name: {{ $name }}
      key: {{ $key }}
      {{- if $existing }}
      optional: true
      {{- end }}
{{- end }}
{{- if not $existing }}
{{- if $id.oidc.caBundle.configMap }}
- name: HOOKSVC_OIDC_CA_FILE
  value: {{ printf "/etc/hooksvc/oidc-ca/%s" $id.oidc.caBundle.key | quote }}
{{- end }}
- name: HOOKSVC_ROLES_FILE
  value: /etc/hooksvc/roles/roles.yaml
{{- end }}
{{- end -}}

{{- define "hooksvc.identityMounts" -}}
- name: roles
  mountPath: /etc/hooksvc/roles
  readOnly: true
{{- if .Values.identity.oidc.caBundle.configMap }}
- name: oidc-ca
  mountPath: /etc/hooksvc/oidc-ca
  readOnly: true
{{- end }}
{{- end -}}

{{- define "hooksvc.identityVolumes" -}}
{{- $id := .Values.identity -}}
- name: roles
  configMap:
    {{- if $id.existing.enabled }}
    name: {{ $id.existing.rolesConfigMap }}
    optional: true
    {{- else }}
    name: {{ include "hooksvc.hashedName" (dict "root" $ "what" "roles" "data" (include "hooksvc.rolesData" .)) }}
    {{- end }}
{{- with $id.oidc.caBundle.configMap }}
- name: oidc-ca
  configMap:
    name: {{ . }}
    {{- if $id.existing.enabled }}
    optional: true
    {{- end }}
{{- end }}
{{- end -}}
