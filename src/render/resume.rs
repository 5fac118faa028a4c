//! A requeued run resumes from the checkpoint its own attempt saved.
//!
//! Flyte's SDKs read a checkpoint from `--prev-checkpoint` (the previous *Flyte attempt's*
//! prefix; empty on a first attempt) and write to `--checkpoint-path` (this attempt's). When Slurm
//! requeues a job (a preemption, a node failure), the same attempt runs again with the same
//! arguments, so `flyte.Checkpoint.load()` would read the earlier attempt's checkpoint, or none,
//! and the work saved before the preemption would be lost. On a run with
//! `SLURM_RESTART_COUNT` > 0 the entrypoint gets `--prev-checkpoint <its --checkpoint-path>`:
//! from the checkpoint's point of view a requeued run is the next attempt, as Flyte does between
//! two retries (a run preempted before it saved anything then starts from scratch, as a retry
//! after an attempt that saved nothing does).
//!
//! Done in the shell that execs the entrypoint, by position: the value is never re-quoted or
//! re-parsed, whatever it holds. The count is read by the batch shell, outside the container,
//! and handed in as the first argument ([`RESTART_COUNT_WORD`]): a container runtime may clear
//! the environment (`apptainer exec --cleanenv`).

/// The word, unquoted in the batch script, that passes the run's restart count to [`shim`]
/// (`bash -c '<shim>...' -- <this> command...`).
pub const RESTART_COUNT_WORD: &str = r#""${SLURM_RESTART_COUNT:-0}""#;

/// The shell fragment (ending in `; `) that takes the restart count off `"$@"` and, on a
/// requeued run, swaps the `--prev-checkpoint` value for the `--checkpoint-path` value, for an
/// entrypoint `command` run as `bash -c '<fragment>...' -- <count> command...` (after the
/// fragment's `shift`, `command[i]` is `${i+1}`); `None` when the command does not take both
/// flags.
pub fn shim(command: &[String]) -> Option<String> {
    let value_of = |flag: &str| {
        command
            .iter()
            .position(|w| w == flag)
            .map(|i| i + 1)
            .filter(|&v| v < command.len())
    };
    let ckpt = value_of("--checkpoint-path")?;
    let prev = value_of("--prev-checkpoint")?;
    // Positional parameters are 1-based: command[i] is ${i+1}.
    let (ckpt, prev) = (ckpt + 1, prev + 1);
    Some(format!(
        r#"__sc_restart=$1; shift; if [ "$__sc_restart" -gt 0 ]; then set -- "${{@:1:{before}}}" "${{{ckpt}}}" "${{@:{after}}}"; fi; "#,
        before = prev - 1,
        after = prev + 1,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    /// The fragment run as the native script runs it (the batch shell expands the count word,
    /// the container's bash runs the fragment), printing the arguments it execs.
    fn run(command: &[String], restart: Option<&str>) -> Vec<String> {
        let fragment = shim(command).expect("both flags");
        let inner = crate::render::shell::quote(&format!(r#"{fragment}printf '%s\n' "$@""#));
        let words = crate::render::shell::join(command).unwrap();
        let line = format!("bash -c {} -- {RESTART_COUNT_WORD} {words}", inner.unwrap());
        let mut cmd = Command::new("bash");
        cmd.arg("-c").arg(line).env_remove("SLURM_RESTART_COUNT");
        if let Some(r) = restart {
            cmd.env("SLURM_RESTART_COUNT", r);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn a_requeued_run_reads_its_own_attempts_checkpoint() {
        // flyte 2.12's a0 arguments as the backend renders them; an awkward path on purpose.
        let a0 = words(&[
            "a0",
            "--inputs",
            "s3://b/in/inputs.pb",
            "--checkpoint-path",
            "s3://b/o/1/_flytecheckpoints 'x' $y",
            "--prev-checkpoint",
            "",
            "--name",
            "n",
        ]);
        assert_eq!(run(&a0, None), a0, "a first run is untouched");
        assert_eq!(run(&a0, Some("0")), a0);
        let mut resumed = a0.clone();
        resumed[6] = a0[4].clone();
        assert_eq!(run(&a0, Some("1")), resumed);
        assert_eq!(run(&a0, Some("3")), resumed);
    }

    #[test]
    fn either_order_and_a_prev_checkpoint_first_or_last() {
        let c = words(&[
            "--prev-checkpoint",
            "s3://b/o/0/ck",
            "--checkpoint-path",
            "s3://b/o/1/ck",
        ]);
        assert_eq!(
            run(&c, Some("1")),
            words(&[
                "--prev-checkpoint",
                "s3://b/o/1/ck",
                "--checkpoint-path",
                "s3://b/o/1/ck"
            ])
        );
        let c = words(&["x", "--checkpoint-path", "ck", "--prev-checkpoint", "p"]);
        assert_eq!(
            run(&c, Some("2")),
            words(&["x", "--checkpoint-path", "ck", "--prev-checkpoint", "ck"])
        );
    }

    #[test]
    fn without_both_flags_there_is_nothing_to_swap() {
        assert_eq!(shim(&words(&["a0", "--checkpoint-path", "ck"])), None);
        assert_eq!(shim(&words(&["a0", "--prev-checkpoint", ""])), None);
        assert_eq!(
            shim(&words(&[
                "a0",
                "--checkpoint-path",
                "ck",
                "--prev-checkpoint"
            ])),
            None
        );
        assert_eq!(shim(&words(&["python", "train.py"])), None);
    }
}
