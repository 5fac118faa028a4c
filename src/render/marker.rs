//! The exit-status marker: the batch script leaves `<working_dir>/<job>.exit` (one line, written
//! to `.exit.tmp` and renamed) so a job that left slurmctld on a cluster without slurmdbd can
//! still be resolved (`crate::staging::exit_marker` reads it). The line is `<code> <signal>
//! <cause> <job>`: the script's exit status; the terminating signal the job received (`TERM` from
//! scancel or the time limit, `-` for none); `time_limit` when that signal came at or after
//! the job's end time (`SLURM_JOB_END_TIME`), `oom` when the job's cgroup recorded an OOM kill,
//! `-` otherwise; and the job's id (`SLURM_JOB_ID`, an array's `SLURM_ARRAY_JOB_ID`). So without
//! accounting a timeout, an OOM kill and a cancel are still told apart, and a job the connector
//! knows only by its name (a retried CreateTask, a deferred submit) is found by its marker.
//!
//! Design: the batch shell runs *the same script file* once more as a grandchild and only
//! records its exit status. The alternatives change what the task's script means: an `EXIT` trap
//! is replaced by the script's own `trap ... EXIT` and skipped by its `exec`, and wrapping the body
//! in `( ... )` makes bash parse the whole script before running a line. Re-running `$0` keeps
//! every semantic of the task's code — its shebang and options, `exec`, `set -e`, its traps and
//! `exit`, `$0`, arguments, stdin — because the child *is* the script, as Slurm would have run it.
//!
//! Three processes: the batch shell B, a recorder subshell R, the script S.
//! - R runs S in the foreground, then writes the marker (`.tmp` + `mv`) and exits with S's
//!   status. R *traps* (not ignores) the signals Slurm sends to every process of the step
//!   (scancel, time limit, `scancel -s`), so it outlives them and still records S's status, while
//!   S starts with them at their defaults (trapped signals are reset in children; ignored ones
//!   would be inherited). R is started with `&` so B can react to signals while it waits; stdin is
//!   passed on explicitly (an `&` command would read /dev/null) and INT/QUIT, which bash ignores in
//!   `&` commands, are trapped in R so S gets them back at their defaults.
//! - B ignores those signals (R and S were started before, so they do not inherit that) and
//!   forwards USR1/USR2 to S (`pkill -P <R>`, procps): `--signal=B:USR1@60` signals the batch
//!   shell alone, and the usual "checkpoint before the time limit" pattern must keep reaching the
//!   task's script. Without pkill on the node only that forwarding is lost.
//! - B exits with S's status. A `wait` interrupted by a forwarded signal may lose it (bash reports
//!   -1 when the child ends during the handler); then the marker R wrote is read back.
//! - A script killed by signal N makes the job exit with 128+N rather than signal N; the job state
//!   is the same (FAILED), and scancel / the time limit are resolved by Slurm itself
//!   (CANCELLED / TIMEOUT) whatever the batch shell exits with.
//!
//! Scripts with a non-shell interpreter (`#!/usr/bin/env python3`) are kept byte for byte and get
//! no marker: on a cluster without slurmdbd such a job that ages out of slurmctld between polls
//! is reported lost, as before.

use super::error::RenderError;
use super::shell::quote;

/// Set in the child's environment only while it starts; the child unsets it at once.
pub const CHILD_VAR: &str = "SLURM_CONNECTOR_MARKER_CHILD";

/// `path` as a shell word: quoted, with a `%a` (a job array's element marker) left to the
/// shell as the element's index, so every element writes its own marker.
fn shell_path(path: &str) -> Result<String, RenderError> {
    let parts: Result<Vec<String>, RenderError> = path.split("%a").map(quote).collect();
    Ok(parts?.join("\"${SLURM_ARRAY_TASK_ID}\""))
}

