# shellcheck shell=bash
# Part of deploy/dev-cluster/dev-cluster (sourced by it; uses its variables and helpers).

# ---------------------------------------------------------------------------------------------
# Building the chroot (once per release; stamps make it resumable)

host_mirror() {
	if [[ -n "${DEV_CLUSTER_MIRROR:-}" ]]; then
		printf '%s\n' "$DEV_CLUSTER_MIRROR"
		return
	fi
	# The host's own Debian mirror: the first archive URI (not the security archive) in its apt
	# sources, deb822 (*.sources) first, then one-line (*.list) format.
	local uri
	uri="$(
		{
			cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk 'tolower($1) == "uris:" { for (i = 2; i <= NF; i++) print $i }'
			cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
				awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i !~ /\]$/) { print $i; break } }'
		} | grep -v -i security | grep -E '^(https?|file)://' | grep -E '/debian/?$' | head -n 1
	)" || true
	[[ -n "$uri" ]] || die "could not find a Debian mirror in /etc/apt/sources.list{,.d}; set DEV_CLUSTER_MIRROR=<URL of a Debian archive>"
	printf '%s\n' "${uri%/}"
}

# debootstrap builds the chroot; curl checks that slurmrestd answers.
ensure_host_tools() {
	[[ "$(id -u)" == 0 ]] || die "must run as root (chroot, mount, debootstrap)"
	local missing=() tool
	for tool in debootstrap curl; do
		command -v "$tool" >/dev/null || missing+=("$tool")
	done
	if ((${#missing[@]} > 0)); then
		command -v apt-get >/dev/null || die "install ${missing[*]} on the host (no apt-get here)"
		log "installing ${missing[*]} on the host"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
	fi
}

build_chroot() {
	mkdir -p "$CACHE" "$RUN" "$LOGS"
	# 26.11: a copy of 26.05's finished chroot stands for debootstrap + packages when there is one.
	[[ -n "$BASE_RELEASE" && ! -f "$CACHE/.stage-debootstrap" ]] && copy_base_chroot
	if [[ ! -f "$CACHE/.stage-debootstrap" ]]; then
		local mirror tmp="$CACHE/root.partial"
		mirror="$(host_mirror)"
		if [[ -e "$tmp" ]]; then
			# debootstrap mounts /proc and /sys inside its target; never delete through a mount.
			mounts_below "$tmp" && die "$tmp has mounts below it (an interrupted debootstrap?); unmount them and retry"
			rm -rf "$tmp"
		fi
		[[ -e "$ROOT" ]] && die "$ROOT exists but was not finished; remove it (after checking nothing is mounted below it) and retry"
		log "debootstrap $SUITE (first bring-up: this takes minutes)"
		debootstrap --variant=minbase "$SUITE" "$tmp" "$mirror" >"$LOGS/debootstrap.out" 2>&1 ||
			{
				tail -n 20 "$LOGS/debootstrap.out" >&2
				die "debootstrap failed (full log: $LOGS/debootstrap.out)"
			}
		mv "$tmp" "$ROOT"
		touch "$CACHE/.stage-debootstrap"
	fi
	if [[ ! -f "$CACHE/.stage-packages" ]]; then
		# No service may start during apt: the daemons are started by this script, in the foreground.
		printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
		chmod 0755 "$ROOT/usr/sbin/policy-rc.d"
		cp /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true
		# Mirrors that serve a snapshot of the archive (CI caches, pinned mirrors) carry Release files
		# past their Valid-Until date (sid's is a week); signatures are still checked.
		printf 'Acquire::Check-Valid-Until "false";\n' >"$ROOT/etc/apt/apt.conf.d/99dev-cluster"
		mount_proc
		log "installing Slurm, MariaDB and environment-modules in the chroot"
		in_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$LOGS/apt.out" 2>&1 ||
			die "apt-get update in the chroot failed (log: $LOGS/apt.out)"
		in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			slurmctld slurmd slurmrestd slurm-client slurm-wlm-basic-plugins slurm-wlm-jwt-plugin \
			slurmdbd slurm-wlm-mysql-plugin mariadb-server mariadb-client \
			environment-modules procps >>"$LOGS/apt.out" 2>&1 ||
			{
				tail -n 20 "$LOGS/apt.out" >&2
				die "apt-get install in the chroot failed (log: $LOGS/apt.out)"
			}
		in_root apt-get clean
		touch "$CACHE/.stage-packages"
	fi
	if [[ ! -f "$CACHE/.stage-setup" ]]; then
		setup_chroot
		touch "$CACHE/.stage-setup"
	fi
	# 26.11: Slurm from the source snapshot, over the packaged one (once per tarball sha256).
	[[ "$RELEASE" == 26.11 ]] && ensure_source_build
	return 0
}

# Users, keys, directories and the sample module: made once.
setup_chroot() {
	log "creating users, keys and directories"
	in_root getent passwd slurm >/dev/null || in_root useradd --system --user-group --no-create-home slurm
	in_root getent passwd "$JOB_USER" >/dev/null ||
		in_root useradd --uid "$JOB_UID" --user-group --create-home --shell /bin/bash "$JOB_USER"
	# slurmrestd refuses to run as root or as SlurmUser: it gets its own unprivileged user.
	in_root getent passwd "$REST_USER" >/dev/null ||
		in_root useradd --system --user-group --no-create-home --shell /usr/sbin/nologin "$REST_USER"

	install -d -m 0755 "$ROOT/etc/slurm"
	if [[ ! -s "$ROOT/etc/slurm/slurm.key" ]]; then
		head -c 1024 /dev/urandom >"$ROOT/etc/slurm/slurm.key"
	fi
	if [[ ! -s "$ROOT/etc/slurm/jwt_hs256.key" ]]; then
		head -c 32 /dev/urandom >"$ROOT/etc/slurm/jwt_hs256.key"
	fi
	if [[ ! -s "$ROOT/etc/slurm/dbpass" ]]; then
		head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$ROOT/etc/slurm/dbpass"
	fi
	in_root chown slurm:slurm /etc/slurm/slurm.key /etc/slurm/jwt_hs256.key /etc/slurm/dbpass
	chmod 0600 "$ROOT/etc/slurm/slurm.key" "$ROOT/etc/slurm/jwt_hs256.key" "$ROOT/etc/slurm/dbpass"

	# The cluster's "shared filesystem": jobs' working directory, seen from the host at $ROOT/shared.
	install -d -m 0755 "$ROOT$SHARED_DIR"
	in_root install -d -m 0755 -o "$JOB_USER" -g "$JOB_USER" "$SHARED_DIR/$JOB_USER"

	# A sample environment module, on the default MODULEPATH of environment-modules.
	install -d -m 0755 "$ROOT/usr/share/modules/modulefiles/hello"
	cat >"$ROOT/usr/share/modules/modulefiles/hello/1.0" <<'EOF'
#%Module1.0
## Sample module of the dev cluster: proves `module load` works inside a job.
module-whatis "hello 1.0: sets HELLO_MODULE=loaded and HELLO_VERSION=1.0"
setenv HELLO_MODULE loaded
setenv HELLO_VERSION 1.0
EOF
	chmod 0644 "$ROOT/usr/share/modules/modulefiles/hello/1.0"

	# MariaDB's data directory: the package normally initialises it; make sure.
	if [[ ! -d "$ROOT/var/lib/mysql/mysql" ]]; then
		in_root mariadb-install-db --user=mysql --datadir=/var/lib/mysql >>"$LOGS/mariadb.out" 2>&1
	fi
}
