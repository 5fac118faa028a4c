# shellcheck shell=bash
# Part of deploy/dev-cluster/dev-cluster (sourced by it; uses its variables and helpers).

# ---------------------------------------------------------------------------------------------
# Configuration (rewritten on every `up`, so options take effect)

write_config() {
	local host
	host="$(hostname -s)"
	# --failure-modes: memory becomes a consumable (16 GB declared; config_overrides accepts it).
	local select_params=CR_CPU node_memory=""
	if [[ "$FAILURE_MODES" == 1 ]]; then
		select_params=CR_CPU_Memory node_memory="RealMemory=16000 "
	fi
	# The chroot shares the host's network and hostname: make the name resolve inside as well.
	cp /etc/hosts "$ROOT/etc/hosts"
	cp /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true

	for d in /var/lib/slurm/slurmctld /var/log/slurm /run/slurmctld /run/slurmdbd; do
		in_root install -d -m 0755 -o slurm -g slurm "$d"
	done
	# 26.05 slurmd insists that /run/slurm is root-owned.
	in_root install -d -m 0755 -o root -g root /run/slurm /var/lib/slurm/slurmd
	((NODES > 1)) && nodes_hosts

	{
		cat <<EOF
# Written by deploy/dev-cluster/dev-cluster on every \`up\`; edits are lost.
ClusterName=$CLUSTER_NAME
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=slurm
AuthType=auth/slurm
CredType=cred/slurm
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=/etc/slurm/jwt_hs256.key
# No systemd and no cgroups in the chroot.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# Per-task usage (CPU time, peak RSS) read from /proc: the figures GetTaskMetrics reports.
JobAcctGatherType=jobacct_gather/linux
# Sampled every second (the default 30 s never samples the dev cluster's short jobs: no peak RSS).
JobAcctGatherFrequency=task=1
SelectType=select/cons_tres
SelectTypeParameters=$select_params
# Lets the node declare more CPUs than the host has.
SlurmdParameters=config_overrides
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmctldPidFile=/run/slurmctld/slurmctld.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
MinJobAge=$MIN_JOB_AGE
MaxJobCount=$MAX_JOB_COUNT
ReturnToService=2
MpiDefault=none
$(if ((NODES > 1)); then nodes_conf "$node_memory"; else
			printf '%s\n' SlurmdSpoolDir=/var/lib/slurm/slurmd SlurmdPidFile=/run/slurm/slurmd.pid \
				SlurmdLogFile=/var/log/slurm/slurmd.log "NodeName=node1 NodeAddr=127.0.0.1 CPUs=8 ${node_memory}State=UNKNOWN"
		fi)
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
		if [[ "$FAILURE_MODES" == 1 ]]; then
			# Memory is enforced only when it is a consumable resource: the job's --mem (or
			# DefMemPerCPU) becomes its limit, and jobacct_gather (sampling every second) kills a
			# job above it: OUT_OF_MEMORY, without cgroups. Preemption: a job in `urgent`
			# requeues the `preemptible` jobs whose CPUs it needs (then they are PENDING again);
			# `preemptible-grace` asks for a 20 s grace time with the job's --signal first
			# (send_user_signal); 24.11 was seen to kill REQUEUE jobs at once all the same
			# (interruptible tasks, tests/real_failures.rs). A requeued job is eligible again after
			# AuthInfo's cred_expire (slurm.conf(5): 120 s by default, at least 5; auth/slurm reads
			# only its own keys there): 30 s keeps each preemption test's wait to a requeue
			# delay a real site could have, not two minutes of CI.
			cat <<EOF
AuthInfo=cred_expire=30
DefMemPerCPU=500
JobAcctGatherParams=OverMemoryKill
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
PreemptParameters=send_user_signal
PartitionName=preemptible Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE
PartitionName=preemptible-grace Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=20
PartitionName=urgent Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
EOF
		fi
		if [[ "$RATE_LIMIT" == 1 ]]; then
			# slurmctld's per-user RPC rate limit, defaults (rl_bucket_size=30, rl_refill_rate=2
			# per rl_refill_period=1 s). Over it slurmctld answers BACKOFF and slurmrestd retries
			# on its own, so its HTTP answer comes late.
			echo "SlurmctldParameters=rl_enable"
		fi
		if [[ "$ACCOUNTING" == 1 ]]; then
			cat <<EOF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$host
AccountingStoragePort=$DBD_PORT
EOF
			# --default-store-flags: none, as a site that never set them (slurmdbd then keeps
			# no job comment: coalesced arrays carry their keys in their name).
			[[ "$DEFAULT_STORE_FLAGS" == 1 ]] || echo "AccountingStoreFlags=job_comment,job_script,job_env"
		fi
	} >"$ROOT/etc/slurm/slurm.conf"
	printf 'CgroupPlugin=disabled\n' >"$ROOT/etc/slurm/cgroup.conf"
	chmod 0644 "$ROOT/etc/slurm/slurm.conf" "$ROOT/etc/slurm/cgroup.conf"

	cat >"$ROOT/etc/slurm/slurmdbd.conf" <<EOF
# Written by deploy/dev-cluster/dev-cluster on every \`up\`; edits are lost.
AuthType=auth/slurm
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=/etc/slurm/jwt_hs256.key
DbdHost=$host
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=slurm
PidFile=/run/slurmdbd/slurmdbd.pid
LogFile=/var/log/slurm/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$(cat "$ROOT/etc/slurm/dbpass")
StorageLoc=slurm_acct_db
EOF
	in_root chown slurm:slurm /etc/slurm/slurmdbd.conf
	chmod 0600 "$ROOT/etc/slurm/slurmdbd.conf"

	# Switching between accounting and none changes the cluster id: slurmctld then refuses its saved
	# state ("CLUSTER ID MISMATCH") until the clustername file is removed once.
	local last="$CACHE/last-accounting"
	if [[ -f "$last" && "$(cat "$last")" != "$ACCOUNTING" ]]; then
		log "accounting changed since the last run: resetting slurmctld's cluster id"
		rm -f "$ROOT/var/lib/slurm/slurmctld/clustername"
	fi
	echo "$ACCOUNTING" >"$last"
}
