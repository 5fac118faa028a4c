# shellcheck shell=bash
# `dev-cluster flyte1`: Flyte 1's Python environment in the chroot, for the connector's Flyte 1
# tasks (`slurm_fn`: pyflyte-execute runs in the cluster's own Python, no container). flytekit and
# flytekitplugins-slurm 1.16.31 from PyPI in a venv at /opt/flyte1 (tests/real_flyte1.rs).
#
# Why the host's Python: flytekit 1.16 needs Python < 3.13, and the chroots' Debian (trixie for
# 24.11, sid for 26.05/26.11) ships only 3.13. The host's 3.11 (the machine's Python, which
# .ci/run uses too) is copied in: its interpreter, its standard library (without site-packages)
# and libpython. Cached like the task image: rebuilt only when the recipe (this file's function,
# the versions, the host Python's version) changes.

FLYTE1_VENV=/opt/flyte1
FLYTE1_PYTHON=/opt/python3.11
FLYTE1_FLYTEKIT_VERSION=1.16.31

# The host's Python 3.11 installation prefix (DEV_CLUSTER_FLYTE1_PYTHON: another one).
flyte1_host_python() {
	if [[ -n "${DEV_CLUSTER_FLYTE1_PYTHON:-}" ]]; then
		printf '%s\n' "$DEV_CLUSTER_FLYTE1_PYTHON"
		return
	fi
	command -v python3.11 >/dev/null || die "flyte1: no python3.11 on the host (flytekit 1.16 needs Python < 3.13); set DEV_CLUSTER_FLYTE1_PYTHON to a Python 3.11 or 3.12 prefix"
	python3.11 -c 'import sys; print(sys.base_prefix)'
}

flyte1_install() {
	local src="$1" dst="$ROOT$FLYTE1_PYTHON"
	[[ -x "$src/bin/python3.11" && -d "$src/lib/python3.11" ]] ||
		die "flyte1: $src has no bin/python3.11 and lib/python3.11"
	rm -rf "$dst" "$ROOT$FLYTE1_VENV"
	mkdir -p "$dst/bin" "$dst/lib"
	cp -a "$src/bin/python3.11" "$dst/bin/"
	tar -C "$src/lib" -cf - --exclude=python3.11/site-packages --exclude=python3.11/test \
		--exclude=python3.11/idlelib --exclude=python3.11/tkinter --exclude='__pycache__' python3.11 |
		tar -C "$dst/lib" -xf -
	mkdir -p "$dst/lib/python3.11/site-packages"
	# The interpreter's RUNPATH names the host's prefix, which the chroot does not have; the loader
	# then searches /usr/local/lib (Debian's ld.so.conf), where libpython goes.
	if compgen -G "$src/lib/libpython3.11.so*" >/dev/null; then
		cp -a "$src"/lib/libpython3.11.so* "$ROOT/usr/local/lib/"
		in_root ldconfig
	fi
	# pip trusts what the host trusts and uses its index settings, as the task image's recipe does.
	cp /etc/ssl/certs/ca-certificates.crt "$ROOT/tmp/flyte1-ca.crt"
	local pip_env=() v
	for v in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST PIP_DEFAULT_TIMEOUT; do
		[[ -n "${!v:-}" ]] && pip_env+=("$v=${!v}")
	done
	# shellcheck disable=SC2016 # $1..$3 expand in the inner shell, inside the chroot
	env -i PATH="$CHROOT_PATH" HOME=/root LANG=C.UTF-8 PIP_CERT=/tmp/flyte1-ca.crt \
		PIP_DISABLE_PIP_VERSION_CHECK=1 "${pip_env[@]}" chroot "$ROOT" /bin/bash -c \
		'"$1/bin/python3.11" -m venv "$2" && "$2/bin/pip" install --no-cache-dir --quiet "flytekit==$3" "flytekitplugins-slurm==$3"' \
		pip "$FLYTE1_PYTHON" "$FLYTE1_VENV" "$FLYTE1_FLYTEKIT_VERSION" >"$LOGS/flyte1-pip.out" 2>&1 || {
		tail -n 20 "$LOGS/flyte1-pip.out" >&2
		rm -f "$ROOT/tmp/flyte1-ca.crt"
		die "flyte1: pip install flytekit==$FLYTE1_FLYTEKIT_VERSION in $FLYTE1_VENV failed (log: $LOGS/flyte1-pip.out)"
	}
	rm -f "$ROOT/tmp/flyte1-ca.crt"
	in_root "$FLYTE1_VENV/bin/pyflyte-execute" --help >/dev/null ||
		die "flyte1: $FLYTE1_VENV/bin/pyflyte-execute does not run in the chroot"
}

flyte1_recipe_hash() {
	{
		printf '%s\n' "$FLYTE1_FLYTEKIT_VERSION" "$FLYTE1_PYTHON" "$FLYTE1_VENV"
		"$1/bin/python3.11" -VV
		declare -f flyte1_install
	} | sha256sum | cut -c1-16
}

cmd_flyte1() {
	[[ "$(id -u)" == 0 ]] || die "must run as root (chroot)"
	[[ -d "$ROOT/etc/slurm" ]] || die "the $RELEASE chroot does not exist yet: run \`$SCRIPT_PATH --release $RELEASE prepare\` (or up) first"
	mkdir -p "$LOGS"
	local src want have="" t0=$SECONDS mounted=0
	src="$(flyte1_host_python)"
	want="$(flyte1_recipe_hash "$src")"
	[[ -f "$ROOT$FLYTE1_VENV/.recipe" ]] && have="$(cat "$ROOT$FLYTE1_VENV/.recipe")"
	if [[ "$have" == "$want" ]]; then
		log "flyte1: $FLYTE1_VENV is ready (recipe $want)"
		return 0
	fi
	log "flyte1: installing flytekit $FLYTE1_FLYTEKIT_VERSION on Python 3.11 (copied from $src) in $FLYTE1_VENV (recipe $want)"
	if ! is_mounted "$ROOT/proc"; then
		mount -t proc proc "$ROOT/proc"
		mounted=1
	fi
	flyte1_install "$src"
	((mounted)) && { umount "$ROOT/proc" || umount -l "$ROOT/proc"; }
	echo "$want" >"$ROOT$FLYTE1_VENV/.recipe"
	log "flyte1: ready in $((SECONDS - t0))s"
}
