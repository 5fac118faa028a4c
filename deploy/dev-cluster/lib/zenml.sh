# shellcheck shell=bash
# `dev-cluster zenml`: a Python with ZenML in the chroot, for ZenML steps that run in the cluster's
# own Python environment (the zenml-slurm-connector flavors' `python` setting; the real tier in
# integrations/zenml/tests/test_real.py). zenml, and the gRPC stubs the flavors import, from PyPI
# in a venv at /opt/zenml.
#
# Why the host's Python (as lib/flyte1.sh, whose reasons apply): the steps' artifacts are written
# by the client's Python on the host and read in the job, so both run the same interpreter
# version; the chroots' Debian ships another. It goes to a prefix of its own, /opt/zenml-python3.11,
# so `flyte1` (which replaces /opt/python3.11 whole) never pulls it from under this venv. Cached:
# rebuilt only when the recipe (this file's function, the versions, the host Python's version)
# changes; ~1-2 min once per machine (pip), 0.1 s after.

ZENML_VENV=/opt/zenml
ZENML_PYTHON=/opt/zenml-python3.11
ZENML_PIP_PINS="zenml[local]==0.98.0 flyteidl2==2.0.53 grpcio==1.85.3"

zenml_install() {
	local src="$1" dst="$ROOT$ZENML_PYTHON"
	[[ -x "$src/bin/python3.11" && -d "$src/lib/python3.11" ]] ||
		die "zenml: $src has no bin/python3.11 and lib/python3.11"
	rm -rf "$dst" "$ROOT$ZENML_VENV"
	mkdir -p "$dst/bin" "$dst/lib"
	cp -a "$src/bin/python3.11" "$dst/bin/"
	tar -C "$src/lib" -cf - --exclude=python3.11/site-packages --exclude=python3.11/test \
		--exclude=python3.11/idlelib --exclude=python3.11/tkinter --exclude='__pycache__' python3.11 |
		tar -C "$dst/lib" -xf -
	mkdir -p "$dst/lib/python3.11/site-packages"
	# The interpreter's RUNPATH names the host's prefix; the loader then searches /usr/local/lib.
	if compgen -G "$src/lib/libpython3.11.so*" >/dev/null; then
		cp -a "$src"/lib/libpython3.11.so* "$ROOT/usr/local/lib/"
		in_root ldconfig
	fi
	cp /etc/ssl/certs/ca-certificates.crt "$ROOT/tmp/zenml-ca.crt"
	local pip_env=() v
	for v in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST PIP_DEFAULT_TIMEOUT; do
		[[ -n "${!v:-}" ]] && pip_env+=("$v=${!v}")
	done
	# shellcheck disable=SC2016,SC2086 # $1..$3 expand in the inner shell; the pins split on purpose
	env -i PATH="$CHROOT_PATH" HOME=/root LANG=C.UTF-8 PIP_CERT=/tmp/zenml-ca.crt \
		PIP_DISABLE_PIP_VERSION_CHECK=1 "${pip_env[@]}" chroot "$ROOT" /bin/bash -c \
		'"$1/bin/python3.11" -m venv "$2" && "$2/bin/pip" install --no-cache-dir --quiet $3' \
		pip "$ZENML_PYTHON" "$ZENML_VENV" "$ZENML_PIP_PINS" >"$LOGS/zenml-pip.out" 2>&1 || {
		tail -n 20 "$LOGS/zenml-pip.out" >&2
		rm -f "$ROOT/tmp/zenml-ca.crt"
		die "zenml: pip install $ZENML_PIP_PINS in $ZENML_VENV failed (log: $LOGS/zenml-pip.out)"
	}
	rm -f "$ROOT/tmp/zenml-ca.crt"
	in_root "$ZENML_VENV/bin/python" -c 'import zenml, grpc, flyteidl2.connector.service_pb2_grpc' ||
		die "zenml: $ZENML_VENV/bin/python cannot import zenml in the chroot"
}

zenml_recipe_hash() {
	{
		printf '%s\n' "$ZENML_PIP_PINS" "$ZENML_PYTHON" "$ZENML_VENV"
		"$1/bin/python3.11" -VV
		declare -f zenml_install
	} | sha256sum | cut -c1-16
}

cmd_zenml() {
	[[ "$(id -u)" == 0 ]] || die "must run as root (chroot)"
	[[ -d "$ROOT/etc/slurm" ]] || die "the $RELEASE chroot does not exist yet: run \`$SCRIPT_PATH --release $RELEASE prepare\` (or up) first"
	mkdir -p "$LOGS"
	local src want have="" t0=$SECONDS mounted=0
	src="$(flyte1_host_python)"
	want="$(zenml_recipe_hash "$src")"
	[[ -f "$ROOT$ZENML_VENV/.recipe" ]] && have="$(cat "$ROOT$ZENML_VENV/.recipe")"
	if [[ "$have" == "$want" ]]; then
		log "zenml: $ZENML_VENV is ready (recipe $want)"
		return 0
	fi
	log "zenml: installing $ZENML_PIP_PINS on Python 3.11 (copied from $src) in $ZENML_VENV (recipe $want)"
	if ! is_mounted "$ROOT/proc"; then
		mount -t proc proc "$ROOT/proc"
		mounted=1
	fi
	zenml_install "$src"
	((mounted)) && { umount "$ROOT/proc" || umount -l "$ROOT/proc"; }
	echo "$want" >"$ROOT$ZENML_VENV/.recipe"
	log "zenml: ready in $((SECONDS - t0))s"
}
