# shellcheck shell=bash
# Part of deploy/dev-cluster/dev-cluster (sourced by it; uses its variables and helpers).
#
# --apptainer (26.05 and 26.11, the Debian sid chroots): apptainer in the chroot, slurmd under pivot_root in its own mount
# namespace (job steps inherit it), and a cached Flyte task image at /images inside the chroot.
# Why pivot_root and not chroot: see lib/pivot-exec.sh.

# The task image: Debian minbase + a venv with `flyte` from PyPI, no container registry involved.
IMAGE_SUITE=trixie
IMAGE_FLYTE_VERSION="${DEV_CLUSTER_FLYTE_VERSION:-2.12.1}"
IMAGE_NAME=flyte-native.sif
IMAGES_MOUNT=/images # where the chroot (and so every job) sees $CACHE/images
# The same images on the "shared filesystem", read-only, as a site pre-stages them: the connector
# sees them there through FLYTE_SLURM_SHARED_MOUNTS (its image mapping checks they exist).
SHARED_IMAGES_MOUNT=$SHARED_DIR/images

apptainer_check_release() {
	[[ "$SUITE" == sid ]] ||
		die "--apptainer needs --release 26.05 or 26.11 (Debian sid ships apptainer; trixie, used by 24.11, does not)"
}

# Packages and the /dev/fuse node (a .sif is mounted with squashfuse_ll, which opens /dev/fuse;
# the host's node is 0600, so the chroot gets its own, 0666 as on a usual node).
install_apptainer() {
	if [[ ! -f "$CACHE/.stage-apptainer" ]]; then
		local t0=$SECONDS
		mount_proc
		log "installing apptainer, squashfuse, fuse2fs, fuse-overlayfs in the chroot"
		# sid's Release files expire within a week; mirrors serving a snapshot are past it
		# (99dev-cluster sets the same; repeated here for chroots built before it did).
		in_root env DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Check-Valid-Until=false update -qq \
			>"$LOGS/apt-apptainer.out" 2>&1 ||
			die "apt-get update in the chroot failed (log: $LOGS/apt-apptainer.out)"
		in_root env DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Check-Valid-Until=false install -y -qq \
			--no-install-recommends apptainer squashfuse fuse2fs fuse-overlayfs >>"$LOGS/apt-apptainer.out" 2>&1 ||
			{
				tail -n 20 "$LOGS/apt-apptainer.out" >&2
				die "installing apptainer in the chroot failed (log: $LOGS/apt-apptainer.out)"
			}
		in_root apt-get clean
		touch "$CACHE/.stage-apptainer"
		log "apptainer installed in $((SECONDS - t0))s"
	fi
	if [[ ! -c "$ROOT/dev/fuse" ]]; then
		rm -f "$ROOT/dev/fuse"
		mknod -m 0666 "$ROOT/dev/fuse" c 10 229
	fi
}

