{{/*
The sign-in settings of the web pods (values `identity`), in the shape k8s/ gives them: the
provider's settings in a ConfigMap <fullname>-sign-in-<hash>, the client secret from a
Secret (optional: a public client has none), the role rules in a ConfigMap
<fullname>-roles-<hash> mounted for HOOKSVC_ROLES_FILE. The names carry a hash of the data,
as Kustomize's configMapGenerator gives them, so that new settings roll the pods (a process
reads them once). Nothing when left at the defaults: hooksvc's own are local accounts only.
*/}}

{{/* The sign-in ConfigMap's data; empty when nothing is configured. */}}
{{- define "hooksvc.signInData" -}}
{{- $id := .Values.identity -}}
{{- if or $id.oidc.issuer (not $id.localLogin) -}}
{{- if not $id.oidc.issuer -}}
{{- fail "identity.localLogin=false needs identity.oidc.issuer: nobody could sign in" -}}
{{- end -}}
HOOKSVC_OIDC_ISSUER: {{ $id.oidc.issuer | quote }}
HOOKSVC_OIDC_CLIENT_ID: {{ required "identity.oidc.clientId is required with identity.oidc.issuer" $id.oidc.clientId | quote }}
HOOKSVC_OIDC_SCOPES: {{ $id.oidc.scopes | quote }}
HOOKSVC_OIDC_GROUPS_CLAIM: {{ $id.oidc.groupsClaim | quote }}
HOOKSVC_LOCAL_LOGIN: {{ ternary "1" "0" $id.localLogin | quote }}
{{- end -}}
{{- end -}}

{{- define "hooksvc.rolesData" -}}
{{- with .Values.identity.roles -}}
roles.yaml: |
  {{- dict "rules" . | toYaml | nindent 2 }}
{{- end -}}
{{- end -}}

{{/* <fullname>-<what>-<10 hex digits of the data's hash>. */}}
{{- define "hooksvc.hashedName" -}}
{{- printf "%s-%s-%s" (include "hooksvc.fullname" .root) .what (.data | sha256sum | trunc 10) -}}
{{- end -}}

{{- define "hooksvc.identityEnv" -}}
{{- $id := .Values.identity -}}
{{- with include "hooksvc.signInData" . }}
{{- $name := include "hooksvc.hashedName" (dict "root" $ "what" "sign-in" "data" .) }}
{{- range $key := list "HOOKSVC_OIDC_ISSUER" "HOOKSVC_OIDC_CLIENT_ID" }}
- name: {{ $key }}
  valueFrom:
    configMapKeyRef:
      name: {{ $name }}
      key: {{ $key }}
{{- end }}
- name: HOOKSVC_OIDC_CLIENT_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ $id.oidc.clientSecret.name }}
      key: {{ $id.oidc.clientSecret.key }}
      optional: true
{{- range $key := list "HOOKSVC_OIDC_SCOPES" "HOOKSVC_OIDC_GROUPS_CLAIM" "HOOKSVC_LOCAL_LOGIN" }}
- name: {{ $key }}
  valueFrom:
    configMapKeyRef:
      name: {{ $name }}
      key: {{ $key }}
{{- end }}
{{- if $id.oidc.caBundle.configMap }}
- name: HOOKSVC_OIDC_CA_FILE
  value: {{ printf "/etc/hooksvc/oidc-ca/%s" $id.oidc.caBundle.key | quote }}
{{- end }}
{{- end }}
{{- if $id.roles }}
- name: HOOKSVC_ROLES_FILE
  value: /etc/hooksvc/roles/roles.yaml
{{- end }}
{{- end -}}

{{- define "hooksvc.identityMounts" -}}
{{- if .Values.identity.roles }}
- name: roles
  mountPath: /etc/hooksvc/roles
  readOnly: true
{{- end }}
{{- if and .Values.identity.oidc.issuer .Values.identity.oidc.caBundle.configMap }}
- name: oidc-ca
  mountPath: /etc/hooksvc/oidc-ca
  readOnly: true
{{- end }}
{{- end -}}

{{- define "hooksvc.identityVolumes" -}}
{{- with include "hooksvc.rolesData" . }}
- name: roles
  configMap:
    name: {{ include "hooksvc.hashedName" (dict "root" $ "what" "roles" "data" .) }}
{{- end }}
{{- if and .Values.identity.oidc.issuer .Values.identity.oidc.caBundle.configMap }}
- name: oidc-ca
  configMap:
    name: {{ .Values.identity.oidc.caBundle.configMap }}
{{- end }}
{{- end -}}
