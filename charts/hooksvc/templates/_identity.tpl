{{/*
The sign-in settings of the web pods (values `identity`): OpenID Connect, local accounts,
and the role rules from the ConfigMap of identity.yaml. Nothing when left at the defaults.
*/}}

{{- define "hooksvc.identityEnv" -}}
{{- $id := .Values.identity -}}
{{- with $id.oidc.issuer }}
- name: HOOKSVC_OIDC_ISSUER
  value: {{ . | quote }}
- name: HOOKSVC_OIDC_CLIENT_ID
  value: {{ required "identity.oidc.clientId is required with identity.oidc.issuer" $id.oidc.clientId | quote }}
- name: HOOKSVC_OIDC_CLIENT_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ $id.oidc.clientSecret.name }}
      key: {{ $id.oidc.clientSecret.key }}
- name: HOOKSVC_OIDC_SCOPES
  value: {{ $id.oidc.scopes | quote }}
- name: HOOKSVC_OIDC_GROUPS_CLAIM
  value: {{ $id.oidc.groupsClaim | quote }}
{{- if $id.oidc.caBundle.configMap }}
- name: HOOKSVC_OIDC_CA_FILE
  value: {{ printf "/etc/hooksvc/oidc-ca/%s" $id.oidc.caBundle.key | quote }}
{{- end }}
{{- end }}
{{- if not $id.localLogin }}
{{- if not $id.oidc.issuer }}
{{- fail "identity.localLogin=false needs identity.oidc.issuer: nobody could sign in" }}
{{- end }}
- name: HOOKSVC_LOCAL_LOGIN
  value: "0"
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
{{- if .Values.identity.roles }}
- name: roles
  configMap:
    name: {{ include "hooksvc.fullname" . }}-roles
{{- end }}
{{- if and .Values.identity.oidc.issuer .Values.identity.oidc.caBundle.configMap }}
- name: oidc-ca
  configMap:
    name: {{ .Values.identity.oidc.caBundle.configMap }}
{{- end }}
{{- end -}}
