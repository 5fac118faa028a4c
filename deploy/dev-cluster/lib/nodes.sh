# shellcheck shell=bash
# Part of deploy/dev-cluster/dev-cluster (sourced by it; uses its variables and helpers).
#
# --nodes N (N >= 2): N slurmd on this one host, node1..nodeN. Slurm is not built with
# --enable-multiple-slurmd here, so each slurmd runs in its own UTS namespace whose hostname is
# its node name (slurmd finds its NodeName from the hostname, as on a real node; job steps
# inherit the namespace, so `hostname` in a task says which node runs it), with its own Port=,
# spool directory, pid file and log (slurm.conf's %n). All nodes share the chroot's filesystem,
# which stands for a cluster's shared filesystem. Without --nodes nothing here is used: one
# node1 on SlurmdPort, as before.

NODES_MAX=6

# Called by setup_release: checks N and adds the extra nodes' slurmd to the daemon list.
nodes_setup() {
	[[ "$NODES" =~ ^[0-9]+$ ]] || die "--nodes must be a whole number, got '$NODES'"
	((NODES >= 1 && NODES <= NODES_MAX)) || die "--nodes must be between 1 and $NODES_MAX (one port each in the release's block), got $NODES"
	((NODES > 1)) || return 0
	# Ports after the release's four (slurmctld, slurmd, slurmdbd, slurmrestd): 26.11 -> 6841..
	NODE_PORT_BASE=$((CTLD_PORT + 4))
	local d out=() k
	for d in "${ALL_DAEMONS[@]}"; do
		out+=("$d")
		if [[ "$d" == slurmd ]]; then
			for ((k = 2; k <= NODES; k++)); do out+=("slurmd-node$k"); done
		fi
	done
	ALL_DAEMONS=("${out[@]}")
}

node_names() { # node1 .. nodeN, one a line
	local k
	for ((k = 1; k <= NODES; k++)); do echo "node$k"; done
}

# slurm.conf lines for the nodes and the per-node files (replaces the one-node NodeName line).
nodes_conf() {
	local node_memory="$1"
	cat <<EOF
# --nodes $NODES: one slurmd per node, each in its own UTS namespace (hostname = node name).
SlurmdSpoolDir=/var/lib/slurm/slurmd/%n
SlurmdPidFile=/run/slurm/slurmd-%n.pid
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
EOF
	local k
	for ((k = 1; k <= NODES; k++)); do
		echo "NodeName=node$k NodeAddr=127.0.0.1 Port=$((NODE_PORT_BASE + k - 1)) CPUs=8 ${node_memory}State=UNKNOWN"
	done
}

# Node names resolve inside the chroot (and so in containers, which get its /etc/hosts):
# MASTER_ADDR=node1 must reach rank 0.
nodes_hosts() {
	local k line="127.0.0.1"
	for ((k = 1; k <= NODES; k++)); do line+=" node$k"; done
	echo "$line # dev-cluster --nodes" >>"$ROOT/etc/hosts"
	local n
	for n in $(node_names); do
		in_root install -d -m 0755 -o root -g root "/var/lib/slurm/slurmd/$n"
	done
}

# Starts nodeK's slurmd (K >= 1) in its own UTS namespace; under --apptainer also under
# pivot_root (lib/pivot-exec.sh), its mount namespace appended to slurmd.mntns.
start_node_slurmd() {
	local k="$1" name=slurmd
	((k > 1)) && name="slurmd-node$k"
	local launch=(chroot "$ROOT")
	[[ "$APPTAINER" == 1 || "${PYXIS:-0}" == 1 ]] && launch=("$LIB_DIR/pivot-exec.sh" "$ROOT")
	# shellcheck disable=SC2016 # $1 and $@ expand in the inner shell
	start_daemon "$name" unshare --uts -- /bin/bash -c 'hostname "$1"; shift; exec "$@"' uts "node$k" \
		"${launch[@]}" env -i PATH="$CHROOT_PATH" LANG=C.UTF-8 /usr/sbin/slurmd -D -N "node$k"
	[[ "$APPTAINER" == 1 || "${PYXIS:-0}" == 1 ]] || return 0
	local pid host_ns ns i
	pid="$(daemon_pid "$name")"
	host_ns="$(readlink /proc/self/ns/mnt)"
	for ((i = 0; i < 100; i++)); do
		ns="$(readlink "/proc/$pid/ns/mnt" 2>/dev/null)" || break
		if [[ "$ns" != "$host_ns" ]]; then
			echo "$ns" >>"$RUN/slurmd.mntns"
			return 0
		fi
		sleep 0.1
	done
	show_logs "$name"
	die "$name did not start (logs above; $LOGS/$name.out)"
}

nodes_ready() { # every node registered and responding
	local n
	for n in $(node_names); do
		case "$(in_root sinfo -h -N -n "$n" -p debug -o %T 2>/dev/null)" in
		idle | mixed | allocated | completing) ;;
		drained | draining | drain*)
			resume_drained "$n"
			return 1
			;;
		*) return 1 ;;
		esac
	done
}

# `down` and `status` without --nodes act on the nodes the running cluster was started with.
adopt_running_nodes() {
	read_settings
	if [[ -z "$NODES_GIVEN" && -n "$RUN_NODES" && "$RUN_NODES" != "$NODES" ]]; then
		NODES="$RUN_NODES"
		nodes_setup
	fi
}
