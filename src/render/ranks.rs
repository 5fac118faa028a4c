//! Multi-rank native tasks (a `clustered-task`, or a `slurm` task asking for several nodes or
//! tasks): the environment torch.distributed (and Flyte's `a0`) expects, derived from Slurm.
//!
//! Why `srun` starts every rank itself instead of `torchrun` once per node: the allocation is
//! already a gang (all nodes or none), and srun gives the rest for free — every rank starts in
//! one step, `--kill-on-bad-exit` ends all ranks when one fails, scancel reaches every rank on
//! every node through slurmstepd (nothing outlives the job), per-rank accounting, and `--label`
//! names the rank of every line of output. torchrun would add an agent per node, a c10d store of
//! its own, and torch in every image; its only extra (in-job elastic restarts,
//! `TorchRun(max_restarts=...)`) is refused with a clear error (clustered.rs).
//!
//! The batch script (once, on the first node) exports what is the same for every rank:
//! - `MASTER_ADDR`: the first host of the allocation (`scontrol show hostnames`), where rank 0
//!   runs (srun's default block distribution places rank 0 on the first node);
//! - `MASTER_PORT`: `MASTER_PORT_BASE + job id % MASTER_PORT_SPAN` (29500-32767), derived
//!   deterministically so every rank agrees without talking; two jobs sharing a node get the same
//!   port only when their ids differ by a multiple of 3268 (and clustered jobs are `--exclusive`
//!   by default). The range ends below Linux's ephemeral ports (`ip_local_port_range`, 32768 up
//!   by default): in them, rank 0's bind fails with "Address already in use" whenever an
//!   outgoing connection on the node was given that port. A `MASTER_PORT` in the task's
//!   environment wins.
//! - `TORCHELASTIC_RUN_ID` (`slurm-<job id>`): `a0` treats a process as a clustered worker when
//!   it is set (no controller; only `RANK` 0 writes outputs.pb / error.pb; a failing rank exits
//!   non-zero, so srun ends the others).
//!
//! Each rank (inside the container, before `exec`) sets from srun's per-task variables:
//! `RANK`=SLURM_PROCID, `LOCAL_RANK`=SLURM_LOCALID, `NODE_RANK`/`GROUP_RANK`=SLURM_NODEID,
//! `WORLD_SIZE`=the step's task count, `LOCAL_WORLD_SIZE`=this node's count in
//! SLURM_STEP_TASKS_PER_NODE (`2(x2)` or `3,1`).

/// First port of the MASTER_PORT range (torch.distributed's default port).
pub const MASTER_PORT_BASE: u32 = 29500;
/// Ports in the range: up to 32767, the last below Linux's default ephemeral range.
pub const MASTER_PORT_SPAN: u32 = 3268;

/// srun options of a multi-rank launch: one step over the whole allocation (srun takes the
/// job's nodes and task layout), all ranks ended when one fails, every output line labelled
/// with its rank (how a failing rank's own lines are found in the job's stderr).
pub const SRUN_OPTIONS: &[&str] = &["--kill-on-bad-exit=1", "--label"];

/// Batch-script lines before the srun line.
pub fn rendezvous_block() -> String {
    format!(
        "# slurm-connector: the rendezvous every rank shares (see src/render/ranks.rs).\n\
         __sc_hosts=\"$(scontrol show hostnames \"$SLURM_JOB_NODELIST\")\"\n\
         export MASTER_ADDR=\"${{__sc_hosts%%$'\\n'*}}\"\n\
         export MASTER_PORT=\"${{MASTER_PORT:-$(( {MASTER_PORT_BASE} + SLURM_JOB_ID % {MASTER_PORT_SPAN} ))}}\"\n\
         export TORCHELASTIC_RUN_ID=\"slurm-$SLURM_JOB_ID\"\n"
    )
}

/// Shell run by every rank (bash, inside the container) before the entrypoint.
pub const RANK_SHIM: &str = r#"export RANK="$SLURM_PROCID" LOCAL_RANK="$SLURM_LOCALID" NODE_RANK="$SLURM_NODEID" GROUP_RANK="$SLURM_NODEID" WORLD_SIZE="${SLURM_STEP_NUM_TASKS:-$SLURM_NTASKS}"; __n="$SLURM_NODEID"; for __e in ${SLURM_STEP_TASKS_PER_NODE//,/ }; do __c="${__e%%(*}"; __r=1; case "$__e" in *"(x"*) __r="${__e#*(x}"; __r="${__r%)}";; esac; if [ "$__n" -lt "$__r" ]; then export LOCAL_WORLD_SIZE="$__c"; break; fi; __n=$((__n - __r)); done; "#;

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// The shim, run by bash with what srun sets for rank 3 of `-N2 --ntasks-per-node=2` and for
    /// the last rank of an uneven `3,1` layout.
    #[test]
    fn the_shim_derives_every_variable() {
        let run = |vars: &[(&str, &str)]| {
            let out = Command::new("bash")
                .arg("-c")
                .arg(format!(
                    "{RANK_SHIM} echo $RANK $LOCAL_RANK $NODE_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE"
                ))
                .env_clear()
                .envs(vars.iter().copied())
                .output()
                .unwrap();
            String::from_utf8(out.stdout).unwrap().trim().to_string()
        };
        let even = [
            ("SLURM_PROCID", "3"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NODEID", "1"),
            ("SLURM_STEP_NUM_TASKS", "4"),
            ("SLURM_STEP_TASKS_PER_NODE", "2(x2)"),
        ];
        assert_eq!(run(&even), "3 1 1 4 2");
        let uneven = [
            ("SLURM_PROCID", "3"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_NODEID", "1"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_STEP_TASKS_PER_NODE", "3,1"),
        ];
        assert_eq!(run(&uneven), "3 0 1 4 1");
        let mixed = [
            ("SLURM_PROCID", "7"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_NODEID", "3"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_STEP_TASKS_PER_NODE", "3(x2),1,1"),
        ];
        assert_eq!(run(&mixed), "7 0 3 8 1");
    }

    #[test]
    fn the_rendezvous_block_derives_addr_and_port() {
        // A stand-in for scontrol, the hostnames of node[1-2], as a shell function: an
        // executable written by a test can be ETXTBSY when bash execs it while another test
        // thread forks.
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "set -euo pipefail; scontrol() {{ printf 'node1\\nnode2\\n'; }}; {} echo $MASTER_ADDR $MASTER_PORT $TORCHELASTIC_RUN_ID",
                rendezvous_block()
            ))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("SLURM_JOB_NODELIST", "node[1-2]")
            .env("SLURM_JOB_ID", "12345")
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8(out.stdout).unwrap().trim(),
            "node1 32041 slurm-12345",
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
