#!/usr/bin/env bash
# Build the image's runtime stage (deploy/docker/Dockerfile, target runtime-prebuilt) with podman
# and run it the way the chart runs it, checking it from outside. No Docker engine, no registry:
#   - the base is a Debian minbase root folder made by debootstrap from the host's apt mirror and
#     imported with `podman import` (the tarball cached in $CACHE by the hash of its recipe, the
#     imported image tagged with that hash, so both are made once per recipe);
#   - the binary is one cargo already built (default: the debug build `cargo test --workspace`
#     leaves in the target dir, default features; --release builds the release binary with the
#     image's features, $FEATURES or `https`, ~9 min cold on 2 cores, and uses that);
#   - the container runs as user 65532 with a read-only root filesystem and a tmpfs /tmp (the
#     chart's emptyDir), on the host's loopback (--network host), with the embedded default
#     (mock-slurmrestd, local staging, local object store) since it has no cluster configured.
# Checked from the host: `--help`, grpc.health.v1 SERVING for every service, and a CreateTask
# / GetTask / GetTaskLogs round trip (`slurm-connector submit` run on the host against it), then
# SIGTERM: the container exits 0 within the drain deadline.
# --quickstart (with a dev cluster up and its `dev-cluster env` exported): then the quick-start's
# pod, as docs/quickstart-kubernetes.md deploys it, against that cluster (quickstart_pod below).
# Installs podman, buildah, crun (or runc), fuse-overlayfs and debootstrap with apt-get when missing
# (root).
# Idempotent: a second run rebuilds only the last layers (the binary) and reruns the checks.
set -euo pipefail
cd "$(dirname "$0")/../.."

PROFILE=debug
QUICKSTART=0
for arg in "$@"; do
	case "$arg" in
	--release) PROFILE=release ;;
	--quickstart) QUICKSTART=1 ;;
	*)
		echo "ci-image: unknown argument $arg (--release, --quickstart)" >&2
		exit 2
		;;
	esac
done
SUITE=${IMAGE_BASE_SUITE:-trixie}   # the Dockerfile's DEBIAN_RELEASE
CACHE=${IMAGE_CACHE:-/var/cache/slurm-connector-image}
TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
PY=${SLURM_CONNECTOR_PYTHON:-python3}
NAME=slurm-connector-ci-$$
t0=$(date +%s)
say() { echo "ci-image [$(($(date +%s) - t0))s] $*"; }
die() {
	echo "ci-image: $*" >&2
	exit 1
}
[[ "$(id -u)" == 0 ]] || die "run as root (apt-get, debootstrap, podman with the overlay driver)"
mkdir -p "$CACHE"
# The container gets only what is passed below; the host-side `submit` none of the caller's
# cluster settings (CI exports the dev cluster's).
# The dev cluster's facts the --quickstart pod needs are kept first.
DEV_URL=${FLYTE_SLURM_RESTD_URL:-} DEV_KEY=${FLYTE_SLURM_JWT_KEY_FILE:-} DEV_ROOT=${SLURM_DEV_CLUSTER_ROOT:-}
if ((QUICKSTART)) && [[ -z "$DEV_URL" || -z "$DEV_KEY" || -z "$DEV_ROOT" ]]; then
	die "--quickstart needs a dev cluster: eval \"\$(deploy/dev-cluster/dev-cluster env)\" first"
fi
while read -r v; do unset "$v"; done < <(compgen -e | grep '^FLYTE_SLURM_' || true)

# ---- tools
missing=()
for t in podman:podman buildah:buildah crun:crun fuse-overlayfs:fuse-overlayfs debootstrap:debootstrap; do
	command -v "${t%%:*}" >/dev/null || missing+=("${t##*:}")
