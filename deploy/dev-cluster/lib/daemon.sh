# shellcheck shell=bash
# Part of deploy/dev-cluster/dev-cluster (sourced by it; uses its variables and helpers).
#
# `daemon stop|kill|start|restart NAME [--node N]`: one daemon of a running cluster, by the pid in
# its pid file, for fault drills (tests/real_controller_drill.rs): a slurmctld stopped as in an
# upgrade or SIGKILLed as in a crash, slurmrestd or slurmdbd gone for a while, one node's slurmd
# down. `start` starts it exactly as `up` does (lib/daemons.sh's start_* helpers: the same
# slurm.conf, the same StateSaveLocation and spool directories), so a restarted slurmctld recovers
# its jobs from its saved state as a site's would.

DAEMON_NAMES=(slurmctld slurmdbd slurmrestd slurmd)

# The pid-file name of NAME (slurmd: of node N).
daemon_file_name() {
	local name="$1" node="$2"
	if [[ "$name" == slurmd && "$node" != 1 ]]; then
		echo "slurmd-node$node"
	else
		echo "$name"
	fi
}

# Waits (bounded) until pid is gone; 0 when it is.
wait_pid_gone() {
	local pid="$1" secs="$2" i
	for ((i = 0; i < secs * 10; i++)); do
		pid_alive "$pid" || return 0
		sleep 0.1
	done
	return 1
}

# slurmrestd is ready when it answers HTTP at all: an unauthenticated request gets 401 whether
# slurmctld is up or not (a drill starts it while slurmctld is down; `up`'s readiness, an
# authenticated ping with slurmctld UP, would wait for ever then).
restd_answers() {
	local code
	code="$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$RESTD_PORT/slurm/$API_VERSION/ping")" || return 1
	[[ "$code" != 000 ]]
}

node_up() { # registered and responding; one partition: sinfo -N lists a node once per partition
	# A drained node answers too: a slurmctld restarted from an older state drains a node that
	# reports a job id twice ("Duplicate jobid"), and a drill restarts its slurmd then.
	case "$(in_root sinfo -h -N -n "$1" -p debug -o %T 2>/dev/null)" in
	idle | mixed | allocated | completing | drained | draining | drain) return 0 ;;
	*) return 1 ;;
	esac
}

daemon_wait_ready() {
	local name="$1" file="$2" node="$3"
	case "$name" in
	slurmctld) wait_for "slurmctld to answer" slurmctld 60 in_root scontrol ping ;;
	slurmdbd) wait_for "slurmdbd to answer" slurmdbd 60 dbd_answers ;;
	slurmrestd) wait_for "slurmrestd to answer HTTP on 127.0.0.1:$RESTD_PORT" slurmrestd 60 restd_answers ;;
	slurmd)
		# Registered with slurmctld, if one runs to register with; otherwise only started.
		if daemon_running slurmctld; then
			wait_for "node$node to be up" "$file" 90 node_up "node$node"
		else
			sleep 1
			daemon_running "$file" || {
				show_logs "$file"
				die "$file exited at start (logs above)"
			}
		fi
		;;
	esac
}

cmd_daemon() {
	[[ "$(id -u)" == 0 ]] || die "must run as root (the daemons run as root or slurm)"
	local usage="usage: daemon stop|kill|start|restart slurmctld|slurmdbd|slurmrestd|slurmd [--node N]"
	[[ ${#DAEMON_ARGS[@]} -eq 2 ]] || die "$usage"
	local action="${DAEMON_ARGS[0]}" name="${DAEMON_ARGS[1]}" node="${DAEMON_NODE:-1}"
	case "$action" in stop | kill | start | restart) ;; *) die "daemon: unknown action '$action'; $usage" ;; esac
	local known=0 d
	for d in "${DAEMON_NAMES[@]}"; do [[ "$d" == "$name" ]] && known=1; done
	((known)) || die "daemon: unknown daemon '$name'; $usage"
	[[ "$node" =~ ^[0-9]+$ ]] || die "--node must be a node number (1 for node1), got '$node'"
	[[ -z "${DAEMON_NODE:-}" || "$name" == slurmd ]] || die "--node is for slurmd only"
	# The settings `up` started the cluster with: the daemon starts again with the same ones.
	read_settings
	[[ -n "$RUN_ACCOUNTING" ]] ||
		die "the $RELEASE cluster is not up (no $RUN/settings): run \`$SCRIPT_PATH --release $RELEASE up\` first"
	ACCOUNTING="$RUN_ACCOUNTING"
	# shellcheck disable=SC2034 # read by start_slurmd_node (lib/daemons.sh)
	APPTAINER="${RUN_APPTAINER:-0}" PYXIS="${RUN_PYXIS:-0}"
	adopt_running_nodes
	((node >= 1 && node <= NODES)) || die "--node $node: this cluster has node1..node$NODES"
	[[ "$name" != slurmdbd || "$ACCOUNTING" == 1 ]] || die "this cluster runs without accounting: no slurmdbd"
	local file pid
	file="$(daemon_file_name "$name" "$node")"
	pid="$(daemon_pid "$file")"
	local t0=$SECONDS
	if [[ "$action" == stop || "$action" == kill || "$action" == restart ]]; then
		if ! pid_alive "$pid"; then
			[[ "$action" == restart ]] || die "$file is not running (pid file: ${pid:-none})"
		elif [[ "$action" == kill ]]; then
			log "killing $file (pid $pid, SIGKILL)"
			kill -KILL "$pid"
			wait_pid_gone "$pid" 10 || die "$file (pid $pid) still alive 10 s after SIGKILL"
		else
			# slurmctld saves its state on TERM; it may take a while with many jobs.
			log "stopping $file (pid $pid, SIGTERM)"
			kill -TERM "$pid"
			wait_pid_gone "$pid" 60 ||
				die "$file (pid $pid) did not exit within 60 s of SIGTERM; \`daemon kill $name\` ends it"
		fi
		[[ "$action" == restart ]] || {
			log "$file $action: done in $((SECONDS - t0))s"
			return 0
		}
	fi
	pid_alive "$pid" && die "$file already runs (pid $pid); \`daemon restart $name\` stops it first"
	mount_proc
	case "$name" in
	slurmctld) start_slurmctld ;;
	slurmdbd) start_slurmdbd ;;
	slurmrestd) start_slurmrestd ;;
	slurmd) start_slurmd_node "$node" ;;
	esac
	daemon_wait_ready "$name" "$file" "$node"
	log "$file $action: done in $((SECONDS - t0))s (pid $(daemon_pid "$file"))"
}
