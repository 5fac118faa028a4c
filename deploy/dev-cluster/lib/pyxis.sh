# shellcheck shell=bash
# Part of deploy/dev-cluster/dev-cluster (sourced by it; uses its variables and helpers).
#
# --pyxis (26.05, 26.11): NVIDIA's Enroot and Pyxis, built from the vendored source tarballs inside
# the chroot (Debian packages neither) against that release's spank.h (a SPANK plugin loads only
# in the Slurm it was built for), Pyxis loaded by slurmd through plugstack.conf, slurmd under
# pivot_root as for --apptainer (Enroot creates user namespaces), and the task image as an
# Enroot squashfs `/images/flyte-native.sqsh` made from the very files of the Apptainer image
# (`/images/flyte-native.sif`), so both runtimes run the same Debian trixie + flyte==2.12.1.
# Both builds are cached by content hash; see README.md ("--pyxis").

PYXIS_IMAGE_NAME=flyte-native.sqsh
# The Debian packages Enroot and Pyxis build with (no git submodules in the tarballs: glibc
# instead of the bundled musl, Debian's libbsd and makeself) and the ones Enroot runs with
# (its Debian package's Depends; squashfs-tools comes with --apptainer's packages already).
# 26.05 takes spank.h from sid's libslurm-dev; 26.11's source build installed its own headers
# (/usr/include/slurm), which that package would overwrite with 26.05's (pyxis_build_deps).
PYXIS_BUILD_DEPS=(gcc make libc6-dev libbsd-dev makeself)
PYXIS_RUN_DEPS=(jq parallel zstd bsdextrautils curl gawk pigz libcap2-bin squashfs-tools file)
PYXIS_BUILD_DIR=/usr/local/src/pyxis-build # inside the chroot; removed after the build
PYXIS_PLUGSTACK=/etc/slurm/plugstack.conf.d/pyxis.conf
PYXIS_PLUGIN=/usr/lib/x86_64-linux-gnu/slurm/spank_pyxis.so

pyxis_check_release() {
	# Pyxis is built against the chroot's spank.h: sid's libslurm-dev is 26.05's; 26.11's comes
	# from its source build. 24.11 (trixie) is left out: nothing here needs Pyxis there.
	[[ "$RELEASE" == 26.05 || "$RELEASE" == 26.11 ]] ||
		die "--pyxis needs --release 26.05 or 26.11 (Pyxis is built against that Slurm's spank.h)"
}

pyxis_build_deps() {
	printf '%s\n' "${PYXIS_BUILD_DEPS[@]}"
	[[ "$RELEASE" == 26.11 ]] || echo libslurm-dev
}

# The vendored tarballs: $PYXIS_VENDOR/{enroot,pyxis}-*.tar.gz (newest version of each).
pyxis_sources() {
	PYXIS_ENROOT_TGZ="" PYXIS_PYXIS_TGZ=""
	[[ -d "$PYXIS_VENDOR" ]] || return 0
	PYXIS_ENROOT_TGZ="$(find "$PYXIS_VENDOR" -maxdepth 1 -name 'enroot-*.tar.gz' | sort -V | tail -n 1)"
	PYXIS_PYXIS_TGZ="$(find "$PYXIS_VENDOR" -maxdepth 1 -name 'pyxis-*.tar.gz' | sort -V | tail -n 1)"
}

# What the build is cached by: both tarballs' sha256, the Slurm it is built against (the release;
# for 26.11 the source build's key too: the snapshot and its configure options) and this
# function's and the build's text.
pyxis_build_hash() {
	{
		sha256sum "$PYXIS_ENROOT_TGZ" "$PYXIS_PYXIS_TGZ" | cut -d' ' -f1
		echo "$RELEASE"
		[[ "$RELEASE" != 26.11 ]] || cut -d' ' -f1 "$CACHE/$SOURCE_STAMP_NAME"
		pyxis_build_deps
		declare -f pyxis_build_in_chroot
	} | sha256sum | cut -c1-16
}

# Runs inside the chroot (bash -c): builds both into DESTDIR $1 from the unpacked trees.
pyxis_build_in_chroot() {
	set -euo pipefail
	local dest="$1" dir="$2"
	cd "$dir"/enroot-*/
	# The Makefile's `deps` target builds the missing submodules (musl, libbsd, makeself):
	# `-o deps` skips it; FORCE_GLIBC builds the helpers against glibc, linked with Debian's
	# libbsd; makeself is Debian's.
	mkdir -p deps/dist/makeself/bin
	ln -sf /usr/bin/makeself deps/dist/makeself/bin/enroot-makeself
	make -o deps FORCE_GLIBC=y LDLIBS=-lbsd prefix=/usr sysconfdir=/etc -j"$(nproc)"
	make -o deps FORCE_GLIBC=y LDLIBS=-lbsd prefix=/usr sysconfdir=/etc DESTDIR="$dest" install
	cd "$dir"/pyxis-*/
	make prefix=/usr libdir=/usr/lib/x86_64-linux-gnu -j"$(nproc)"
	make prefix=/usr libdir=/usr/lib/x86_64-linux-gnu DESTDIR="$dest" install
}

