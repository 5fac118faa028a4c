# shellcheck shell=bash
# Part of deploy/dev-cluster/dev-cluster (sourced by it; uses its variables and helpers).
#
# --release 26.11: no distribution packages Slurm 26.11 yet, so it is built from a source snapshot
# (--slurm-source, e.g. slurm-26.11.0-0rc1-284c3b95.tar.gz) inside a copy of the 26.05 chroot
# (Debian sid with Slurm 26.05 packaged: users, MariaDB, paths and libraries already there) and
# installed over the packaged Slurm. The build is cached per tarball sha256: `up` rebuilds only
# when the snapshot changes.

# Debian packages the build needs (measured: these and nothing else for 26.11.0-0rc1).
SLURM_BUILD_DEPS=(build-essential pkg-config libjson-c-dev libjwt-dev libhttp-parser-dev libyaml-dev
	libmariadb-dev libmariadb-dev-compat libpam0g-dev liblz4-dev libreadline-dev libmunge-dev
	python3 perl file)
# Plugins go to $libdir/slurm, beside Debian's $libdir/slurm-wlm; the new binaries load their own.
# No debug info (Slurm's default is -ggdb3 -O1), no static archives (libtool compiles every library
# object twice for them; nothing links against them here): measured on 2 cores, configure + make
# 183 s instead of about 330 s.
SLURM_CONFIGURE=(--prefix=/usr --sysconfdir=/etc/slurm --libdir=/usr/lib/x86_64-linux-gnu
	--localstatedir=/var --runstatedir=/run --enable-slurmrestd --with-jwt --with-yaml --without-munge
	--disable-debug --disable-static "CFLAGS=-O1 -g0")
# The packages whose files the source build overwrites: held, so no later apt-get puts them back.
SLURM_PACKAGES=(slurmctld slurmd slurmrestd slurm-client slurmdbd slurm-wlm-basic-plugins
	slurm-wlm-jwt-plugin slurm-wlm-mysql-plugin)
# What the source build in the chroot was made from: "<build key> <slurmctld -V>" (build_key).
SOURCE_STAMP_NAME=slurm-source.installed
SOURCE_BUILD_DIR=/usr/local/src/slurm-build # inside the chroot; removed after `make install`

# The cache key of a build: the tarball's sha256 and the configure options (either changed: rebuild).
build_key() {
	printf '%s %s\n' "$SLURM_SOURCE_SHA" "${SLURM_CONFIGURE[*]}" | sha256sum | cut -d' ' -f1
}

# Sets SLURM_SOURCE_SHA (empty: no tarball given, a cached build stands) or dies saying what to pass.
resolve_slurm_source() {
	SLURM_SOURCE_SHA=""
	local stamp="$CACHE/$SOURCE_STAMP_NAME"
	if [[ -z "$SLURM_SOURCE" ]]; then
		if [[ -s "$stamp" ]]; then
			log "no --slurm-source given: using the cached build ($(cut -d' ' -f2- "$stamp"), build key $(cut -c1-16 "$stamp"))"
			return 0
		fi
		die "--release 26.11 builds Slurm from a source snapshot: pass --slurm-source PATH (or set" \
			"DEV_CLUSTER_SLURM_SOURCE=PATH) to a slurm-26.11.*.tar.gz (this project's CI passes" \
			"../shared/vendor/slurm-26.11.0-0rc1-284c3b95.tar.gz; any SchedMD release or \`git archive\` tarball works)"
	fi
	[[ -f "$SLURM_SOURCE" && -r "$SLURM_SOURCE" ]] ||
		die "--slurm-source '$SLURM_SOURCE': no such readable file (give the path of a slurm-*.tar.gz)"
	SLURM_SOURCE="$(readlink -f "$SLURM_SOURCE")"
	SLURM_SOURCE_SHA="$(sha256sum "$SLURM_SOURCE" | cut -d' ' -f1)"
}