done
if ((${#missing[@]})); then
	say "installing ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$CACHE.apt.log" 2>&1 ||
		{
			DEBIAN_FRONTEND=noninteractive apt-get update -qq >>"$CACHE.apt.log" 2>&1
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$CACHE.apt.log" 2>&1
		} || die "apt-get install ${missing[*]} failed (log: $CACHE.apt.log)"
fi
# The health check speaks gRPC from Python (grpcio, pinned as .ci/run pins it).
if ! "$PY" -c 'import grpc' 2>/dev/null; then
	[[ -x "$CACHE/venv/bin/python" ]] || python3 -m venv "$CACHE/venv"
	"$CACHE/venv/bin/pip" install --quiet --disable-pip-version-check grpcio==1.85.3
	PY="$CACHE/venv/bin/python"
fi
# cgroupfs and a file event log: no systemd here. The build runs its RUN steps with chroot
# isolation (no OCI runtime, so no cgroups needed); the runtime for `podman run` is probed below.
PODMAN=(podman --cgroup-manager cgroupfs --events-backend file)

# Containers of an interrupted earlier run (killed before its EXIT trap).
"${PODMAN[@]}" ps -aq --filter label=slurm-connector-ci | xargs -r "${PODMAN[@]}" rm -f -t 0 >/dev/null 2>&1 || true

# ---- the base image
host_mirror() {
	local uri
	uri="$(
		{
			cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk 'tolower($1) == "uris:" { for (i = 2; i <= NF; i++) print $i }'
			cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
				awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i !~ /\]$/) { print $i; break } }'
		} | grep -v -i security | grep -E '^(https?|file)://' | grep -E '/debian/?$' | head -n 1
	)" || true
	printf '%s\n' "${IMAGE_BASE_MIRROR:-${uri%/}}"
}
# The recipe of the base's root folder ($1): its text is the cache key, so editing it rebuilds.
# = debian:<suite>-slim in substance: minbase, no apt lists, no docs.
base_recipe() {
	local root="$1"
	debootstrap --variant=minbase "$SUITE" "$root" "$(host_mirror)"
	rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
		"$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/var/log/*.log
	: >"$root/etc/machine-id"
}
hash=$({
	echo "$SUITE"
	declare -f base_recipe
} | sha256sum | cut -c1-16)
BASE_TAR="$CACHE/rootfs-$SUITE-$hash.tar"
BASE_IMAGE="localhost/slurm-connector-base:$SUITE-$hash"
mkdir -p "$CACHE"
if [[ ! -f "$BASE_TAR" ]]; then
	say "debootstrap $SUITE minbase (recipe $hash) from $(host_mirror); once per recipe"
	root="$CACHE/rootfs.partial"
	rm -rf "$root"
	base_recipe "$root" >"$CACHE/debootstrap.log" 2>&1 || {
		tail -n 20 "$CACHE/debootstrap.log" >&2
		die "debootstrap failed (log: $CACHE/debootstrap.log)"
	}
	tar --numeric-owner -C "$root" -cf "$BASE_TAR.partial" .
	mv -f "$BASE_TAR.partial" "$BASE_TAR"
	rm -rf "$root"
fi
if ! "${PODMAN[@]}" image exists "$BASE_IMAGE"; then
	say "podman import $BASE_TAR as $BASE_IMAGE"
	"${PODMAN[@]}" import --quiet "$BASE_TAR" "$BASE_IMAGE" >/dev/null
fi

# ---- the binary and the image
BIN="$TARGET_DIR/$PROFILE/slurm-connector"
if [[ "$PROFILE" == release ]]; then
	# With the image's default features (the Dockerfile's FEATURES).
	say "cargo build --release --locked --bin slurm-connector --features ${FEATURES:-https}"
	cargo build --release --locked --bin slurm-connector --features "${FEATURES:-https}"
elif [[ ! -x "$BIN" ]]; then
	say "no $BIN yet: cargo build --bin slurm-connector"
	cargo build --locked --bin slurm-connector
fi
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"; "${PODMAN[@]}" rm -f -t 0 "$NAME" "$NAME-quickstart" >/dev/null 2>&1 || true' EXIT
cp "$BIN" "$ctx/slurm-connector"
cp /etc/ssl/certs/ca-certificates.crt "$ctx/ca-certificates.crt"
: >"$ctx/empty.ignore" # the context is only these two files (not Dockerfile.dockerignore's rules)
IMAGE=localhost/slurm-connector:ci
say "podman build --target runtime-prebuilt (base $BASE_IMAGE, $PROFILE binary $(du -m "$BIN" | cut -f1) MB)"
"${PODMAN[@]}" build --quiet --pull=never --layers --isolation chroot --ignorefile "$ctx/empty.ignore" \
	-f deploy/docker/Dockerfile --target runtime-prebuilt \
	--build-arg RUNTIME_BASE="$BASE_IMAGE" -t "$IMAGE" "$ctx" >/dev/null
# The previous run's image (now untagged) and its binary layer: not kept.
"${PODMAN[@]}" image prune -f >/dev/null

# ---- run it as the chart does
[[ "$("${PODMAN[@]}" image inspect --format '{{.Config.User}}' "$IMAGE")" == 65532:65532 ]] ||
	die "the image's user is not 65532:65532"