/// The block that goes first in the script body (after the shebang and `#SBATCH` block).
pub fn preamble(marker_path: &str) -> Result<String, RenderError> {
    let marker = shell_path(marker_path)?;
    let tmp = shell_path(&format!("{marker_path}.tmp"))?;
    Ok(format!(
        r#"# slurm-connector: exit-status marker for clusters without slurmdbd. This shell runs the
# script below as a grandchild, unchanged, and the subshell records its exit status in {marker}.
if [ -z "${{{CHILD_VAR}:-}}" ]; then
  # Shebang options (`#!/bin/bash -eu`) apply to this shell too; they must not stop it recording.
  set +e +u
  (
    # The first terminating signal, and whether it was the time limit's (Slurm sends TERM to
    # every process of the step for scancel and for the time limit alike).
    __sc_term=- __sc_cause=-
    __sc_got() {{
      [ "$__sc_term" = - ] || return 0
      __sc_term=$1
      if [ -n "${{SLURM_JOB_END_TIME:-}}" ] && [ "$(date +%s)" -ge "$SLURM_JOB_END_TIME" ]; then
        __sc_cause=time_limit
      fi
    }}
    for __sc_s in HUP INT QUIT TERM ALRM; do trap "__sc_got $__sc_s" "$__sc_s"; done
    trap ':' USR1 USR2
    if [ -x "$0" ]; then {CHILD_VAR}=1 "$0" "$@"; else {CHILD_VAR}=1 /bin/bash "$0" "$@"; fi
    __sc_rc=$?
    # The kernel's OOM killer leaves its count in the cgroup (cgroup v2, task/cgroup).
    __sc_cg=$(sed -n 's/^0:://p' /proc/self/cgroup 2>/dev/null)
    if [ -n "$__sc_cg" ] && grep -qs '^oom_kill [1-9]' "/sys/fs/cgroup$__sc_cg/memory.events"; then
      __sc_cause=oom
    fi
    # The job's id last (an array element's: the array's), so a job can be found by its name
    # once it has left slurmctld: its marker says which job it was.
    {{ printf '%s %s %s %s\n' "$__sc_rc" "$__sc_term" "$__sc_cause" "${{SLURM_ARRAY_JOB_ID:-${{SLURM_JOB_ID:--}}}}" > {tmp} && mv -f -- {tmp} {marker}; }} \
      || echo "slurm-connector: could not write the exit-status marker" {marker} >&2
    exit "$__sc_rc"
  ) <&0 &
  __sc_pid=$!
  trap '' HUP INT QUIT TERM ALRM
  trap '__sc_sig=1; pkill -USR1 -P "$__sc_pid"' USR1
  trap '__sc_sig=1; pkill -USR2 -P "$__sc_pid"' USR2
  while :; do
    __sc_sig=
    wait "$__sc_pid"; __sc_rc=$?
    [ -n "$__sc_sig" ] || break
  done
  case "$__sc_rc" in ''|*[!0-9]*) read -r __sc_rc __sc_rest 2>/dev/null < {marker} || __sc_rc=1 ;; esac
  exit "$__sc_rc"
fi
unset {CHILD_VAR}
"#
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::path::Path;
    use std::process::{Command, Stdio};

    /// Writes `body` after a shebang and the preamble, runs it, returns (exit code, marker).
    fn run(dir: &Path, name: &str, body: &str, stdin: &str) -> (Option<i32>, Option<String>) {
        run_with(dir, name, "#!/bin/bash", body, stdin)
    }

    fn run_with(
        dir: &Path,
        name: &str,
        shebang: &str,
        body: &str,
        stdin: &str,
    ) -> (Option<i32>, Option<String>) {
        let marker = dir.join(format!("{name}.exit"));
        let script = format!(
            "{shebang}\n#SBATCH -t 1\n{}{body}",
            preamble(marker.to_str().unwrap()).unwrap()
        );
        let path = dir.join(name);
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        let mut child = spawn_written(
            Command::new(&path)
                .current_dir(dir)
                .env("SLURM_JOB_ID", "77")
                .env_remove("SLURM_ARRAY_JOB_ID")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped()),
        );
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let got = std::fs::read_to_string(&marker).ok();
        assert!(!dir.join(format!("{name}.exit.tmp")).exists());
        (out.status.code(), got)
    }

    /// Spawns a script the test has just written. ETXTBSY: another test thread's spawn forked
    /// while this file was still open for writing (the fd lives in that child until its exec
    /// closes it). The file is complete and the exec succeeds a moment later; a loaded machine
    /// makes it likely. The mock's job runner retries the same way.
    fn spawn_written(cmd: &mut Command) -> std::process::Child {
        for attempt in 1..=20 {
            match cmd.spawn() {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                    std::thread::sleep(std::time::Duration::from_millis(5 * attempt))
                }
                spawned => return spawned.unwrap(),
            }
        }
        cmd.spawn().unwrap()
    }

    fn signal(args: &[&str]) {
        assert!(Command::new("kill").args(args).status().unwrap().success());
    }

    fn tmp() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!(
            "marker-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_marker_holds_the_scripts_exit_status_whatever_the_script_does() {
        let d = tmp();
        let cases: &[(&str, &str, i32)] = &[
            ("plain", "echo hi\n", 0),
            ("exit3", "exit 3\n", 3),
            // `set -e` stops the child at the failing command, as it would the batch shell.
            ("sete", "set -e\nfalse\necho not reached\nexit 0\n", 1),
            // `exec` replaces the child; the outer shell still sees its status.
            ("exec", "exec /bin/sh -c 'exit 42'\n", 42),
            // The script's own EXIT trap runs and may change the status, as without the marker.
            ("trap", "trap 'exit 9' EXIT\necho x\n", 9),
            ("undef", "set -u\necho $NOPE\n", 1),
        ];
        for (name, body, want) in cases {
            let (code, marker) = run(&d, name, body, "");
            assert_eq!(code, Some(*want), "{name}: exit status");
            assert_eq!(
                marker.as_deref(),
                Some(format!("{want} - - 77\n").as_str()),
                "{name}"
            );
            crate::staging::exit_marker::parse_marker(marker.unwrap().as_bytes()).unwrap();
        }
        std::fs::remove_dir_all(&d).ok();
    }

    /// A job array's elements run the same script: `%a` in the marker's path is each
    /// element's index, so they never write (or rename over) each other's.
    #[test]
    fn each_array_element_writes_its_own_marker() {
        let d = tmp();
        let pattern = d.join("arr_%a.exit");
        let script = format!(
            "#!/bin/bash\n{}exit $((SLURM_ARRAY_TASK_ID + 1))\n",
            preamble(pattern.to_str().unwrap()).unwrap()
        );
        let path = d.join("arr");
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        for i in [0, 7] {
            let st = spawn_written(
                Command::new(&path)
                    .env("SLURM_ARRAY_TASK_ID", i.to_string())
                    .env("SLURM_ARRAY_JOB_ID", "70")
                    .env("SLURM_JOB_ID", (71 + i).to_string()),
            )
            .wait()
            .unwrap();
            assert_eq!(st.code(), Some(i + 1));
        }
        for i in [0, 7] {
            assert_eq!(
                std::fs::read_to_string(d.join(format!("arr_{i}.exit"))).unwrap(),
                format!("{} - - 70\n", i + 1),
                "an element's marker names the array's id, the one the connector tracks"
            );
        }
        assert!(!d.join("arr_%a.exit").exists());
        // Outside Slurm (no job id in the environment) the field is `-`.
        let st = spawn_written(
            Command::new(&path)
                .env("SLURM_ARRAY_TASK_ID", "3")
                .env_remove("SLURM_ARRAY_JOB_ID")
                .env_remove("SLURM_JOB_ID"),
        )
        .wait()
        .unwrap();
        assert_eq!(st.code(), Some(4));
        assert_eq!(
            std::fs::read_to_string(d.join("arr_3.exit")).unwrap(),
            "4 - - -\n"
        );
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn shebang_options_and_other_shells() {
        let d = tmp();
        let cases: &[(&str, &str, &str, i32)] = &[
            // `-e` from the shebang: the script stops at `false`; the marker is still written.
            ("bash-e", "#!/bin/bash -eu", "false\nexit 0\n", 1),
            ("bash-x", "#!/bin/bash -x", "exit 6\n", 6),
            ("sh", "#!/bin/sh", "exit 4\n", 4),
            ("sh-e", "#!/bin/sh -e", "false\nexit 0\n", 1),
            ("env-bash", "#!/usr/bin/env bash", "exit 0\n", 0),
        ];
        for (name, shebang, body, want) in cases {
            let (code, marker) = run_with(&d, name, shebang, body, "");
            assert_eq!(code, Some(*want), "{name}: exit status");
            assert_eq!(
                marker.as_deref(),
                Some(format!("{want} - - 77\n").as_str()),
                "{name}"
            );
        }
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn the_script_keeps_its_stdin_arguments_and_environment() {
        let d = tmp();
        // The wrapper ignores INT while it waits; the script must get the disposition its
        // starter gave, not the wrapper's. That is whatever this test process passes on: a
        // shell started in the background (`cmd &`, as CI may be) already ignores INT.
        let baseline = Command::new("bash")
            .args(["-c", "trap -p INT"])
            .output()
            .unwrap()
            .stdout;
        std::fs::write(d.join("int-baseline"), baseline).unwrap();
        let body = "read -r line\n[ \"$line\" = hello ] || exit 5\n\
                    [ -z \"${SLURM_CONNECTOR_MARKER_CHILD:-}\" ] || exit 6\n\
                    case \"$0\" in */stdin) ;; *) exit 7;; esac\n\
                    [ \"$(trap -p INT)\" = \"$(cat int-baseline)\" ] || exit 8\nexit 0\n";
        let (code, marker) = run(&d, "stdin", body, "hello\n");
        assert_eq!((code, marker.as_deref()), (Some(0), Some("0 - - 77\n")));
        std::fs::remove_dir_all(&d).ok();
    }

    /// Starts `body` in its own process group, signals it once it started, returns (exit, marker).
    fn signalled(
        d: &Path,
        name: &str,
        body: &str,
        kill_args: &dyn Fn(u32) -> Vec<String>,
    ) -> (Option<i32>, String) {
        signalled_env(d, name, body, kill_args, &[])
    }

    fn signalled_env(
        d: &Path,
        name: &str,
        body: &str,
        kill_args: &dyn Fn(u32) -> Vec<String>,
        env: &[(&str, String)],
    ) -> (Option<i32>, String) {
        let marker = d.join(format!("{name}.exit"));
        let started = d.join(format!("{name}.started"));
        let path = d.join(name);
        let body = format!("echo > {}\n{body}", started.display());
        std::fs::write(
            &path,
            format!(
                "#!/bin/bash\n{}{body}",
                preamble(marker.to_str().unwrap()).unwrap()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        let child = spawn_written(
            Command::new(&path)
                .current_dir(d)
                .env("SLURM_JOB_ID", "77")
                .env_remove("SLURM_ARRAY_JOB_ID")
                .envs(env.iter().map(|(k, v)| (k, v)))
                .process_group(0),
        );
        for _ in 0..200 {
            if started.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        let args = kill_args(child.id());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        signal(&args);
        let out = child.wait_with_output().unwrap();
        (
            out.status.code(),
            std::fs::read_to_string(&marker).unwrap_or_default(),
        )
    }

    #[test]
    fn signals_reach_the_script_and_leave_a_marker() {
        let d = tmp();
        let usr1 = "trap 'exit 11' USR1\nwhile :; do sleep 0.1; done\n";
        // `--signal=B:USR1` / `scancel -b -s USR1`: only the batch shell is signalled.
        let only_batch = |pid: u32| vec!["-USR1".to_string(), pid.to_string()];
        // `scancel -s USR1`: every process of the step.
        let group = |sig: &str| {
            let sig = sig.to_string();
            move |pid: u32| vec![sig.clone(), "--".to_string(), format!("-{pid}")]
        };
        assert_eq!(
            signalled(&d, "b", usr1, &only_batch),
            (Some(11), "11 - - 77\n".into())
        );
        assert_eq!(
            signalled(&d, "g", usr1, &group("-USR1")),
            (Some(11), "11 - - 77\n".into())
        );
        // scancel / time limit: TERM to every process; the script's own TERM trap runs.
        let plain = "while :; do sleep 0.1; done\n";
        assert_eq!(
            signalled(&d, "t", plain, &group("-TERM")),
            (Some(143), "143 TERM - 77\n".into())
        );
        let trapped = "trap 'exit 21' TERM\nwhile :; do sleep 0.1; done\n";
        assert_eq!(
            signalled(&d, "tt", trapped, &group("-TERM")),
            (Some(21), "21 TERM - 77\n".into())
        );
        // The time limit: the same TERM, at or after the end time Slurm gave the job.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let ended = [("SLURM_JOB_END_TIME", (now - 1).to_string())];
        assert_eq!(
            signalled_env(&d, "tl", plain, &group("-TERM"), &ended),
            (Some(143), "143 TERM time_limit 77\n".into())
        );
        // scancel before the end time is a cancel, not a timeout.
        let later = [("SLURM_JOB_END_TIME", (now + 3600).to_string())];
        assert_eq!(
            signalled_env(&d, "tc", plain, &group("-TERM"), &later),
            (Some(143), "143 TERM - 77\n".into())
        );
        std::fs::remove_dir_all(&d).ok();
    }
}