# The 26.05 chroot, copied once as this release's debootstrap + packages stages, with everything
# that belongs to the 26.05 cluster (keys, state, database, jobs' files, logs) left behind.
copy_base_chroot() {
	local base="$CACHE_BASE/$BASE_RELEASE" tmp="$CACHE/root.partial"
	if [[ ! -f "$base/.stage-setup" ]]; then
		log "no finished $BASE_RELEASE chroot in $base: bootstrapping Debian $SUITE for $RELEASE instead"
		return 0
	fi
	if [[ -e "$tmp" ]]; then
		mounts_below "$tmp" && die "$tmp has mounts below it (an interrupted build?); unmount them and retry"
		rm -rf "$tmp"
	fi
	[[ -e "$ROOT" ]] && die "$ROOT exists but was not finished; remove it (after checking nothing is mounted below it) and retry"
	local t0=$SECONDS
	log "copying the $BASE_RELEASE chroot ($base/root) as the base of $RELEASE"
	# --one-file-system: a running 26.05 has /proc (and /images) mounted inside; never copy those.
	# Its live files (MariaDB's, slurmctld's state) are copied half-written and then removed below.
	cp -a --one-file-system "$base/root" "$tmp"
	mkdir -p "$tmp/proc" "$tmp$IMAGES_MOUNT"
	rm -f "$tmp"/etc/slurm/{slurm.key,jwt_hs256.key,dbpass,slurm.conf,slurmdbd.conf,cgroup.conf}
	# slurmctld refuses a state directory holding another cluster's name ("CLUSTER NAME MISMATCH").
	rm -rf "$tmp"/var/lib/slurm/slurmctld "$tmp"/var/lib/slurm/slurmd "$tmp"/var/spool/slurmctld \
		"$tmp"/var/spool/slurmd "$tmp"/var/log/slurm "$tmp"/var/lib/mysql "$tmp$SHARED_DIR"
	rm -rf "${tmp:?}"/run/* "${tmp:?}"/tmp/*
	install -d -m 0755 "$tmp/var/lib/mysql"
	in_root_of "$tmp" chown mysql:mysql /var/lib/mysql
	mv "$tmp" "$ROOT"
	touch "$CACHE/.stage-debootstrap" "$CACHE/.stage-packages"
	log "copied in $((SECONDS - t0))s"
}

in_root_of() { # like in_root, for a chroot not yet at $ROOT
	local r="$1"
	shift
	env -i PATH="$CHROOT_PATH" HOME=/root LANG=C.UTF-8 chroot "$r" "$@"
}

# Build and install the snapshot unless the chroot already runs a build of this very tarball.
ensure_source_build() {
	local stamp="$CACHE/$SOURCE_STAMP_NAME" have_key="" have_version="" now
	if [[ -s "$stamp" ]]; then
		read -r have_key have_version <"$stamp"
	fi
	if [[ -n "$have_key" && (-z "$SLURM_SOURCE_SHA" || "$have_key" == "$(build_key)") ]]; then
		# The binaries must still be the ones built (an apt-get in the chroot could replace them).
		now="$(in_root slurmctld -V 2>&1)" || true
		[[ "$now" == "$have_version" ]] && return 0
		log "the chroot's slurmctld says '$now', not the cached build's '$have_version': rebuilding"
		[[ -n "$SLURM_SOURCE_SHA" ]] ||
			die "and no --slurm-source was given to rebuild from: pass --slurm-source PATH (see --help)"
	elif [[ -n "$have_key" ]]; then
		log "the Slurm source or its configure options changed (build key ${have_key:0:16} -> $(build_key | cut -c1-16)): rebuilding"
	fi
	build_from_source
}

build_from_source() {
	local t0=$SECONDS meta_version src="$ROOT$SOURCE_BUILD_DIR" out
	mount_proc
	if [[ ! -f "$CACHE/.stage-slurm-deps" ]]; then
		log "installing the build dependencies of Slurm in the chroot"
		in_root env DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Check-Valid-Until=false update -qq \
			>"$LOGS/apt-slurm-deps.out" 2>&1 ||
			die "apt-get update in the chroot failed (log: $LOGS/apt-slurm-deps.out)"
		in_root env DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Check-Valid-Until=false install -y -qq \
			--no-install-recommends "${SLURM_BUILD_DEPS[@]}" >>"$LOGS/apt-slurm-deps.out" 2>&1 || {
			tail -n 20 "$LOGS/apt-slurm-deps.out" >&2
			die "installing Slurm's build dependencies in the chroot failed (log: $LOGS/apt-slurm-deps.out)"
		}
		in_root apt-get clean
		touch "$CACHE/.stage-slurm-deps"
		log "build dependencies installed in $((SECONDS - t0))s"
	fi
	rm -rf "$src"
	mkdir -p "$src"
	if ! tar -xzf "$SLURM_SOURCE" -C "$src" --strip-components=1 --no-same-owner; then
		rm -rf "$src"
		die "cannot unpack --slurm-source $SLURM_SOURCE (is it a Slurm source .tar.gz?)"
	fi
	if [[ ! -f "$src/META" || ! -x "$src/configure" ]]; then
		rm -rf "$src"
		die "--slurm-source $SLURM_SOURCE has no META and configure at its top: not a Slurm source tree"
	fi
	meta_version="$(awk '$1 == "Version:" { print $2 }' "$src/META")"
	# From here on the chroot's Slurm is in between: a failed build leaves no stamp, so the next
	# `up` builds again rather than trusting a half-installed tree.
	rm -f "$CACHE/$SOURCE_STAMP_NAME"
	log "building Slurm $meta_version from $(basename "$SLURM_SOURCE") (sha256 ${SLURM_SOURCE_SHA:0:16}; takes minutes; log: $LOGS/slurm-build.out)"
	# shellcheck disable=SC2016 # $1.. expand in the inner shell, inside the chroot
	in_root sh -c 'set -e; cd "$1"; jobs="$2"; shift 2
		./configure "$@"
		make -j"$jobs"
		make install' sh "$SOURCE_BUILD_DIR" "$(nproc)" "${SLURM_CONFIGURE[@]}" >"$LOGS/slurm-build.out" 2>&1 || {
		tail -n 30 "$LOGS/slurm-build.out" >&2
		die "building Slurm from $SLURM_SOURCE failed (full log: $LOGS/slurm-build.out; the tree is kept in $src)"
	}
	in_root ldconfig
	in_root apt-mark hold "${SLURM_PACKAGES[@]}" >/dev/null
	out="$(in_root slurmctld -V 2>&1)" || die "the freshly built slurmctld does not run: $out"
	[[ "$out" == "slurm $meta_version"* ]] ||
		die "after make install the chroot's slurmctld says '$out', expected 'slurm $meta_version...'"
	rm -rf "$src"
	printf '%s %s\n' "$(build_key)" "$out" >"$CACHE/$SOURCE_STAMP_NAME"
	log "$out built and installed in $((SECONDS - t0))s"
}
