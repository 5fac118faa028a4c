# shellcheck shell=bash
# Part of deploy/dev-cluster/dev-cluster (sourced by it; uses its variables and helpers).

# ---------------------------------------------------------------------------------------------
# up / down / status

mount_proc() {
	is_mounted "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
}

# Settings of the running cluster, read by `env` and compared by a second `up`.
write_settings() {
	cat >"$RUN/settings" <<EOF
RUN_ACCOUNTING=$ACCOUNTING
RUN_MIN_JOB_AGE=$MIN_JOB_AGE
RUN_APPTAINER=$APPTAINER
RUN_NODES=$NODES
RUN_PYXIS=$PYXIS
RUN_FAILURE_MODES=$FAILURE_MODES
RUN_RATE_LIMIT=$RATE_LIMIT
RUN_MAX_JOB_COUNT=$MAX_JOB_COUNT
RUN_DEFAULT_STORE_FLAGS=$DEFAULT_STORE_FLAGS
EOF
}

read_settings() {
	RUN_ACCOUNTING="" RUN_MIN_JOB_AGE="" RUN_APPTAINER="" RUN_NODES="" RUN_PYXIS=""
	RUN_FAILURE_MODES="" RUN_RATE_LIMIT="" RUN_MAX_JOB_COUNT="" RUN_DEFAULT_STORE_FLAGS=""
	if [[ -f "$RUN/settings" ]]; then
		# shellcheck source=/dev/null
		source "$RUN/settings"
	fi
}

all_expected_running() {
	local d
	for d in $(expected_daemons); do
		daemon_running "$d" || return 1
	done
}

any_running() {
	local d
	for d in "${ALL_DAEMONS[@]}"; do
		daemon_running "$d" && return 0
	done
	return 1
}

# slurmrestd answers an authenticated request on its newest data_parser and slurmctld is reachable
# through it: `"pinged": "UP"` up to v0.0.44, `"responding": true` from v0.0.42 (v0.0.45 dropped
# `pinged`; see tests/fixtures/slurmrestd/26.11rc1_v0.0.46_ping.json).
restd_ping() {
	local token
	token="$(in_root scontrol token username=root lifespan=60 2>/dev/null)" || return 1
	token="${token#SLURM_JWT=}"
	# The token goes in on stdin (-H @-), never in curl's arguments (visible to every user).
	printf 'X-SLURM-USER-TOKEN: %s\n' "$token" |
		curl -fsS --max-time 5 -H @- "http://127.0.0.1:$RESTD_PORT/slurm/$API_VERSION/ping" 2>/dev/null |
		grep -Eq '"pinged": *"UP"|"responding": *true'
}

node_ready() { # slurmd registered and responding; jobs kept from an earlier run may use it
	# One partition: sinfo -N lists the node once per partition it is in (--failure-modes has 3).
	case "$(in_root sinfo -h -N -n node1 -p debug -o %T 2>/dev/null)" in
	idle | mixed | allocated | completing) return 0 ;;
	drained | draining | drain*) resume_drained node1 ;;
	*) return 1 ;;
	esac
}

# A node drained when this cluster last ran (slurmctld keeps the drain in its state save: a
# controller drill that failed before its clean-up left "Duplicate jobid" on it) would keep every
# later `up` waiting: a dev cluster starts with its nodes in service.
resume_drained() {
	log "$1 was left drained by an earlier run ($(in_root sinfo -h -N -n "$1" -o %E 2>/dev/null | head -n 1)); resuming it"
	in_root scontrol update nodename="$1" state=resume >/dev/null 2>&1 || true
	return 1
}

dbd_answers() { in_root sacctmgr -n -P show cluster format=cluster; }

cluster_registered() { # slurmctld registered with slurmdbd: ControlHost is filled in
	local host
	host="$(in_root sacctmgr -n -P show cluster "$CLUSTER_NAME" format=controlhost 2>/dev/null)" || return 1
	[[ -n "$host" ]]
}

mariadb_answers() { in_root mariadb-admin --silent ping; }