install_pyxis_packages() {
	[[ -f "$CACHE/.stage-pyxis-deps" ]] && return 0
	local t0=$SECONDS
	mount_proc
	log "installing Enroot's and Pyxis' build and run dependencies in the chroot"
	in_root env DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Check-Valid-Until=false update -qq \
		>"$LOGS/apt-pyxis.out" 2>&1 ||
		die "apt-get update in the chroot failed (log: $LOGS/apt-pyxis.out)"
	local deps
	mapfile -t deps < <(pyxis_build_deps)
	in_root env DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Check-Valid-Until=false install -y -qq \
		--no-install-recommends "${deps[@]}" "${PYXIS_RUN_DEPS[@]}" >>"$LOGS/apt-pyxis.out" 2>&1 ||
		{
			tail -n 20 "$LOGS/apt-pyxis.out" >&2
			die "installing Enroot's dependencies in the chroot failed (log: $LOGS/apt-pyxis.out)"
		}
	in_root apt-get clean
	touch "$CACHE/.stage-pyxis-deps"
	log "Enroot/Pyxis dependencies installed in $((SECONDS - t0))s"
}

# $CACHE/pyxis/<hash>.tar: the installed files of both; built once per hash, unpacked into the
# chroot when its stamp (.stage-pyxis) names another hash.
install_pyxis() {
	local dir="$CACHE/pyxis" want="" have=""
	pyxis_sources
	if [[ -n "$PYXIS_ENROOT_TGZ" && -n "$PYXIS_PYXIS_TGZ" ]]; then
		want="$(pyxis_build_hash)"
	else
		# No sources: a cached build stands (the newest one), else say what to pass.
		[[ -d "$dir" ]] && want="$(find "$dir" -maxdepth 1 -name '*.tar' -printf '%T@ %f\n' | sort -n | tail -n 1 | cut -d' ' -f2)"
		want="${want%.tar}"
		[[ -n "$want" ]] ||
			die "--pyxis builds Enroot and Pyxis from their source tarballs: no enroot-*.tar.gz and pyxis-*.tar.gz in '$PYXIS_VENDOR'; pass --pyxis-vendor DIR (this project's ../shared/vendor)"
		log "no Enroot/Pyxis sources in '$PYXIS_VENDOR': using the cached build $want"
	fi
	[[ -f "$CACHE/.stage-pyxis" ]] && have="$(cat "$CACHE/.stage-pyxis")"
	if [[ "$have" == "$want" && -x "$ROOT/usr/bin/enroot" && -f "$ROOT$PYXIS_PLUGIN" ]]; then
		return 0
	fi
	install_pyxis_packages
	mkdir -p "$dir"
	if [[ ! -f "$dir/$want.tar" ]]; then
		local t0=$SECONDS
		log "building $(basename "$PYXIS_ENROOT_TGZ" .tar.gz) and $(basename "$PYXIS_PYXIS_TGZ" .tar.gz) in the chroot (build $want)"
		rm -rf "$ROOT$PYXIS_BUILD_DIR"
		mkdir -p "$ROOT$PYXIS_BUILD_DIR/src"
		tar -xzf "$PYXIS_ENROOT_TGZ" -C "$ROOT$PYXIS_BUILD_DIR/src"
		tar -xzf "$PYXIS_PYXIS_TGZ" -C "$ROOT$PYXIS_BUILD_DIR/src"
		in_root /bin/bash -c "$(declare -f pyxis_build_in_chroot); pyxis_build_in_chroot \"\$@\"" build \
			"$PYXIS_BUILD_DIR/dest" "$PYXIS_BUILD_DIR/src" >"$LOGS/pyxis-build.out" 2>&1 || {
			tail -n 30 "$LOGS/pyxis-build.out" >&2
			die "building Enroot/Pyxis failed (log: $LOGS/pyxis-build.out; tree kept in $ROOT$PYXIS_BUILD_DIR)"
		}
		tar -cf "$dir/.$want.partial" -C "$ROOT$PYXIS_BUILD_DIR/dest" .
		mv -f "$dir/.$want.partial" "$dir/$want.tar"
		rm -rf "$ROOT$PYXIS_BUILD_DIR"
		log "Enroot and Pyxis built in $((SECONDS - t0))s"
	fi
	tar -xf "$dir/$want.tar" -C "$ROOT" --no-same-owner
	echo "$want" >"$CACHE/.stage-pyxis"
	log "Enroot and Pyxis installed (build $want)"
}

