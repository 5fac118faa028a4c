//! Several tasks' jobs as one job array: what must be equal for them to be one sbatch (their
//! *shape*), and the array's job description, whose script runs element `i`'s own script.
//!
//! A `flyte.map` sends one CreateTask per element, each rendered alone (`render`): the same
//! job but for its name, environment (its inputs, outputs, identity), log paths and script
//! (its header and marker path name it). [`shape`] blanks exactly those; jobs with the same
//! shape differ only in what an array element can set for itself. [`array_job`] makes the one
//! job: the shared fields once, the environment every element has in common in the job, and a
//! script that, on `SLURM_ARRAY_TASK_ID`, writes the element's own script to
//! `<working_dir>/<its job>.sh`, points stdout and stderr at its own files and runs it with its
//! own environment. So each element leaves what its task would have left as a job of its own
//! (logs, exit-status marker, outputs folder, all named by its job name), and the service reads
//! them as it reads any job's. The script is written to a file because the exit-status
//! preamble (`marker.rs`) runs the script again by its path (`$0`).

use std::collections::BTreeSet;

use crate::slurmrestd::JobDescription;

use super::error::RenderError;
use super::shell::quote;

/// The largest batch script slurmctld accepts by default (`SchedulerParameters=max_script_size`,
/// 4 MB): a batch's script stays below it.
pub const MAX_SCRIPT_BYTES: usize = 4 * 1024 * 1024;

/// What the scripts of one batch may add up to: 90 % of [`MAX_SCRIPT_BYTES`] (the dispatch
/// around them, and a margin).
pub const BATCH_SCRIPT_BYTES: usize = MAX_SCRIPT_BYTES / 10 * 9;

/// An element script longer than this is not coalesced: the array's script repeats each
/// element's, and a few such would fill [`MAX_SCRIPT_BYTES`].
pub const MAX_ELEMENT_SCRIPT_BYTES: usize = 256 * 1024;

/// What must be equal for jobs to be one array (everything but the per-element fields), as
/// text to compare and group by; `None` when the job cannot be an element: already an array,
/// a dependency (it names one job), a hold of its own, a multi-node job, or a script too long
/// or with an interpreter line `env` cannot run.
pub fn shape(job: &JobDescription) -> Option<String> {
    let several_nodes = job.nodes.as_deref().is_some_and(|n| n.trim() != "1");
    if job.array.is_some()
        || job.dependency.is_some()
        || job.hold.is_some()
        || several_nodes
        || job.script.len() > MAX_ELEMENT_SCRIPT_BYTES
        || interpreter(&job.script).is_none()
    {
        return None;
    }
    let mut blank = job.clone();
    blank.name.clear();
    blank.script.clear();
    blank.environment.clear();
    blank.standard_output = None;
    blank.standard_error = None;
    Some(serde_json::to_string(&blank).expect("plain data serializes"))
}

/// One element: its execution key and its own rendered job.
pub struct Member<'a> {
    pub key: &'a str,
    pub job: &'a JobDescription,
}

