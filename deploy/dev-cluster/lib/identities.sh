# shellcheck shell=bash
# Identities for the connector's per-user submission (issue 15), made at every `up` (idempotent,
# nothing in the cached chroot recipe changes):
#   - users alice, bob and carol, each with a group of their own, all also in the shared group
#     `flytejobs` (with $JOB_USER): the staging reader's group;
#   - /shared/<user>: owned by the user, group flytejobs, mode 2770 (setgid: what a job writes there
#     belongs to flytejobs; Slurm's default umask 022 keeps it group-readable);
#   - with accounting: accounts physics and chem; alice in physics, bob in chem, carol in physics
#     and chem (default physics). $JOB_USER stays in `dev`.
# Sourced by dev-cluster; uses in_root, ROOT, SHARED_DIR, JOB_USER, CLUSTER_NAME.

IDENTITY_GROUP=flytejobs
IDENTITY_GID=2100
# user:uid:default account:other accounts (comma separated)
IDENTITY_USERS=(alice:2001:physics: bob:2002:chem: carol:2003:physics:chem)
IDENTITY_ACCOUNTS=(physics chem)

# Users, groups and their directories in the chroot (before the daemons start: slurmd resolves
# them when a job starts).
ensure_identity_users() {
	in_root getent group "$IDENTITY_GROUP" >/dev/null ||
		in_root groupadd --gid "$IDENTITY_GID" "$IDENTITY_GROUP"
	in_root usermod -a -G "$IDENTITY_GROUP" "$JOB_USER"
	local spec user uid
	for spec in "${IDENTITY_USERS[@]}"; do
		IFS=: read -r user uid _ _ <<<"$spec"
		in_root getent passwd "$user" >/dev/null ||
			in_root useradd --uid "$uid" --user-group --create-home --shell /bin/bash \
				--groups "$IDENTITY_GROUP" "$user"
		in_root install -d -m 2770 -o "$user" -g "$IDENTITY_GROUP" "$SHARED_DIR/$user"
	done
}

# Accounts and associations in slurmdbd (once it answers).
ensure_identity_accounts() {
	local a spec user default others
	for a in "${IDENTITY_ACCOUNTS[@]}"; do
		if [[ -z "$(in_root sacctmgr -n -P show account "$a" format=account)" ]]; then
			in_root sacctmgr -i add account "$a" cluster="$CLUSTER_NAME" description="dev-cluster $a" organization=dev >/dev/null
		fi
	done
	for spec in "${IDENTITY_USERS[@]}"; do
		IFS=: read -r user _ default others <<<"$spec"
		for a in "$default" ${others//,/ }; do
			if [[ -z "$(in_root sacctmgr -n -P show assoc user="$user" account="$a" format=user)" ]]; then
				in_root sacctmgr -i add user "$user" account="$a" defaultaccount="$default" cluster="$CLUSTER_NAME" >/dev/null
			fi
		done
	done
}
