#!/usr/bin/env bash
# Mint a slurmrestd token with `scontrol token` and put it into the Kubernetes Secret that
# slurm-connector reads in auth.mode=tokenFile. Run it on a Slurm login/admin host that has both
# scontrol (as root or SlurmUser: minting for another user needs that) and kubectl (a kubeconfig
# allowed to get/create/patch that one Secret), from the systemd timer next to it.
#
# The token never appears in a process's arguments (visible to every user in `ps` and
# /proc/*/cmdline): it goes from scontrol's stdout into a shell variable, and from there through
# a pipe to kubectl (--from-file=KEY=/dev/stdin), then as a manifest on kubectl apply's stdin.
#
# Settings (environment; the systemd unit reads them from /etc/slurm-token-renewer.env):
#   SLURM_USER       the Slurm user the token is for: the chart's cluster.username (required)
#   SECRET_NAME      the Secret: the chart's auth.existingSecret (required)
#   NAMESPACE        the Secret's namespace (default flyte)
#   SECRET_KEY       the key inside the Secret: the chart's auth.secretKey (default token)
#   LIFESPAN         the token's lifetime in seconds (default 7200); renew well inside it
#   SCONTROL, KUBECTL  the commands (default: scontrol and kubectl on PATH)
#   KUBECONFIG       as kubectl reads it
set -euo pipefail

: "${SLURM_USER:?set SLURM_USER to the Slurm user the token is for (the chart value cluster.username)}"
: "${SECRET_NAME:?set SECRET_NAME to the Secret the chart mounts (the chart value auth.existingSecret)}"
NAMESPACE=${NAMESPACE:-flyte}
SECRET_KEY=${SECRET_KEY:-token}
LIFESPAN=${LIFESPAN:-7200}
SCONTROL=${SCONTROL:-scontrol}
KUBECTL=${KUBECTL:-kubectl}

if [[ ! $LIFESPAN =~ ^[0-9]+$ ]] || ((LIFESPAN < 600)); then
  echo "LIFESPAN=$LIFESPAN: want whole seconds, at least 600 (the timer renews every 30 minutes)" >&2
  exit 2
fi

# `scontrol token` prints `SLURM_JWT=<token>`. Captured, not echoed: nothing here logs it.
out=$("$SCONTROL" token "username=$SLURM_USER" "lifespan=$LIFESPAN")
token=${out#SLURM_JWT=}
token=${token%%[[:space:]]*}
if [[ ! $token =~ ^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$ ]]; then
  echo "scontrol token username=$SLURM_USER printed no JWT (is AuthAltTypes=auth/jwt set, and is this root or SlurmUser?)" >&2
  exit 1
fi

# printf is a shell builtin: the token is written to the pipe, not passed to a new process.
# Server-side apply replaces just this key and, unlike client-side apply, stores no copy of the
# Secret's data in a last-applied-configuration annotation; --force-conflicts takes the key over
# from whoever created the Secret (e.g. `kubectl create secret`).
printf '%s' "$token" |
  "$KUBECTL" -n "$NAMESPACE" create secret generic "$SECRET_NAME" \
    "--from-file=$SECRET_KEY=/dev/stdin" --dry-run=client -o yaml |
  "$KUBECTL" -n "$NAMESPACE" apply --server-side --force-conflicts \
    --field-manager=slurm-token-renewer -f - >/dev/null
unset token out

echo "renewed $NAMESPACE/$SECRET_NAME key $SECRET_KEY: a token for $SLURM_USER valid ${LIFESPAN}s"