# The job records of earlier `up`s, older than an hour, deleted before slurmdbd starts. The
# chroot (and its database) is cached, so every run's jobs stayed: 11059 after a day of CI runs,
# and the connector's first look at a week of Flyte jobs in slurmdbd (its duplicate check) then
# outlived its request timeout under load, so submits were deferred and tests that expect an
# answer within the submit wait failed. A site's slurmdbd purges by its own PurgeJobAfter; a
# dev cluster's tests need only their own jobs.
purge_old_job_records() {
	local n
	n="$(in_root mariadb -N slurm_acct_db -e "SELECT COUNT(*) FROM information_schema.tables
		WHERE table_schema = 'slurm_acct_db' AND table_name = '${CLUSTER_NAME}_job_table'")"
	[[ "$n" == 1 ]] || return 0
	in_root mariadb slurm_acct_db <<EOF
DELETE FROM ${CLUSTER_NAME}_step_table WHERE time_start < UNIX_TIMESTAMP() - 3600;
DELETE FROM ${CLUSTER_NAME}_job_table WHERE time_submit < UNIX_TIMESTAMP() - 3600;
EOF
}

wait_ready() {
	wait_for "slurmctld to answer" slurmctld 60 in_root scontrol ping
	if ((NODES > 1)); then
		wait_for "node1..node$NODES to be up (idle)" slurmd 90 nodes_ready
	else
		wait_for "node1 to be up (idle)" slurmd 90 node_ready
	fi
	if [[ "$ACCOUNTING" == 1 ]]; then
		wait_for "slurmctld to register with slurmdbd" slurmctld 60 cluster_registered
	fi
	wait_for "slurmrestd to answer on 127.0.0.1:$RESTD_PORT" slurmrestd 60 restd_ping
}

# Everything `up` builds and caches (the chroot, 26.11's Slurm from source, the task images,
# Enroot and Pyxis), with no daemon started and nothing left mounted: a later `up` finds it all
# cached. For CI, which prepares the next releases in the background while a test suite runs on
# another one (each release has its own chroot, cache and ports; nothing here touches the host's
# dpkg once ensure_host_tools has run).
cmd_prepare() {
	[[ "$(id -u)" == 0 ]] || die "must run as root (chroot, mount)"
	mkdir -p "$RUN" "$LOGS"
	any_running && die "release $RELEASE is up; prepare is for a release that is down (\`up\` builds what is missing anyway)"
	local t0=$SECONDS
	ensure_host_tools
	[[ "$RELEASE" == 26.11 ]] && resolve_slurm_source
	build_chroot
	mount_proc
	[[ "$APPTAINER" == 1 ]] && prepare_apptainer
	[[ "$PYXIS" == 1 ]] && prepare_pyxis
	leave_chroot_idle
	log "prepared in $((SECONDS - t0))s (nothing started; \`up\` reuses it)"
}

# How `up` starts each Slurm daemon; `daemon start` (lib/daemon.sh) starts one the same way, from
# the same configuration and state directories.
start_slurmdbd() { start_daemon slurmdbd chroot "$ROOT" /usr/sbin/slurmdbd -D; }
start_slurmctld() { start_daemon slurmctld chroot "$ROOT" /usr/sbin/slurmctld -D; }

# nodeK's slurmd. Apptainer and Enroot both create user namespaces: slurmd under pivot_root
# (lib/pivot-exec.sh); --nodes: each in its own UTS namespace (lib/nodes.sh). A pivoted slurmd's
# mount namespace is appended to slurmd.mntns (`up` empties it first), so one restarted by
# `daemon` leaves its predecessor's job steps findable by `down`.
start_slurmd_node() {
	local k="$1"
	if ((NODES > 1)); then
		start_node_slurmd "$k"
	elif [[ "$APPTAINER" == 1 || "$PYXIS" == 1 ]]; then
		start_slurmd_pivot
	else
		start_daemon slurmd chroot "$ROOT" /usr/sbin/slurmd -D -N node1
	fi
}

