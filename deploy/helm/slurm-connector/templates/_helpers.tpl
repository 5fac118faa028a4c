{{/* Names and labels. */}}
{{- define "slurm-connector.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "slurm-connector.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "slurm-connector.selectorLabels" -}}
app.kubernetes.io/name: {{ include "slurm-connector.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "slurm-connector.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "slurm-connector.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: connector
{{- end }}

{{- define "slurm-connector.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "slurm-connector.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "slurm-connector.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The clusters-file ConfigMap's name, or "" when no file is used. */}}
{{- define "slurm-connector.clustersConfigMap" -}}
{{- if .Values.clustersFile.existingConfigMap }}
{{- .Values.clustersFile.existingConfigMap }}
{{- else if .Values.clustersFile.content }}
{{- printf "%s-clusters" (include "slurm-connector.fullname" .) }}
{{- end }}
{{- end }}

{{/* FLYTE_SLURM_SHARED_MOUNTS: cluster_prefix=local_path[,...] from sharedFilesystem.mounts. */}}
{{- define "slurm-connector.sharedMounts" -}}
{{- $pairs := list }}
{{- range .Values.sharedFilesystem.mounts }}
{{- $pairs = append $pairs (printf "%s=%s" .clusterPath .mountPath) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}

{{/* The stager URL the connector uses: the sidecar on loopback, or an external one. */}}
{{- define "slurm-connector.stagerUrl" -}}
{{- if .Values.stager.enabled }}
{{- printf "http://127.0.0.1:%d" (int .Values.stager.port) }}
{{- else }}
{{- .Values.stager.url }}
{{- end }}
{{- end }}

{{/* A LabelSelector in kubectl's syntax (`k=v,k in (a,b),k,!k`); "" for an empty one. */}}
{{- define "slurm-connector.selectorText" -}}
{{- $s := . | default dict }}
{{- $parts := list }}
{{- range $k, $v := ($s.matchLabels | default dict) }}
{{- $parts = append $parts (printf "%s=%s" $k $v) }}
{{- end }}
{{- range ($s.matchExpressions | default list) }}
{{- if eq .operator "In" }}
{{- $parts = append $parts (printf "%s in (%s)" .key (join "," .values)) }}
{{- else if eq .operator "NotIn" }}
{{- $parts = append $parts (printf "%s notin (%s)" .key (join "," .values)) }}
{{- else if eq .operator "Exists" }}
{{- $parts = append $parts .key }}
{{- else }}
{{- $parts = append $parts (printf "!%s" .key) }}
{{- end }}
{{- end }}
{{- join "," $parts }}
{{- end }}

{{/*
The NetworkPolicy's selectors: each value as given, or when null the chart's default. Defaults live
here, not in values.yaml, because Helm merges a user's map into a default map key by key.
- flyteNamespaces: namespace flyte.
- flytePods: a LIST of pod selectors, one NetworkPolicy peer each. Default: the pods that call
  connectors in Flyte's two backend charts, Flyte 2's flyte-binary (its backend pod, not its
  console) and Flyte 1's flyte-core (flytepropeller; with flytepropeller.manager the pods the
  manager starts carry the same label). A podSelector given replaces both.
- metricsNamespaces: namespace monitoring; metricsPods: every pod there.
*/}}
{{- define "slurm-connector.npSelectors" -}}
{{- $np := .Values.networkPolicy }}
{{- $defaults := dict
  "flyteNamespaces" (dict "matchLabels" (dict "kubernetes.io/metadata.name" "flyte"))
  "flytePods" (list
    (dict "matchLabels" (dict "app.kubernetes.io/name" "flyte-binary" "app.kubernetes.io/component" "flyte-binary"))
    (dict "matchLabels" (dict "app.kubernetes.io/name" "flytepropeller")))
  "metricsNamespaces" (dict "matchLabels" (dict "kubernetes.io/metadata.name" "monitoring"))
  "metricsPods" (dict) }}
{{- $givenPods := $np.flyte.podSelector }}
{{- if not (kindIs "invalid" $givenPods) }}
{{- $givenPods = list $givenPods }}
{{- end }}
{{- $given := dict
  "flyteNamespaces" $np.flyte.namespaceSelector
  "flytePods" $givenPods
  "metricsNamespaces" $np.metrics.namespaceSelector
  "metricsPods" $np.metrics.podSelector }}
{{- $out := dict }}
{{- range $k, $d := $defaults }}
{{- $g := index $given $k }}
{{- $_ := set $out $k (ternary $d $g (kindIs "invalid" $g)) }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/*
FLYTE_SLURM_INGRESS_POLICY: what the rendered NetworkPolicy admits to the gRPC port, e.g.
`NetworkPolicy slurm-connector: gRPC port 8000 from namespace flyte, pods app.kubernetes.io/component=flyte-binary,app.kubernetes.io/name=flyte-binary or pods app.kubernetes.io/name=flytepropeller`.
*/}}
{{- define "slurm-connector.ingressPolicy" -}}
{{- $np := .Values.networkPolicy }}
{{- $sel := include "slurm-connector.npSelectors" . | fromYaml }}
{{- $ns := $sel.flyteNamespaces }}
{{- $nsLabels := $ns.matchLabels | default dict }}
{{- $nsText := include "slurm-connector.selectorText" $ns }}
{{- $from := "" }}
{{- if and (eq (len $nsLabels) 1) (hasKey $nsLabels "kubernetes.io/metadata.name") (not $ns.matchExpressions) }}
{{- $from = printf "namespace %s" (index $nsLabels "kubernetes.io/metadata.name") }}
{{- else if $nsText }}
{{- $from = printf "namespaces %s" $nsText }}
{{- else }}
{{- $from = "every namespace" }}
{{- end }}
{{- $pods := list }}
{{- range $sel.flytePods }}
{{- $podText := include "slurm-connector.selectorText" . }}
{{- $pods = append $pods (ternary (printf "pods %s" $podText) "every pod" (ne $podText "")) }}
{{- end }}
{{- printf "NetworkPolicy %s: gRPC port %d from %s, %s" (include "slurm-connector.fullname" .) (int .Values.connector.grpcPort) $from (join " or " $pods) }}
{{- with $np.extraIngress }}
{{- printf "; plus %d rule(s) from networkPolicy.extraIngress" (len .) }}
{{- end }}
{{- end }}

{{/*
Refuse values that would deploy a connector that cannot work, naming the key and the fix.
*/}}
{{- define "slurm-connector.validate" -}}
{{- $v := .Values }}
{{- $file := include "slurm-connector.clustersConfigMap" . }}
{{- if not (has $v.auth.mode (list "tokenFile" "keyFile" "none")) }}
{{- fail (printf "auth.mode=%q: use tokenFile, keyFile or none" $v.auth.mode) }}
{{- end }}
{{- if and (not $v.cluster.restdUrl) (not $file) (not $v.allowEmbeddedDemo) }}
{{- fail "no Slurm cluster configured: set cluster.restdUrl (e.g. http://slurmrestd.hpc.example:6820) or clustersFile.content / clustersFile.existingConfigMap; allowEmbeddedDemo=true deploys the embedded demo instead" }}
{{- end }}
{{- if and $v.cluster.restdUrl (not (regexMatch "^https?://" $v.cluster.restdUrl)) }}
{{- fail (printf "cluster.restdUrl=%q: must start with http:// or https://" $v.cluster.restdUrl) }}
{{- end }}
{{- if and $v.cluster.restdUrl (not $file) (not $v.cluster.workingDir) }}
{{- fail "cluster.workingDir is empty: with cluster.restdUrl and no clusters file, nothing else names the directory for job files, and the published Flyte plugin writes no working_dir, so every CreateTask would be refused; set an absolute directory of the job user on the cluster's shared filesystem, e.g. --set cluster.workingDir=/shared/flyte" }}
{{- end }}
{{- if and $v.cluster.workingDir (not (hasPrefix "/" $v.cluster.workingDir)) }}
{{- fail (printf "cluster.workingDir=%q: must be an absolute path on the cluster's shared filesystem" $v.cluster.workingDir) }}
{{- end }}
{{- if ne $v.auth.mode "none" }}
{{- if not $v.auth.existingSecret }}
{{- fail (printf "auth.mode=%s needs auth.existingSecret: the name of a Secret holding the %s (create it with kubectl create secret generic NAME --from-file=%s=FILE), or set auth.mode=none" $v.auth.mode (ternary "token" "HS256 key" (eq $v.auth.mode "tokenFile")) (include "slurm-connector.secretKey" .)) }}
{{- end }}
{{- if not (or $v.cluster.restdUrl $file) }}
{{- fail (printf "auth.mode=%s without a cluster: set cluster.restdUrl" $v.auth.mode) }}
{{- end }}
{{- end }}
{{- if and (eq $v.auth.mode "keyFile") (not $v.cluster.username) }}
{{- fail "auth.mode=keyFile mints tokens for a user: set cluster.username to the Slurm user jobs run as" }}
{{- end }}
{{- $names := list }}
{{- range $i, $m := $v.sharedFilesystem.mounts }}
{{- if not (and $m.name $m.clusterPath $m.mountPath $m.volume) }}
{{- fail (printf "sharedFilesystem.mounts[%d]: needs name, clusterPath, mountPath and volume" $i) }}
{{- end }}
{{- if not (and (hasPrefix "/" $m.clusterPath) (hasPrefix "/" $m.mountPath)) }}
{{- fail (printf "sharedFilesystem.mounts[%d] (%s): clusterPath and mountPath must both be absolute" $i $m.name) }}
{{- end }}
{{- if or (contains "," $m.clusterPath) (contains "=" $m.clusterPath) (contains "," $m.mountPath) (contains "=" $m.mountPath) }}
{{- fail (printf "sharedFilesystem.mounts[%d] (%s): paths may not contain ',' or '='" $i $m.name) }}
{{- end }}
{{- if has $m.name $names }}
{{- fail (printf "sharedFilesystem.mounts[%d]: the name %q is used twice" $i $m.name) }}
{{- end }}
{{- $names = append $names $m.name }}
{{- end }}
{{- if $v.stager.enabled }}
{{- if not $v.sharedFilesystem.mounts }}
{{- fail "stager.enabled: the stager serves the shared filesystem, so sharedFilesystem.mounts must list at least one mount" }}
{{- end }}
{{- if $v.stager.url }}
{{- fail "stager.enabled and stager.url are both set: the sidecar is reached on loopback; leave stager.url empty (it is for a stager running elsewhere)" }}
{{- end }}
{{- end }}
{{- if and $file (not $v.cluster.restdUrl) (not $v.cluster.name) (or $v.stager.enabled $v.stager.url $v.sharedFilesystem.mounts $v.cluster.workingDir $v.cluster.username) }}
{{- fail "with clustersFile and no cluster.restdUrl, set cluster.name to the clusters-file entry that the staging/cluster settings from values apply to" }}
{{- end }}
{{- $embedded := and $v.allowEmbeddedDemo (not (or $v.cluster.restdUrl $file)) }}
{{- if and $embedded (gt (int $v.replicaCount) 1) }}
{{- fail (printf "replicaCount=%d with the embedded demo: each replica would run its own stand-in cluster, so a task created on one is unknown to the others; set replicaCount=1 (or configure a real cluster)" (int $v.replicaCount)) }}
{{- end }}
{{- /* The listen addresses come from the port values, which also feed the probes and Services. */}}
{{- range $key, $args := dict "connector.args" $v.connector.args "connector.extraArgs" $v.connector.extraArgs "stager.args" $v.stager.args }}
{{- $portKey := ternary "stager.port" "connector.grpcPort" (eq $key "stager.args") }}
{{- range $args }}
{{- if regexMatch "^--listen(=|$)" . }}
{{- fail (printf "%s contains %s: the chart passes --listen itself, from %s (which the container port and probes%s use too, so they would disagree); remove it and set the port instead, e.g. --set %s=%d" $key . $portKey (ternary ", and the connector's stager URL," ", and the Services," (eq $key "stager.args")) $portKey (ternary 9191 8443 (eq $key "stager.args"))) }}
{{- end }}
{{- if regexMatch "^--metrics-listen(=|$)" . }}
{{- fail (printf "%s contains %s: the chart passes --metrics-listen itself, from connector.metricsPort (which the Service uses too); remove it and set connector.metricsPort instead, e.g. --set connector.metricsPort=9464" $key .) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and $v.claims.singleReplica (or (gt (int $v.replicaCount) 1) (ne $v.updateStrategy.type "Recreate")) }}
{{- fail (printf "claims.singleReplica=true with replicaCount=%d and updateStrategy.type=%s: it accepts a claims store without conditional writes, on which two pods at once (replicas, or a rolling update's old and new pod) could both submit a task; set replicaCount=1 and updateStrategy.type=Recreate, or put claims in a store that honours conditional writes (claims.location) and leave singleReplica false" (int $v.replicaCount) $v.updateStrategy.type) }}
{{- end }}
{{- $pdb := $v.podDisruptionBudget }}
{{- if and (ne (toString $pdb.minAvailable) "") (ne (toString $pdb.maxUnavailable) "") }}
{{- fail "podDisruptionBudget: set only one of minAvailable and maxUnavailable (Kubernetes takes one)" }}
{{- end }}
{{- if and $pdb.enabled (ne (toString $pdb.minAvailable) "") (not (kindIs "string" $pdb.minAvailable)) (gt (int $v.replicaCount) 1) (ge (int $pdb.minAvailable) (int $v.replicaCount)) }}
{{- fail (printf "podDisruptionBudget.minAvailable=%d with replicaCount=%d: no pod could ever be evicted, so node drains would hang; use a lower minAvailable, or maxUnavailable" (int $pdb.minAvailable) (int $v.replicaCount)) }}
{{- end }}
{{- /* Identity rules are sound only while nothing but Flyte's backend reaches the gRPC port. */}}
{{- $np := $v.networkPolicy }}
{{- /* Every way a clusters file can reach the connector that the chart cannot read: an existing
ConfigMap, `--config` in the arguments, FLYTE_SLURM_CONFIG in extraEnv. */}}
{{- $unread := list }}
{{- with $v.clustersFile.existingConfigMap }}
{{- $unread = append $unread (printf "clustersFile.existingConfigMap=%s, which the chart cannot read" .) }}
{{- end }}
{{- range $key, $args := dict "connector.args" $v.connector.args "connector.extraArgs" $v.connector.extraArgs }}
{{- range $args }}
{{- if regexMatch "^--config(=|$)" (toString .) }}
{{- $unread = append $unread (printf "%s passes --config, a clusters file the chart cannot read" $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- range $v.connector.extraEnv }}
{{- if eq .name "FLYTE_SLURM_CONFIG" }}
{{- $unread = append $unread "connector.extraEnv sets FLYTE_SLURM_CONFIG, a clusters file the chart cannot read" }}
{{- end }}
{{- end }}
{{- if contains "identities" $v.clustersFile.content }}
{{- $unread = append $unread "clustersFile.content mentions identities" }}
{{- end }}
{{- if and (not $np.enabled) (not $np.acknowledgeOpen) $unread }}
{{- fail (printf "networkPolicy.enabled=false while the clusters file may hold identity rules (%s): the connector picks the Slurm user a job runs as from the request, so without a policy any pod of the cluster that reaches the gRPC port could run jobs as the users the rules map to. Keep networkPolicy.enabled=true (adapt networkPolicy.flyte.namespaceSelector / podSelector to your Flyte), or, only if you restrict ingress to the gRPC port by other means (a service mesh's authorization policy, a namespace of its own with a default-deny policy), set networkPolicy.acknowledgeOpen=true and declare that restriction in connector.extraEnv as FLYTE_SLURM_INGRESS_POLICY (the connector refuses to start with identity rules without it)" (join "; " $unread)) }}
{{- end }}
{{- if $np.enabled }}
{{- $sel := include "slurm-connector.npSelectors" . | fromYaml }}
{{- range $sel.flytePods }}
{{- if not (or (include "slurm-connector.selectorText" $sel.flyteNamespaces) (include "slurm-connector.selectorText" .)) }}
{{- fail "networkPolicy.flyte: namespaceSelector and podSelector are both empty, which admits every pod of every namespace to the gRPC port (no restriction at all); select Flyte's backend, e.g. namespaceSelector.matchLabels kubernetes.io/metadata.name: flyte and podSelector.matchLabels app.kubernetes.io/name: flyte-binary (Flyte 2) or flytepropeller (Flyte 1's flyte-core)" }}
{{- end }}
{{- end }}
{{- range $v.connector.extraEnv }}
{{- if eq .name "FLYTE_SLURM_INGRESS_POLICY" }}
{{- fail "connector.extraEnv sets FLYTE_SLURM_INGRESS_POLICY while networkPolicy.enabled=true: the chart sets it from the NetworkPolicy it renders; remove it from extraEnv (it is for a restriction outside the chart, with networkPolicy.enabled=false)" }}
{{- end }}
{{- end }}
{{- end }}
{{- if or $v.stager.enabled $v.stager.url }}
{{- if not $v.stager.tokenSecret }}
{{- fail "the stager needs stager.tokenSecret: a Secret whose key stager.tokenSecretKey holds the bearer token both sides share" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The pod's affinity: `affinity` as given, else replicas spread by podAntiAffinity. */}}
{{- define "slurm-connector.affinity" -}}
{{- $a := .Values.podAntiAffinity }}
{{- if .Values.affinity }}
{{- toYaml .Values.affinity }}
{{- else if and (gt (int .Values.replicaCount) 1) (ne $a.type "none") }}
{{- $term := dict "labelSelector" (dict "matchLabels" (include "slurm-connector.selectorLabels" . | fromYaml)) "topologyKey" $a.topologyKey }}
{{- if eq $a.type "required" }}
{{- toYaml (dict "podAntiAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (list $term))) }}
{{- else }}
{{- toYaml (dict "podAntiAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" (int $a.weight) "podAffinityTerm" $term)))) }}
{{- end }}
{{- end }}
{{- end }}

{{/* The key inside auth.existingSecret. */}}
{{- define "slurm-connector.secretKey" -}}
{{- if .Values.auth.secretKey }}
{{- .Values.auth.secretKey }}
{{- else if eq .Values.auth.mode "keyFile" }}
{{- "jwt_hs256.key" }}
{{- else }}
{{- "token" }}
{{- end }}
{{- end }}


{{/* A probe from values (timings only) with the handler the chart owns merged in. */}}
{{- define "slurm-connector.probe" -}}
{{- $p := omit (deepCopy .probe) "grpc" "httpGet" "tcpSocket" "exec" }}
{{- toYaml (merge $p .handler) }}
{{- end }}

{{/*
The digest put in a pod annotation for a ConfigMap or Secret the pod reads at start only, so a
change rolls the pods: the value given (dict key "given"), else the object's data as the chart can
read it at install/upgrade (`lookup`: the live object; empty under `helm template` and dry runs),
else "" (no annotation). Args: dict "root" . "kind" "ConfigMap"|"Secret" "name" NAME "given" VALUE.
*/}}
{{- define "slurm-connector.checksumOf" -}}
{{- if .given }}
{{- .given }}
{{- else if .name }}
{{- $obj := lookup "v1" .kind .root.Release.Namespace .name }}
{{- if $obj }}
{{- $obj.data | default dict | toJson | sha256sum | trunc 16 }}
{{- end }}
{{- end }}
{{- end }}