# Resource limits no higher than this process may set (podman's defaults, 1048576 open files,
# need CAP_SYS_RESOURCE), and an OCI runtime that runs here: crun without cgroups first; crun
# refuses hybrid cgroup hosts (v1 + a v2 hierarchy with controllers), where runc (cgroupfs) works.
nofile=$(ulimit -Hn)
[[ "$nofile" == unlimited || "$nofile" -gt 65536 ]] && nofile=65536
LIMITS=(--ulimit "nofile=$nofile:$nofile" --ulimit nproc=4096:4096)
RUN=()
for rt in "crun --cgroups disabled" "runc"; do
	read -ra r <<<"$rt"
	command -v "${r[0]}" >/dev/null ||
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${r[0]}" >>"$CACHE.apt.log" 2>&1 || continue
	if err=$("${PODMAN[@]}" --runtime "${r[0]}" run --rm "${r[@]:1}" "${LIMITS[@]}" --network none "$IMAGE" --version 2>&1); then
		RUN=("${PODMAN[@]}" --runtime "${r[0]}" run "${r[@]:1}" "${LIMITS[@]}")
		say "podman run with ${r[*]}"
		break
	fi
	say "podman run with ${r[*]} fails here: $(tail -n 1 <<<"$err")"
done
((${#RUN[@]})) || die "no OCI runtime runs a container here (tried crun without cgroups, runc)"
# Captured whole, then searched: `podman run … | grep -q` fails when grep has its match and
# exits while podman still writes ("attaching to container …: write /dev/stdout: broken pipe",
# seen in a CI run; with pipefail that failed the check).
help="$("${RUN[@]}" --rm --network none --read-only --user 65532 "$IMAGE" --help)" ||
	die "slurm-connector --help in the image failed"
grep -q "Usage: slurm-connector" <<<"$help" || die "slurm-connector --help in the image printed no usage: $help"
say "--help ok"
# Waits (30 s at most) until every service of the connector on 127.0.0.1:$1 answers
# grpc.health.v1 SERVING; fails naming what it got.
wait_serving() {
	"$PY" - "$1" <<'EOF'
import sys, time, grpc
port = sys.argv[1]
ch = grpc.insecure_channel(f"127.0.0.1:{port}")
call = ch.unary_unary("/grpc.health.v1.Health/Check", request_serializer=lambda b: b, response_deserializer=lambda b: b)
def status(service):
    raw = service.encode()
    resp = call((b"\x0a" + bytes([len(raw)]) + raw) if raw else b"", timeout=5)
    return resp[1] if len(resp) >= 2 and resp[0] == 0x08 else 0
deadline = time.time() + 30
while True:
    try:
        got = {s: status(s) for s in ["", "flyteidl2.connector.AsyncConnectorService", "flyteidl2.connector.ConnectorMetadataService"]}
        break
    except grpc.RpcError as e:
        if time.time() > deadline:
            sys.exit(f"no health answer on :{port}: {e}")
        time.sleep(0.2)
print("health", {k or "(server)": "SERVING" if v == 1 else v for k, v in got.items()})
sys.exit(0 if all(v == 1 for v in got.values()) else 1)
EOF
}
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
GRPC=$(free_port)
METRICS=$(free_port)
"${RUN[@]}" -d --name "$NAME" --label slurm-connector-ci --network host --read-only --user 65532 --tmpfs /tmp:rw,mode=1777 \
	--cap-drop ALL --security-opt no-new-privileges \
	-e FLYTE_SLURM_DATA_DIR=/tmp/slurm-connector -e FLYTE_SLURM_SHUTDOWN_GRACE=10s \
	"$IMAGE" serve --listen "127.0.0.1:$GRPC" --metrics-listen "127.0.0.1:$METRICS" >/dev/null
logs() { "${PODMAN[@]}" logs "$NAME" 2>&1 | tail -n 30 >&2; }
wait_serving "$GRPC" || { logs; die "gRPC health is not SERVING"; }
say "grpc.health.v1 SERVING"
if "${PODMAN[@]}" exec "$NAME" /bin/sh -c ': >/probe' 2>/dev/null; then
	die "the container's root filesystem is writable"
fi
[[ "$("${PODMAN[@]}" exec "$NAME" id -u)" == 65532 ]] || die "the container does not run as 65532"
# Captured whole for the same reason as --help's output (curl would fail writing to a closed pipe).
metrics="$(curl -fsS "http://127.0.0.1:$METRICS/metrics")" || { logs; die "no answer on :$METRICS/metrics"; }
grep -q '^# TYPE' <<<"$metrics" || { logs; die "no Prometheus metrics on :$METRICS"; }
script="$ctx/hello.sbatch"
# shellcheck disable=SC2016 # $(id -u) expands in the job, inside the container
printf '#!/bin/bash\necho "hello from $(id -u) in the image"\n' >"$script"
out=$("$BIN" submit "$script" --connector "http://127.0.0.1:$GRPC" --poll 1 \
	--output-prefix file:///tmp/slurm-connector/objects/ci-image 2>&1) || {
	echo "$out" >&2
	logs
	die "CreateTask/GetTask round trip failed"
}
if ! grep -q SUCCEEDED <<<"$out" || ! grep -q "hello from 65532 in the image" <<<"$out"; then
	echo "$out" >&2
	die "the round trip did not end SUCCEEDED with the job's log"
fi
say "CreateTask -> GetTask SUCCEEDED -> GetTaskLogs, the job ran as 65532 in the read-only container"
s0=$(date +%s)
"${PODMAN[@]}" kill --signal TERM "$NAME" >/dev/null
code=$(timeout 15 "${PODMAN[@]}" wait "$NAME") || die "the container did not exit within 15 s of SIGTERM"
[[ "$code" == 0 ]] || {
	logs
	die "the container exited $code after SIGTERM"
}
say "SIGTERM: exit 0 after $(($(date +%s) - s0))s"
"${PODMAN[@]}" rm -f "$NAME" >/dev/null
say "image checks passed ($IMAGE, $(("$("${PODMAN[@]}" image inspect --format '{{.Size}}' "$IMAGE")" / 1000000)) MB)"

# ---- --quickstart: the quick-start's pod against the dev cluster
# docs/quickstart-kubernetes.md's values (ci/quickstart-values.yaml, which tests/it/docs_names.rs
# holds equal to the doc's block) rendered by the chart and its connector container run as
# Kubernetes would run it (deploy/docker/pod_from_chart.py: args, env, user and groups, read-only
# root, mounts), then `slurm-connector check` in it, as the doc's `kubectl exec … check` step.
# Only the site's facts change: slurmrestd's URL, free ports on this host, the job user's uid/gid
# when the dev cluster's differ from the doc's example; the Secret is the dev cluster's key (mode
# 0440, group fsGroup, as Kubernetes mounts it) and the NFS export its /shared.
quickstart_pod() {
	local values=deploy/helm/slurm-connector/ci/quickstart-values.yaml vpy=${VENV:-$PWD/.venv}/bin/python
	[[ -x "$vpy" ]] || die "no $vpy with Helm: run deploy/validate-chart.sh first (it makes that venv)"
	local user uid gid
	user=$("$vpy" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["cluster"]["username"])' "$values")
	IFS=: read -r _ _ uid gid _ < <(grep "^$user:" "$DEV_ROOT/etc/passwd") ||
		die "the dev cluster has no user $user (the quick-start's cluster.username)"
	local secret="$ctx/slurm-jwt-key"
	mkdir -p "$secret"
	install -m 0440 -o root -g "$gid" "$DEV_KEY" "$secret/jwt_hs256.key"
	local grpc metrics sets=()
	grpc=$(free_port)
	metrics=$(free_port)
	sets=(--set "cluster.restdUrl=$DEV_URL" --set "connector.grpcPort=$grpc" --set "connector.metricsPort=$metrics"
		--set "podSecurityContext.runAsUser=$uid" --set "podSecurityContext.runAsGroup=$gid"
		--set "podSecurityContext.fsGroup=$gid")
	local pod=()
	mapfile -t pod < <("$vpy" deploy/docker/pod_from_chart.py "$values" "${sets[@]}" \
		--volume "slurmrestd-auth=$secret" --volume "shared=$DEV_ROOT/shared") ||
		die "the quick-start's values did not render into a pod"
	local i split=0
	for i in "${!pod[@]}"; do [[ "${pod[$i]}" == -- ]] && split=$i; done
	((split)) || die "pod_from_chart.py printed no -- before the container's args"
	local qs=$NAME-quickstart
	say "quick-start pod: uid $uid, args ${pod[*]:split+1}"
	"${RUN[@]}" -d --name "$qs" --label slurm-connector-ci --network host "${pod[@]:0:split}" \
		"$IMAGE" "${pod[@]:split+1}" >/dev/null
	qs_logs() { "${PODMAN[@]}" logs "$qs" 2>&1 | tail -n 30 >&2; }
	wait_serving "$grpc" || {
		qs_logs
		die "the quick-start pod is not SERVING"
	}
	local out
	out=$("${PODMAN[@]}" exec "$qs" slurm-connector check 2>&1) || {
		echo "$out" >&2
		qs_logs
		die "slurm-connector check failed in the quick-start pod"
	}
	echo "$out"
	"${PODMAN[@]}" rm -f -t 10 "$qs" >/dev/null
	say "quick-start pod: check passed against $DEV_URL"
}
if ((QUICKSTART)); then
	quickstart_pod
fi