start_slurmrestd() {
	local rest_args=(-a rest_auth/jwt)
	# Loading openapi/slurmdbd without accounting kills slurmrestd ("Failure loading plugin path bindings").
	[[ "$ACCOUNTING" == 1 ]] || rest_args+=(-s openapi/slurmctld)
	start_daemon slurmrestd chroot --userspec="$REST_USER:$REST_USER" "$ROOT" \
		env -i PATH="$CHROOT_PATH" SLURM_JWT=daemon /usr/sbin/slurmrestd "${rest_args[@]}" "127.0.0.1:$RESTD_PORT"
}

cmd_up() {
	[[ "$(id -u)" == 0 ]] || die "must run as root (chroot, mount)"
	mkdir -p "$RUN" "$LOGS"
	if any_running; then
		read_settings
		[[ -n "$RUN_ACCOUNTING" && -z "$ACCOUNTING_GIVEN" ]] && ACCOUNTING="$RUN_ACCOUNTING"
		[[ -n "$RUN_MIN_JOB_AGE" && -z "$MIN_JOB_AGE_GIVEN" ]] && MIN_JOB_AGE="$RUN_MIN_JOB_AGE"
		# Clusters started before --apptainer existed have no RUN_APPTAINER: they run without it.
		RUN_APPTAINER="${RUN_APPTAINER:-0}"
		[[ -z "$APPTAINER_GIVEN" ]] && APPTAINER="$RUN_APPTAINER"
		RUN_NODES="${RUN_NODES:-1}"
		if [[ -z "$NODES_GIVEN" && "$RUN_NODES" != "$NODES" ]]; then
			NODES="$RUN_NODES"
			nodes_setup
		fi
		RUN_PYXIS="${RUN_PYXIS:-0}"
		[[ -z "$PYXIS_GIVEN" ]] && PYXIS="$RUN_PYXIS"
		# Clusters started before these were recorded: without them (their slurm.conf says so).
		RUN_FAILURE_MODES="${RUN_FAILURE_MODES:-0}"
		[[ -z "$FAILURE_MODES_GIVEN" ]] && FAILURE_MODES="$RUN_FAILURE_MODES"
		RUN_RATE_LIMIT="${RUN_RATE_LIMIT:-0}"
		[[ -z "$RATE_LIMIT_GIVEN" ]] && RATE_LIMIT="$RUN_RATE_LIMIT"
		RUN_MAX_JOB_COUNT="${RUN_MAX_JOB_COUNT:-10000}"
		[[ -z "$MAX_JOB_COUNT_GIVEN" ]] && MAX_JOB_COUNT="$RUN_MAX_JOB_COUNT"
		RUN_DEFAULT_STORE_FLAGS="${RUN_DEFAULT_STORE_FLAGS:-0}"
		[[ -z "$DEFAULT_STORE_FLAGS_GIVEN" ]] && DEFAULT_STORE_FLAGS="$RUN_DEFAULT_STORE_FLAGS"
		local same=0
		[[ "$RUN_ACCOUNTING" == "$ACCOUNTING" && "$RUN_MIN_JOB_AGE" == "$MIN_JOB_AGE" && "$RUN_APPTAINER" == "$APPTAINER" && "$RUN_NODES" == "$NODES" && "$RUN_PYXIS" == "$PYXIS" && "$RUN_FAILURE_MODES" == "$FAILURE_MODES" && "$RUN_RATE_LIMIT" == "$RATE_LIMIT" && "$RUN_MAX_JOB_COUNT" == "$MAX_JOB_COUNT" && "$RUN_DEFAULT_STORE_FLAGS" == "$DEFAULT_STORE_FLAGS" ]] && same=1
		if all_expected_running && ((same)); then
			wait_ready
			log "already up (slurmrestd on http://127.0.0.1:$RESTD_PORT)"
			return 0
		fi
		if [[ -n "$RUN_ACCOUNTING" ]] && ((!same)); then
			die "already running with accounting=$RUN_ACCOUNTING min-job-age=$RUN_MIN_JOB_AGE apptainer=$RUN_APPTAINER nodes=$RUN_NODES pyxis=$RUN_PYXIS failure-modes=$RUN_FAILURE_MODES rate-limit=$RUN_RATE_LIMIT max-job-count=$RUN_MAX_JOB_COUNT default-store-flags=$RUN_DEFAULT_STORE_FLAGS; run \`$0 --release $RELEASE down\` first"
		fi
		log "partly up: stopping what runs, then starting everything"
		cmd_down
	fi
	local t0=$SECONDS
	ensure_host_tools
	# Before the long steps: a missing --slurm-source is said at once, not after copying a chroot.
	[[ "$RELEASE" == 26.11 ]] && resolve_slurm_source
	build_chroot
	write_config
	mount_proc
	ensure_identity_users
	[[ "$APPTAINER" == 1 ]] && prepare_apptainer
	if [[ "$PYXIS" == 1 ]]; then prepare_pyxis; else disable_pyxis; fi
	write_settings

	if [[ "$ACCOUNTING" == 1 ]]; then
		in_root install -d -m 0755 -o mysql -g mysql /run/mysqld /run/mariadbd
		# No TCP: side-by-side clusters would fight over port 3306; slurmdbd uses the socket.
		start_daemon mariadb chroot "$ROOT" /usr/sbin/mariadbd --user=mysql --skip-networking
		wait_for "MariaDB to answer" mariadb 60 mariadb_answers
		local pass
		pass="$(cat "$ROOT/etc/slurm/dbpass")"
		# On stdin, not in the arguments: process arguments are visible to every user.
		in_root mariadb <<EOF
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$pass';
ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$pass';
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
EOF
		purge_old_job_records

		start_slurmdbd
		wait_for "slurmdbd to answer" slurmdbd 60 dbd_answers
		if [[ -z "$(in_root sacctmgr -n -P show cluster "$CLUSTER_NAME" format=cluster)" ]]; then
			in_root sacctmgr -i add cluster "$CLUSTER_NAME" >/dev/null
		fi
		if [[ -z "$(in_root sacctmgr -n -P show account dev format=account)" ]]; then
			in_root sacctmgr -i add account dev cluster="$CLUSTER_NAME" description=dev-cluster organization=dev >/dev/null
		fi
		local u
		for u in "$JOB_USER" slurm root; do
			if [[ -z "$(in_root sacctmgr -n -P show user "$u" format=user)" ]] ||
				[[ -z "$(in_root sacctmgr -n -P show assoc user="$u" account=dev format=user)" ]]; then
				in_root sacctmgr -i add user "$u" account=dev cluster="$CLUSTER_NAME" >/dev/null || true
			fi
		done
		ensure_identity_accounts
	fi

	start_slurmctld
	wait_for "slurmctld to answer" slurmctld 60 in_root scontrol ping
	rm -f "$RUN/slurmd.mntns"
	local k
	for ((k = 1; k <= NODES; k++)); do start_slurmd_node "$k"; done
	start_slurmrestd
	wait_ready
	log "up in $((SECONDS - t0))s: slurmrestd on http://127.0.0.1:$RESTD_PORT (accounting=$ACCOUNTING, MinJobAge=$MIN_JOB_AGE, apptainer=$APPTAINER, nodes=$NODES, pyxis=$PYXIS)"
	log "next: eval \"\$($SCRIPT_PATH --release $RELEASE env)\""
}