/// The job array of `members` (all of one [`shape`]; element `i` is `members[i]`), named
/// `name`, with `comment` (the packed keys, in one of them, `naming::KeysIn`, and the tasks' own
/// comment).
pub fn array_job(
    members: &[Member<'_>],
    name: &str,
    comment: String,
) -> Result<JobDescription, RenderError> {
    array_job_with_logs(members, name, comment, None)
}

/// [`array_job`], its own stdout and stderr named `logs` (file names in its working directory,
/// `naming::array_log_names`: they carry keys) instead of [`naming::ARRAY_LOGS`]'s. Each
/// element moves what Slurm wrote to such a file before its script began (Pyxis' import
/// messages) into its own log and removes the file, since the connector cannot tell a file
/// named by other tasks' keys from the element's meta, as it does for [`naming::ARRAY_LOGS`]'s.
///
/// [`naming::ARRAY_LOGS`]: super::naming::ARRAY_LOGS
pub fn array_job_with_logs(
    members: &[Member<'_>],
    name: &str,
    comment: String,
    logs: Option<(&str, &str)>,
) -> Result<JobDescription, RenderError> {
    let first = members.first().expect("a batch has an element").job;
    let mut job = first.clone();
    job.name = name.to_string();
    job.comment = Some(comment);
    job.array = Some(format!("0-{}", members.len() - 1));
    // Before an element's script runs (an image that cannot be imported, a node that cannot
    // start it), Slurm writes to the array's own files; each element's are its own after.
    let dir = first.current_working_directory.trim_end_matches('/');
    let array_logs = super::naming::ARRAY_LOGS;
    let (out, err) = match logs {
        Some((out, err)) => (format!("{dir}/{out}"), format!("{dir}/{err}")),
        None => (
            format!("{dir}/{array_logs}_%A_%a.out"),
            format!("{dir}/{array_logs}_%A_%a.err"),
        ),
    };
    // The files to move into the element's own logs: those named by keys (a name with `%A` is
    // [`ARRAY_LOGS`]'s, cleaned up from the element's meta).
    let moved: Vec<(String, u8)> = [(&out, 1), (&err, 2)]
        .into_iter()
        .filter(|(f, _)| logs.is_some() && !f.contains("%A"))
        .map(|(f, fd)| (f.clone(), fd))
        .collect();
    job.standard_output = Some(out);
    job.standard_error = Some(err);
    let common: BTreeSet<&(String, String)> = first
        .environment
        .iter()
        .filter(|e| members.iter().all(|m| m.job.environment.contains(e)))
        .collect();
    job.environment = first
        .environment
        .iter()
        .filter(|e| common.contains(e))
        .cloned()
        .collect();
    if job.environment.is_empty() {
        // slurmrestd refuses a job without environment.
        job.environment
            .push(("SLURM_CONNECTOR_ARRAY".into(), "1".into()));
    }
    let mut s = format!(
        "#!/bin/bash\n# slurm-connector: {} Flyte tasks as one job array; element i runs task i's \
         own script\ncase \"${{SLURM_ARRAY_TASK_ID:-}}\" in\n",
        members.len()
    );
    for (i, m) in members.iter().enumerate() {
        s.push_str(&branch(i, m, &common, &moved)?);
    }
    s.push_str(
        "*)\n  echo \"slurm-connector: this array has no element ${SLURM_ARRAY_TASK_ID:-}\" >&2\n  exit 1\n  ;;\nesac\n",
    );
    job.script = s;
    Ok(job)
}

/// The `case` branch of element `i`.
fn branch(
    i: usize,
    m: &Member<'_>,
    common: &BTreeSet<&(String, String)>,
    moved: &[(String, u8)],
) -> Result<String, RenderError> {
    let job = m.job;
    let file = format!(
        "{}/{}.sh",
        job.current_working_directory.trim_end_matches('/'),
        job.name
    );
    let mut end = format!("FLYTE_SLURM_ELEMENT_{i}_END");
    while job.script.lines().any(|l| l == end) {
        end.push('_');
    }
    let mut out = format!(
        "{i})\n  # task {}\n  cat > {} <<'{end}' || exit 1\n",
        m.key,
        quote(&file)?
    );
    out.push_str(&job.script);
    if !job.script.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&end);
    out.push('\n');
    let stdout = job.standard_output.as_deref().unwrap_or("/dev/null");
    match job.standard_error.as_deref() {
        Some(err) if err != stdout => {
            out.push_str(&format!("  exec >{} 2>{}\n", quote(stdout)?, quote(err)?));
        }
        _ => out.push_str(&format!("  exec >{} 2>&1\n", quote(stdout)?)),
    }
    for (file, fd) in moved {
        let f = quote(&file.replace("%a", &i.to_string()))?;
        out.push_str(&format!("  cat -- {f} >&{fd} 2>/dev/null; rm -f -- {f}\n"));
    }
    let mut words = vec!["env".to_string()];
    for (k, v) in &job.environment {
        if !common.contains(&(k.clone(), v.clone())) {
            words.push(quote(&format!("{k}={v}"))?);
        }
    }
    let (interp, arg) = interpreter(&job.script).expect("shape() checked it");
    words.push(quote(interp)?);
    if let Some(a) = arg {
        words.push(quote(a)?);
    }
    words.push(quote(&file)?);
    out.push_str(&format!("  exec {}\n  ;;\n", words.join(" ")));
    Ok(out)
}

/// The program the kernel would run the script with, and its one optional argument (Linux
/// passes everything after the interpreter as one word), from its `#!` line; `/bin/bash`
/// without one (the renderer adds it). `None` when `env` would take it for an assignment.
fn interpreter(script: &str) -> Option<(&str, Option<&str>)> {
    let Some(line) = script.lines().next().and_then(|l| l.strip_prefix("#!")) else {
        return Some(("/bin/bash", None));
    };
    let line = line.trim();
    let (interp, arg) = match line.split_once(char::is_whitespace) {
        Some((i, a)) => (i, Some(a.trim()).filter(|a| !a.is_empty())),
        None => (line, None),
    };
    (!interp.is_empty() && !interp.contains('=')).then_some((interp, arg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn element(dir: &str, name: &str, input: &str, script: &str) -> JobDescription {
        JobDescription {
            name: name.into(),
            script: script.into(),
            current_working_directory: dir.into(),
            environment: vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("FLYTE_INPUT_X".into(), input.into()),
            ],
            standard_output: Some(format!("{dir}/{name}.out")),
            standard_error: Some(format!("{dir}/{name}.err")),
            partition: Some("debug".into()),
            ..Default::default()
        }
    }

    #[test]
    fn only_the_per_element_fields_may_differ() {
        let a = element(
            "/w",
            "flyte-t-0000000000000001",
            "1",
            "#!/bin/bash\necho a\n",
        );
        let b = element(
            "/w",
            "flyte-t-0000000000000002",
            "2",
            "#!/bin/bash\necho b\n",
        );
        assert_eq!(shape(&a), shape(&b));
        assert!(shape(&a).is_some());
        let mut c = b.clone();
        c.partition = Some("gpu".into());
        assert_ne!(shape(&a), shape(&c), "another partition is another sbatch");
        for (why, f) in [
            (
                "array",
                (|j: &mut JobDescription| j.array = Some("0-3".into())) as fn(&mut JobDescription),
            ),
            ("dependency", |j| j.dependency = Some("afterok:1".into())),
            ("hold", |j| j.hold = Some(true)),
            ("nodes", |j| j.nodes = Some("2".into())),
            ("interpreter", |j| j.script = "#!/usr/bin/X=1 y\n".into()),
        ] {
            let mut j = a.clone();
            f(&mut j);
            assert_eq!(shape(&j), None, "{why}");
        }
    }

    #[test]
    fn interpreter_lines_run_as_the_kernel_would() {
        assert_eq!(interpreter("#!/bin/bash\n"), Some(("/bin/bash", None)));
        assert_eq!(
            interpreter("#!/usr/bin/env python3\n"),
            Some(("/usr/bin/env", Some("python3")))
        );
        assert_eq!(
            interpreter("#! /bin/bash -eu \n"),
            Some(("/bin/bash", Some("-eu")))
        );
        assert_eq!(interpreter("echo\n"), Some(("/bin/bash", None)));
    }

    /// The array's script, run by bash for each index as slurmstepd would, leaves each element's
    /// own output with its own environment; an unknown index fails.
    #[test]
    fn each_element_runs_its_own_script_with_its_own_environment_and_files() {
        let tmp = std::env::temp_dir().join(format!("coalesce-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        let dir = tmp.to_str().unwrap();
        let tricky = "it's \"$HOME\" `x`";
        let scripts = [
            "#!/bin/bash\necho \"out $FLYTE_INPUT_X $0\"\necho err >&2\nexit 3\n".to_string(),
            "#!/bin/bash -e\nprintf '%s\\n' \"$FLYTE_INPUT_X\"\ncat <<'FLYTE_SLURM_ELEMENT_1_END'\nliteral $x\nFLYTE_SLURM_ELEMENT_1_END\n"
            .to_string(),
            "#!/usr/bin/env python3\nimport os\nprint('py', os.environ['FLYTE_INPUT_X'])\n"
                .to_string(),
        ];
        let jobs: Vec<JobDescription> = scripts
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let input = if i == 1 {
                    tricky.to_string()
                } else {
                    i.to_string()
                };
                element(dir, &format!("flyte-t-000000000000000{i}"), &input, s)
            })
            .collect();
        let keys = ["k0", "k1", "k2"];
        let members: Vec<Member> = jobs
            .iter()
            .zip(keys)
            .map(|(job, key)| Member { key, job })
            .collect();
        let array = array_job(&members, "flyte-t-map", "c".into()).unwrap();
        assert_eq!(array.array.as_deref(), Some("0-2"));
        assert_eq!(
            array.environment,
            vec![("PATH".to_string(), "/usr/bin:/bin".to_string())]
        );
        assert_eq!(
            array.standard_output.as_deref(),
            Some(&*format!("{dir}/flyte-array_%A_%a.out")),
            "the array's own logs are not named by its elements (naming::ARRAY_LOGS)"
        );
        let script = tmp.join("array.sh");
        std::fs::write(&script, &array.script).unwrap();
        let run = |i: &str| {
            Command::new("/bin/bash")
                .arg(&script)
                .current_dir(dir)
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                .env("SLURM_ARRAY_TASK_ID", i)
                .status()
                .unwrap()
                .code()
        };
        let read = |f: &str| std::fs::read_to_string(tmp.join(f)).unwrap();
        assert_eq!(run("0"), Some(3), "element 0's own exit status");
        assert_eq!(
            read("flyte-t-0000000000000000.out"),
            format!("out 0 {dir}/flyte-t-0000000000000000.sh\n")
        );
        assert_eq!(read("flyte-t-0000000000000000.err"), "err\n");
        assert_eq!(run("1"), Some(0));
        assert_eq!(
            read("flyte-t-0000000000000001.out"),
            format!("{tricky}\nliteral $x\n")
        );
        if std::path::Path::new("/usr/bin/python3").exists() {
            assert_eq!(run("2"), Some(0));
            assert_eq!(read("flyte-t-0000000000000002.out"), "py 2\n");
        }
        assert_eq!(run("7"), Some(1), "no such element");
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    /// With its keys in its logs' file names, each element moves what Slurm wrote to them
    /// before its script began (Pyxis' import messages) into its own logs and removes them: no
    /// element meta names them for the retention sweep.
    #[test]
    fn an_element_moves_the_arrays_logs_named_by_keys_into_its_own() {
        let tmp = std::env::temp_dir().join(format!("coalesce-logs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        let dir = tmp.to_str().unwrap();
        let jobs: Vec<JobDescription> = (0..2)
            .map(|i| {
                let script = "#!/bin/bash\necho mine\necho own-err >&2\n";
                element(dir, &format!("flyte-t-000000000000000{i}"), "x", script)
            })
            .collect();
        let members: Vec<Member> = jobs
            .iter()
            .zip(["k0", "k1"])
            .map(|(job, key)| Member { key, job })
            .collect();
        let logs = ("flyte-keys=AAAAAAAAAAA.%a.out", "flyte-array_%A_%a.err");
        let array = array_job_with_logs(&members, "flyte-keys=x", "c".into(), Some(logs)).unwrap();
        assert_eq!(
            array.standard_output.as_deref(),
            Some(&*format!("{dir}/flyte-keys=AAAAAAAAAAA.%a.out"))
        );
        assert_eq!(
            array.standard_error.as_deref(),
            Some(&*format!("{dir}/flyte-array_%A_%a.err"))
        );
        // What slurmstepd would have opened and Pyxis written, for element 1.
        let array_out = tmp.join("flyte-keys=AAAAAAAAAAA.1.out");
        std::fs::write(&array_out, "pyxis: imported docker image\n").unwrap();
        let unnamed = tmp.join("flyte-array_9_1.err");
        std::fs::write(&unnamed, "").unwrap();
        let script = tmp.join("array.sh");
        std::fs::write(&script, &array.script).unwrap();
        let status = Command::new("/bin/bash")
            .arg(&script)
            .current_dir(dir)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("SLURM_ARRAY_TASK_ID", "1")
            .status()
            .unwrap();
        assert!(status.success());
        let read = |f: &str| std::fs::read_to_string(tmp.join(f)).unwrap();
        assert_eq!(
            read("flyte-t-0000000000000001.out"),
            "pyxis: imported docker image\nmine\n"
        );
        assert_eq!(read("flyte-t-0000000000000001.err"), "own-err\n");
        assert!(!array_out.exists(), "the file named by keys is gone");
        assert!(
            unnamed.exists(),
            "ARRAY_LOGS' files are the retention sweep's"
        );
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