# Enroot's per-user paths: a REST job has no XDG_RUNTIME_DIR, so they go under /tmp, one tree per
# node (hostname = node name, lib/nodes.sh): on a site /tmp is node-local, here every node shares
# the chroot's, and with one tree both nodes of a gang would make the same container
# (`pyxis_<job>.<step>`) in the same folder. Enroot evaluates these values with the shell.
write_pyxis_config() {
	mkdir -p "$ROOT/etc/enroot/enroot.conf.d"
	cat >"$ROOT/etc/enroot/enroot.conf.d/dev-cluster.conf" <<'EOF'
# Written by dev-cluster --pyxis on every `up`.
ENROOT_RUNTIME_PATH /tmp/enroot/$(hostname)/run/user-$(id -u)
ENROOT_CACHE_PATH /tmp/enroot/$(hostname)/cache/user-$(id -u)
ENROOT_DATA_PATH /tmp/enroot/$(hostname)/data/user-$(id -u)
EOF
	mkdir -p "$ROOT/etc/slurm/plugstack.conf.d"
	echo "required $PYXIS_PLUGIN" >"$ROOT$PYXIS_PLUGSTACK"
}

# Without --pyxis (and at `down`): no plugstack entry, so slurmd never loads the plugin (26.11's
# chroot is a copy of 26.05's, whose plugin is built for 26.05's Slurm until --pyxis rebuilds it).
disable_pyxis() {
	rm -f "$ROOT$PYXIS_PLUGSTACK"
}

# The recipe of the .sqsh from the .sif's root filesystem ($1: the .sif's squashfs offset).
# Its text is part of the image's cache key.
pyxis_image_recipe() {
	local offset="$1" s="$CACHE/images/sqsh.root"
	rm -rf "$s"
	in_root unsquashfs -q -n -o "$offset" -d "$IMAGES_MOUNT/sqsh.root" "$IMAGES_MOUNT/$IMAGE_NAME" >/dev/null
	# An image from a registry has no device nodes (Enroot mounts /dev; unprivileged, it cannot
	# create them: "could not create character device ... because you're not superuser").
	find "$s/dev" -mindepth 1 -delete
	# = Docker's `ENV VIRTUAL_ENV=/opt/venv`: `enroot import` writes an image's ENV to
	# /etc/environment, which Enroot reads at start (as Apptainer reads .singularity.d/env).
	grep -q '^VIRTUAL_ENV=' "$s/etc/environment" 2>/dev/null || echo 'VIRTUAL_ENV=/opt/venv' >>"$s/etc/environment"
	# A variable the image defines, for tests/real_pyxis.rs: the task's own value must win
	# (Pyxis keeps the image's unless the job names it in --container-env).
	echo 'SC_PROBE=1000' >>"$s/etc/environment"
	# Enroot's own default compression (ENROOT_SQUASH_OPTIONS).
	in_root mksquashfs "$IMAGES_MOUNT/sqsh.root" "$IMAGES_MOUNT/.$PYXIS_IMAGE_NAME.partial" \
		-noappend -comp lzo -noD -quiet -no-progress >/dev/null
	rm -rf "$s"
}

pyxis_image_hash() {
	{
		cat "$CACHE/images/$IMAGE_NAME.recipe"
		declare -f pyxis_image_recipe
	} | sha256sum | cut -c1-16
}

# $CACHE/images/flyte-native.sqsh, remade only when the .sif's recipe or this recipe changes.
build_pyxis_image() {
	local dir="$CACHE/images" want have=""
	want="$(pyxis_image_hash)"
	[[ -f "$dir/$PYXIS_IMAGE_NAME.recipe" ]] && have="$(cat "$dir/$PYXIS_IMAGE_NAME.recipe")"
	if [[ -f "$dir/$PYXIS_IMAGE_NAME" && "$have" == "$want" ]]; then
		return 0
	fi
	copy_image_from_base "$PYXIS_IMAGE_NAME" "$want" && return 0
	local t0=$SECONDS offset
	# The .sif's root filesystem partition ("FS (Squashfs/*System/amd64)", start-end in bytes).
	offset="$(in_root apptainer sif list "$IMAGES_MOUNT/$IMAGE_NAME" | awk -F'|' '/FS \(Squashfs/ { split($4, a, "-"); gsub(/ /, "", a[1]); print a[1]; exit }')"
	[[ "$offset" =~ ^[0-9]+$ ]] || die "could not find the squashfs partition of $IMAGE_NAME (apptainer sif list)"
	log "making the Enroot image $PYXIS_IMAGE_NAME from $IMAGE_NAME's root filesystem (recipe $want)"
	pyxis_image_recipe "$offset" || die "making $PYXIS_IMAGE_NAME failed"
	mv -f "$dir/.$PYXIS_IMAGE_NAME.partial" "$dir/$PYXIS_IMAGE_NAME"
	echo "$want" >"$dir/$PYXIS_IMAGE_NAME.recipe"
	log "Enroot image made in $((SECONDS - t0))s: $IMAGES_MOUNT/$PYXIS_IMAGE_NAME in the chroot"
}

prepare_pyxis() {
	pyxis_check_release
	# The .sqsh is made from the .sif (same files for both runtimes): apptainer's packages and
	# image come first, whether or not --apptainer is given.
	install_apptainer
	build_task_image
	mount_images
	install_pyxis
	write_pyxis_config
	build_pyxis_image
}