stop_pid() { # TERM, wait, then KILL; only if the pid still lives in our chroot
	local name="$1" pid="$2" i
	pid_alive "$pid" || return 0
	log "stopping $name (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 40; i++)); do
		pid_alive "$pid" || return 0
		sleep 0.25
	done
	log "$name (pid $pid) did not stop in 10s: killing it"
	kill -KILL "$pid" 2>/dev/null || true
	for ((i = 0; i < 20; i++)); do
		pid_alive "$pid" || return 0
		sleep 0.25
	done
	log "warning: $name (pid $pid) still alive"
}

# The chroot as `down` and `prepare` leave it: no plugstack entry, no image binds, no /proc.
leave_chroot_idle() {
	[[ -d "$ROOT/etc/slurm" ]] && disable_pyxis
	umount_images
	if is_mounted "$ROOT/proc"; then
		umount "$ROOT/proc" || umount -l "$ROOT/proc"
	fi
	return 0
}

cmd_down() {
	[[ "$(id -u)" == 0 ]] || die "must run as root"
	adopt_running_nodes
	local i name
	# Running jobs cannot survive the stop of slurmd (their processes are stopped below); cancel
	# them first so slurmctld does not keep them as RUNNING into the next `up`. Pending jobs stay.
	if daemon_running slurmctld; then
		if [[ -n "$(in_root squeue -h -t RUNNING -o %i 2>/dev/null)" ]]; then
			log "cancelling running jobs"
			in_root scancel --state=RUNNING >/dev/null 2>&1 || true
			for ((i = 0; i < 20; i++)); do
				[[ -z "$(in_root squeue -h -t RUNNING,COMPLETING -o %i 2>/dev/null)" ]] && break
				sleep 0.5
			done
		fi
	fi
	for ((i = ${#ALL_DAEMONS[@]} - 1; i >= 0; i--)); do
		name="${ALL_DAEMONS[i]}"
		[[ -f "$RUN/$name.pid" ]] || continue
		stop_pid "$name" "$(daemon_pid "$name")"
		rm -f "$RUN/$name.pid"
	done
	# Job steps (slurmstepd and the jobs' processes) are children of slurmd that escape its session;
	# they are found by their root directory being exactly this chroot (or, under --apptainer, by
	# slurmd's mount namespace and descent from it), never by name.
	if [[ -d "$ROOT" ]]; then
		local p left=()
		local -A seen=()
		for p in /proc/[0-9]*; do
			p="${p#/proc/}"
			pid_alive "$p" && left+=("$p") && seen[$p]=1
		done
		for p in $(pivot_processes); do
			[[ -n "${seen[$p]:-}" || "$p" == "$$" ]] || left+=("$p")
		done
		if ((${#left[@]} > 0)); then
			log "stopping ${#left[@]} leftover process(es) in the chroot (job steps): ${left[*]}"
			kill -TERM "${left[@]}" 2>/dev/null || true
			sleep 2
			for p in "${left[@]}"; do
				[[ -d "/proc/$p" ]] && kill -KILL "$p" 2>/dev/null
			done
			# KILL is asynchronous: give them a moment to be gone before `down` says so.
			for ((i = 0; i < 20; i++)); do
				local alive=0
				for p in "${left[@]}"; do
					[[ -d "/proc/$p" ]] && alive=1 && break
				done
				((alive)) || break
				sleep 0.1
			done
		fi
	fi
	rm -f "$RUN/settings" "$RUN/slurmd.mntns"
	leave_chroot_idle
	log "down"
}

cmd_status() {
	local d pid state rc=0 running=0 expected=0
	adopt_running_nodes
	[[ -n "$RUN_ACCOUNTING" ]] && ACCOUNTING="$RUN_ACCOUNTING"
	[[ -d "$ROOT" ]] || {
		echo "release $RELEASE: not built ($ROOT missing)"
		return 3
	}
	echo "release $RELEASE ($SUITE), chroot $ROOT"
	for d in $(expected_daemons); do
		expected=$((expected + 1))
		pid="$(daemon_pid "$d")"
		if pid_alive "$pid"; then
			state="running (pid $pid)"
			running=$((running + 1))
		elif [[ -n "$pid" ]]; then
			state="stopped (stale pid file: $pid)"
		else
			state="stopped"
		fi
		printf '  %-11s %s\n' "$d" "$state"
	done
	if ((running == expected)); then
		echo "up: slurmrestd http://127.0.0.1:$RESTD_PORT accounting=$ACCOUNTING MinJobAge=${RUN_MIN_JOB_AGE:-?} apptainer=${RUN_APPTAINER:-0} pyxis=${RUN_PYXIS:-0}"
	elif ((running == 0)); then
		echo "down"
		rc=3
	else
		echo "partly up: run \`$SCRIPT_PATH --release $RELEASE down\` then \`up\`"
		rc=1
	fi
	return "$rc"
}
