{{/* Labels of everything the chart makes (IRS's own, then the user's). */}}
{{- define "irs.labels" -}}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- range $k, $v := .Values.labels }}
{{ $k }}: {{ $v | quote }}
{{- end }}
{{- end -}}

{{/* The worker image. */}}
{{- define "irs.image" -}}
{{- if and (not .Values.image.tag) (eq .Chart.AppVersion "unreleased") -}}
{{- fail "image.tag: set it to the tag of the image you built (make image names it ghcr.io/irs-sim/irs:<tag>; bin/irs version prints <tag>), or install bin/irs-chart.tgz, which make chart packages with it" -}}
{{- end -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Pod labels a mesh reads (as workflows/kube/mesh.go sets them; ambient: the pod, the chart owns no namespace). */}}
{{- define "irs.meshLabels" -}}
{{- if eq .Values.mesh "istio" }}
sidecar.istio.io/inject: "true"
{{- else if eq .Values.mesh "ambient" }}
istio.io/dataplane-mode: ambient
{{- end }}
{{- end -}}

{{/* Pod annotations a mesh reads. */}}
{{- define "irs.meshAnnotations" -}}
{{- if eq .Values.mesh "linkerd" }}
linkerd.io/inject: enabled
{{- end }}
{{- end -}}