# The recipe: builds the image's root folder at $1. Its text is part of the image's cache key,
# so editing it rebuilds the image on the next `up`.
image_recipe() {
	local s="$1" mirror
	mirror="$(host_mirror)"
	debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
		"$IMAGE_SUITE" "$s" "$mirror" >"$LOGS/image-debootstrap.out" 2>&1 || {
		tail -n 20 "$LOGS/image-debootstrap.out" >&2
		die "debootstrap of the task image failed (log: $LOGS/image-debootstrap.out)"
	}
	# pip inside the image trusts what the host trusts (a TLS-inspecting proxy's CA, say), and
	# uses the host's package index settings if it has any (none are named here).
	cp /etc/ssl/certs/ca-certificates.crt "$s/tmp/build-ca.crt"
	local pip_env=() v
	for v in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST PIP_DEFAULT_TIMEOUT; do
		[[ -n "${!v:-}" ]] && pip_env+=("$v=${!v}")
	done
	# shellcheck disable=SC2016 # $1 expands in the inner shell, inside the image
	env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 PIP_CERT=/tmp/build-ca.crt \
		PIP_DISABLE_PIP_VERSION_CHECK=1 "${pip_env[@]}" chroot "$s" /bin/bash -c \
		'python3 -m venv /opt/venv && /opt/venv/bin/pip install --no-cache-dir "flyte==$1"' \
		pip "$IMAGE_FLYTE_VERSION" >"$LOGS/image-pip.out" 2>&1 || {
		tail -n 20 "$LOGS/image-pip.out" >&2
		die "pip install flyte==$IMAGE_FLYTE_VERSION in the task image failed (log: $LOGS/image-pip.out)"
	}
	rm -f "$s/tmp/build-ca.crt"
	rm -rf "$s"/var/cache/apt/archives/*.deb "$s"/var/lib/apt/lists/*_Packages "$s"/var/lib/apt/lists/*_Translation*
	# = Docker's `ENV VIRTUAL_ENV=/opt/venv`: the connector's PATH shim puts $VIRTUAL_ENV/bin first.
	mkdir -p "$s/.singularity.d/env"
	echo 'export VIRTUAL_ENV=/opt/venv' >"$s/.singularity.d/env/90-venv.sh"
}

image_recipe_hash() {
	{
		printf '%s\n' "$IMAGE_SUITE" "$IMAGE_FLYTE_VERSION"
		declare -f image_recipe
	} | sha256sum | cut -c1-16
}

# 26.11 runs in a copy of 26.05's chroot: an image made there from the same recipe is the same
# file. Copies image $1 from the base release's cache when its recipe stamp says $2 (else 1).
copy_image_from_base() {
	local name="$1" want="$2" dir="$CACHE/images" base="$CACHE_BASE/${BASE_RELEASE:-none}/images"
	[[ -n "$BASE_RELEASE" && -f "$base/$name" && "$(cat "$base/$name.recipe" 2>/dev/null)" == "$want" ]] ||
		return 1
	log "copying the image $name (recipe $want) from the $BASE_RELEASE cache"
	mkdir -p "$dir"
	cp "$base/$name" "$dir/.$name.partial"
	mv -f "$dir/.$name.partial" "$dir/$name"
	echo "$want" >"$dir/$name.recipe"
}

# $CACHE/images/$IMAGE_NAME, rebuilt only when the recipe's hash differs from the one it was
# built from ($IMAGE_NAME.recipe). Needs the chroot's apptainer, so after install_apptainer.
build_task_image() {
	local dir="$CACHE/images" want have=""
	want="$(image_recipe_hash)"
	mkdir -p "$dir"
	[[ -f "$dir/$IMAGE_NAME.recipe" ]] && have="$(cat "$dir/$IMAGE_NAME.recipe")"
	if [[ -f "$dir/$IMAGE_NAME" && "$have" == "$want" ]]; then
		return 0
	fi
	copy_image_from_base "$IMAGE_NAME" "$want" && return 0
	local t0=$SECONDS sandbox="$dir/build.sandbox"
	log "building the task image $IMAGE_NAME (Debian $IMAGE_SUITE + flyte==$IMAGE_FLYTE_VERSION from PyPI, recipe $want; takes minutes)"
	if [[ -e "$sandbox" ]]; then
		mounts_below "$sandbox" && die "$sandbox has mounts below it (an interrupted debootstrap?); unmount them and retry"
		rm -rf "$sandbox"
	fi
	image_recipe "$sandbox"
	local t1=$SECONDS
	# `apptainer build` needs / to be a mount point: run it under pivot_root, as root, with
	# $CACHE/images visible at $IMAGES_MOUNT (bound before).
	mount_images
	"$LIB_DIR/pivot-exec.sh" "$ROOT" env -i PATH="$CHROOT_PATH" HOME=/root LANG=C.UTF-8 \
		apptainer -q build --force "$IMAGES_MOUNT/.$IMAGE_NAME.partial" "$IMAGES_MOUNT/build.sandbox" \
		>"$LOGS/image-build.out" 2>&1 || {
		tail -n 20 "$LOGS/image-build.out" >&2
		die "apptainer build of the task image failed (log: $LOGS/image-build.out)"
	}
	mv -f "$dir/.$IMAGE_NAME.partial" "$dir/$IMAGE_NAME"
	echo "$want" >"$dir/$IMAGE_NAME.recipe"
	rm -rf "$sandbox"
	log "task image built in $((SECONDS - t0))s (root folder $((t1 - t0))s, sif $((SECONDS - t1))s): $IMAGES_MOUNT/$IMAGE_NAME in the chroot"
}

mount_images() {
	mkdir -p "$CACHE/images" "$ROOT$IMAGES_MOUNT" "$ROOT$SHARED_IMAGES_MOUNT"
	is_mounted "$ROOT$IMAGES_MOUNT" || mount --bind "$CACHE/images" "$ROOT$IMAGES_MOUNT"
	if ! is_mounted "$ROOT$SHARED_IMAGES_MOUNT"; then
		mount --bind "$CACHE/images" "$ROOT$SHARED_IMAGES_MOUNT"
		mount -o remount,bind,ro "$ROOT$SHARED_IMAGES_MOUNT"
	fi
}

umount_images() {
	local m
	for m in "$ROOT$SHARED_IMAGES_MOUNT" "$ROOT$IMAGES_MOUNT"; do
		if is_mounted "$m"; then
			umount "$m" || umount -l "$m"
		fi
	done
}

prepare_apptainer() {
	apptainer_check_release
	install_apptainer
	build_task_image
	mount_images
}

# slurmd in its own mount namespace. Its pid is the pid file's (pivot-exec.sh execs through);
# the namespace's id goes to slurmd.mntns once unshare has run, and is how `down`/`status` know
# slurmd and its job steps (their /proc/PID/root reads `/`, like any host process).
start_slurmd_pivot() {
	start_daemon slurmd "$LIB_DIR/pivot-exec.sh" "$ROOT" \
		env -i PATH="$CHROOT_PATH" LANG=C.UTF-8 /usr/sbin/slurmd -D -N node1
	local pid host_ns ns i
	pid="$(daemon_pid slurmd)"
	host_ns="$(readlink /proc/self/ns/mnt)"
	for ((i = 0; i < 100; i++)); do
		ns="$(readlink "/proc/$pid/ns/mnt" 2>/dev/null)" || break
		# unshare made it; the exec chain (mounts, pivot_root, slurmd) stays in it.
		if [[ "$ns" != "$host_ns" ]]; then
			echo "$ns" >>"$RUN/slurmd.mntns"
			return 0
		fi
		sleep 0.1
	done
	show_logs slurmd
	die "slurmd under pivot_root did not start (logs above; $LOGS/slurmd.out)"
}

# Processes of the slurmd namespace and their descendants (apptainer's container processes live
# in further namespaces of their own, but descend from a job step), never matched by name.
pivot_processes() {
	local ns p pid stat ppid changed
	local -A parent=() ours=() nss=()
	# One namespace a line (--nodes: one per node); none without --apptainer/--pyxis.
	[[ -f "$RUN/slurmd.mntns" ]] || return 0
	while read -r ns; do [[ -n "$ns" ]] && nss[$ns]=1; done <"$RUN/slurmd.mntns"
	((${#nss[@]} > 0)) || return 0
	for p in /proc/[0-9]*; do
		pid="${p#/proc/}"
		stat="$(cat "$p/stat" 2>/dev/null)" || continue
		stat="${stat##*) }" # "STATE PPID ...": the command name may hold spaces and parentheses
		ppid="${stat#* }"
		parent[$pid]="${ppid%% *}"
		ns="$(readlink "$p/ns/mnt" 2>/dev/null)" || continue
		[[ -n "${nss[$ns]:-}" ]] && ours[$pid]=1
	done
	changed=1
	while ((changed)); do
		changed=0
		for pid in "${!parent[@]}"; do
			if [[ -z "${ours[$pid]:-}" && -n "${ours[${parent[$pid]}]:-}" ]]; then
				ours[$pid]=1
				changed=1
			fi
		done
	done
	((${#ours[@]} == 0)) || printf '%s\n' "${!ours[@]}"
}
