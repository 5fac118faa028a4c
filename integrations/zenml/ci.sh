#!/usr/bin/env bash
# The ZenML integration's tests, as .ci/run runs them (see docs/zenml.md#tests).
#
#   integrations/zenml/ci.sh venv          the client's venv (cached by content hash), its path printed
#   integrations/zenml/ci.sh e2e           ruff, unit tests, end to end on the embedded connector
#   integrations/zenml/ci.sh real          the real tier (inside `dev-cluster run`, after `dev-cluster zenml`)
#
# The venv: Python 3.11 (the host's, as the dev cluster's chroot gets it) with the pins below,
# built once per hash of (pins, Python version, this file) under $ZENML_CI_CACHE, then this
# package installed into it from the checkout (`pip install --no-deps`: what users run).
# The tests need the connector binary: SLURM_CONNECTOR_BIN, else target/debug/slurm-connector.
# A tier's test that would skip for a missing environment fails instead (ZENML_SLURM_REQUIRE),
# and pytest's exit status is this script's: 5 (no test collected) fails too.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
pins=("zenml[local]==0.98.0" "flyteidl2==2.0.53" "grpcio==1.85.3" "pytest==8.4.2" "ruff==0.17.6")
cache="${ZENML_CI_CACHE:-/var/cache/slurm-connector-zenml}"

venv() {
	local hash dir
	hash="$({ printf '%s\n' "${pins[@]}"; python3 -VV; sed -n '/^venv()/,/^}/p' "$0"; } | sha256sum | cut -c1-16)"
	dir="$cache/venv-$hash"
	if [[ ! -x "$dir/bin/python" || ! -f "$dir/.ready" ]]; then
		rm -rf "$dir"
		mkdir -p "$cache"
		python3 -m venv "$dir" >&2
		"$dir/bin/pip" install --quiet --disable-pip-version-check "${pins[@]}" >&2
		touch "$dir/.ready"
	fi
	"$dir/bin/pip" install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
		--force-reinstall "$here" >&2
	printf '%s\n' "$dir"
}

run_pytest() {
	local py="$1"
	shift
	cd "$here"
	local status=0
	"$py" -m pytest -p no:cacheprovider "$@" || status=$?
	if ((status == 5)); then echo "pytest collected no test: failing" >&2; fi
	return "$status"
}

case "${1:-}" in
venv) venv ;;
e2e)
	dir="$(venv)"
	(cd "$here" && "$dir/bin/ruff" check src tests && "$dir/bin/ruff" format --check src tests)
	ZENML_SLURM_REQUIRE=e2e run_pytest "$dir/bin/python" -q tests/test_task.py tests/test_components.py \
		tests/test_e2e_embedded.py --durations=5
	;;
real)
	dir="$(venv)"
	ZENML_SLURM_REQUIRE=real run_pytest "$dir/bin/python" -q tests/test_real.py --durations=5
	;;
*)
	echo "usage: $0 venv | e2e | real" >&2
	exit 2
	;;
esac
