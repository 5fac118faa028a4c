//! The batch script text. Every value that reaches the shell is quoted (`shell.rs`);
//! environment values never appear here at all — they travel in the JSON `environment`.

use super::custom::{ContainerConfig, Runtime};
use super::error::RenderError;
use super::shell::{join, quote};

/// Re-derives the virtualenv's bin inside the container (Enroot resets PATH), then runs the
/// entrypoint with the arguments after `--`.
pub const PATH_SHIM: &str = r#"export PATH="${VIRTUAL_ENV:+$VIRTUAL_ENV/bin:}$PATH"; exec "$@""#;

/// USER and HOME for a job without a login shell, from the passwd entry of the job's user.
const USER_HOME: &str = "# A REST-submitted job has no login shell: derive USER and HOME on the node.\n\
export USER=\"${USER:-${SLURM_JOB_USER:-$(id -un)}}\"\n\
export HOME=\"${HOME:-$(getent passwd \"$USER\" | cut -d: -f6)}\"\n";

/// `module` is a shell function a login shell defines; a REST job has none, so source the first
/// init script present, then load each module (failing the job if one cannot be loaded).
fn modules_block(modules: &[String], init_scripts: &[String]) -> Result<String, RenderError> {
    if modules.is_empty() {
        return Ok(String::new());
    }
    let mut s = String::from(
        "# Environment modules: a REST job inherits no `module` function, so initialise it here.\n\
         if ! type module >/dev/null 2>&1; then\n  for __init in",
    );
    for f in init_scripts {
        s.push(' ');
        s.push_str(&quote(f)?);
    }
    s.push_str("; do\n    if [ -r \"$__init\" ]; then . \"$__init\"; break; fi\n  done\nfi\n");
    for m in modules {
        if m.is_empty()
            || m.starts_with('-')
            || m.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(RenderError::config(
                "modules",
                format!(
                    "`{}` is not a module name (no whitespace, must not start with -)",
                    m.escape_default()
                ),
            ));
        }
        let q = quote(m)?;
        let msg = quote(&format!("slurm-connector: module load {m} failed"))?;
        s.push_str(&format!(
            "module load {q} || {{ echo {msg} >&2; exit 1; }}\n"
        ));
    }
    Ok(s)
}

/// Pyxis wants `registry#image:tag` when the first component is a registry host.
pub fn pyxis_image(image: &str) -> String {
    if image.starts_with('/')
        || image.starts_with("./")
        || image.contains('#')
        || image.contains("://")
    {
        return image.to_string();
    }
    match image.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            format!("{first}#{rest}")
        }
        _ => image.to_string(),
    }
}

/// Apptainer wants a URI; local `.sif` files, sandbox folders and refs with a scheme stay as given.
pub fn apptainer_image(image: &str) -> String {
    if image.starts_with('/')
        || image.starts_with("./")
        || image.ends_with(".sif")
        || image.contains("://")
    {
        image.to_string()
    } else {
        format!("docker://{image}")
    }
}

/// Everything the native script needs.
pub struct NativeParts<'a> {
    pub header: &'a str,
    pub container: &'a ContainerConfig,
    pub image: &'a str,
    /// `image` is a pre-staged file the image map chose: the script checks it exists first.
    pub staged_image: Option<&'a crate::config::images::StagedImage>,
    /// Pyxis: the names of the job's variables that must win over the image's own
    /// (`--container-env`): everything but the node's base environment.
    pub container_env: &'a [String],
    pub command: &'a [String],
    pub modules: &'a [String],
    pub module_init_scripts: &'a [String],
    pub gpus_requested: bool,
    /// Local folders to create before the entrypoint runs (a `file://` output prefix).
    pub mkdirs: &'a [String],
    /// Cluster path of the exit-status marker (`super::marker`).
    pub exit_marker: &'a str,
    /// Several ranks (a clustered task, or a `slurm` task asking for several nodes or tasks):
    /// srun starts one per task of the allocation with the rendezvous environment
    /// (`super::ranks`) instead of the one-process pin.
    pub ranks: bool,
}

/// Native task: `set -euo pipefail`, module loads, then the entrypoint pinned to one process
/// (or, with `ranks`, once per task of the allocation).
pub fn native(p: &NativeParts) -> Result<String, RenderError> {
    let c = p.container;
    if p.image.starts_with('-') {
        return Err(RenderError::Container(format!(
            "image `{}` must not start with `-`",
            p.image
        )));
    }
    for a in &c.srun_args {
        let name = a.split('=').next().unwrap_or(a);
        if ["--nodes", "-N", "--ntasks", "-n"].contains(&name)
            || a.starts_with("-N")
            || a.starts_with("-n")
        {
            return Err(RenderError::config(
                "container.srun_args",
                if p.ranks {
                    format!(
                        "`{a}`: the ranks are the job's own tasks (srun starts one per task of the \
                         allocation); set `sbatch.nodes` / `sbatch.ntasks` instead"
                    )
                } else {
                    format!(
                        "`{a}` would undo the one-process pin (srun --nodes=1 --ntasks=1) and start the \
                         entrypoint several times; set `sbatch.nodes` / `sbatch.ntasks` for a multi-rank \
                         task (every rank gets RANK, WORLD_SIZE, MASTER_ADDR, ...)"
                    )
                },
            ));
        }
    }
    for m in &c.mounts {
        if m.contains(',') || m.is_empty() {
            return Err(RenderError::config(
                "container.mounts",
                format!("`{m}`: one mount per entry, no commas"),
            ));
        }
    }
    if let Some(w) = &c.workdir
        && !w.starts_with('/')
    {
        return Err(RenderError::config(
            "container.workdir",
            format!("`{w}` must be an absolute path"),
        ));
    }
    if p.command.is_empty() {
        return Err(RenderError::Container(
            "the task template's container has no command or args to run".into(),
        ));
    }

    let mut words: Vec<String> = vec!["srun".into()];
    if p.ranks {
        words.extend(super::ranks::SRUN_OPTIONS.iter().map(|s| s.to_string()));
    } else {
        words.extend(["--nodes=1".into(), "--ntasks=1".into()]);
    }
    words.extend(c.srun_args.iter().cloned());
    match c.runtime {
        Runtime::Pyxis => {
            words.push(format!("--container-image={}", pyxis_image(p.image)));
            // Pyxis 0.24 + Enroot 4.1.2 (`tests/real_pyxis.rs`): the job's variables reach the container,
            // but a variable the image also defines (its /etc/environment, Docker's ENV) keeps
            // the image's value unless named here; PATH and LANG stay the image's (the node's
            // PATH means nothing inside it). Names only: values travel in the environment.
            if !p.container_env.is_empty() {
                words.push(format!("--container-env={}", p.container_env.join(",")));
            }
            if !c.mounts.is_empty() {
                words.push(format!("--container-mounts={}", c.mounts.join(",")));
            }
            if let Some(w) = &c.workdir {
                words.push(format!("--container-workdir={w}"));
            }
            words.extend(c.args.iter().cloned());
        }
        Runtime::Apptainer => {
            // -q: no runtime notices (e.g. "INFO: gocryptfs not found") in the task's stderr.
            words.extend(["apptainer".into(), "-q".into(), "exec".into()]);
            let explicit_gpu = c.args.iter().any(|a| a == "--nv" || a == "--rocm");
            if p.gpus_requested && !explicit_gpu {
                words.push("--nv".into());
            }
            if !c.mounts.is_empty() {
                words.extend(["--bind".to_string(), c.mounts.join(",")]);
            }
            if let Some(w) = &c.workdir {
                words.extend(["--pwd".to_string(), w.clone()]);
            }
            words.extend(c.args.iter().cloned());
            words.push(apptainer_image(p.image));
        }
    }
    // Inside the container, before the entrypoint: a requeued run's checkpoint, the ranks'
    // variables, the virtualenv's PATH.
    let resume = super::resume::shim(p.command);
    let mut shim = resume.clone().unwrap_or_default();
    if p.ranks {
        shim.push_str(super::ranks::RANK_SHIM);
    }
    shim.push_str(PATH_SHIM);
    words.extend(["bash".to_string(), "-c".to_string(), shim, "--".to_string()]);
    // The restart count is the one word the batch shell expands (unquoted on purpose).
    let srun_line = match resume {
        Some(_) => format!(
            "{} {} {}",
            join(&words)?,
            super::resume::RESTART_COUNT_WORD,
            join(p.command)?
        ),
        None => {
            words.extend(p.command.iter().cloned());
            join(&words)?
        }
    };

    let mut s = String::from("#!/bin/bash\n");
    s.push_str(p.header);
    s.push_str(&super::marker::preamble(p.exit_marker)?);
    s.push_str("set -euo pipefail\n");
    s.push_str(USER_HOME);
    if !p.modules.is_empty() {
        // Module init scripts and the module function read unset variables.
        s.push_str("set +u\n");
        s.push_str(&modules_block(p.modules, p.module_init_scripts)?);
        s.push_str("set -u\n");
    }
    for d in p.mkdirs {
        s.push_str(&format!("mkdir -p -- {}\n", quote(d)?));
    }
    if let Some(st) = p.staged_image {
        // Where the connector could not see the file (no staging, or outside its roots), the
        // job says what is missing rather than the runtime's own error.
        let msg = format!(
            "slurm-connector: the pre-staged image {} (mapped from `{}` by the image rule `{}`) does not exist on this node; stage it there or fix the rule",
            st.path, st.reference, st.pattern
        );
        s.push_str(&format!(
            "if [ ! -e {} ]; then echo {} >&2; exit 1; fi\n",
            quote(&st.path)?,
            quote(&msg)?
        ));
    }
    if p.ranks {
        s.push_str(&super::ranks::rendezvous_block());
    }
    s.push_str(&srun_line);
    s.push('\n');
    Ok(s)
}

/// Where a Flyte 1 `slurm_fn` task's `script` runs the task (flytekitplugins-slurm's placeholder).
pub const TASK_FN: &str = "{task.fn}";

/// A Flyte 1 `slurm_fn` task's batch script: its `script` with [`TASK_FN`] replaced by the
/// entrypoint, or the entrypoint alone under `#!/bin/bash -i` as the published plugin writes it
/// (an interactive bash reads `~/.bashrc`, where a cluster's users set up the Python that has
/// flytekit). Every word is quoted and empty ones are kept: the plugin's `" ".join(args)` lost
/// them, so `--prev-checkpoint ""` swallowed the flag after it.
pub fn function_script(script: Option<&str>, entrypoint: &[String]) -> Result<String, RenderError> {
    if entrypoint.is_empty() {
        return Err(RenderError::Container(
            "the task template's container has no args to run (a slurm_fn task runs its \
             `pyflyte-execute ...` entrypoint)"
                .into(),
        ));
    }
    let command = join(entrypoint)?;
    match script.filter(|s| !s.trim().is_empty()) {
        None => Ok(format!("#!/bin/bash -i\n{command}\n")),
        Some(s) if s.contains(TASK_FN) => Ok(s.replace(TASK_FN, &command)),
        Some(_) => Err(RenderError::config(
            "script",
            format!(
                "has no `{TASK_FN}`, so the task's function would never run; put `{TASK_FN}` on the \
                 line where it should run, or remove `script`"
            ),
        )),
    }
}

/// The interpreter named by a shebang line is a POSIX-style shell we can add lines for.
fn is_shell_shebang(first_line: &str) -> bool {
    let Some(rest) = first_line.strip_prefix("#!") else {
        return false;
    };
    let mut words = rest.split_whitespace();
    let Some(mut prog) = words.next() else {
        return false;
    };
    if prog.ends_with("/env") {
        prog = match words.find(|w| !w.starts_with('-')) {
            Some(p) => p,
            None => return false,
        };
    }
    let base = prog.rsplit('/').next().unwrap_or(prog);
    ["sh", "bash", "dash", "ksh", "zsh", "ash", "mksh"].contains(&base)
}

/// What the connector inserts into a script task's script (see [`script_task`]).
pub struct Preamble<'a> {
    /// The line the user's first command is on (1-based): the preamble goes before it.
    pub first_command_line: usize,
    /// USER/HOME and the like, already rendered.
    pub header: &'a str,
    pub modules: &'a [String],
    pub module_init_scripts: &'a [String],
    /// Folders made before the script runs.
    pub mkdirs: &'a [String],
    /// Where the exit-status marker goes.
    pub exit_marker: &'a str,
    /// The script's arguments (`batch_script_args`), set with `set --`.
    pub args: &'a [String],
}

/// Script task: the user's script as written, with what the connector needs inserted after its
/// leading comment/directive block (so the block stays readable by sbatch, and nothing runs
/// before the user's own shebang takes effect): USER/HOME, modules, output folders.
pub fn script_task(user_script: &str, p: &Preamble<'_>) -> Result<String, RenderError> {
    let &Preamble {
        first_command_line,
        header,
        modules,
        module_init_scripts,
        mkdirs,
        exit_marker,
        args,
    } = p;
    if user_script.contains('\0') {
        return Err(RenderError::config("script", "contains a NUL byte"));
    }
    let lines: Vec<&str> = user_script.split('\n').collect();
    let has_shebang = lines.first().is_some_and(|l| l.starts_with("#!"));
    let shell = !has_shebang || is_shell_shebang(lines[0]);
    let mut preamble = String::from(header);
    if !args.is_empty() {
        if !shell {
            return Err(RenderError::config(
                "batch_script_args",
                format!(
                    "the script's interpreter `{}` is not a shell, and slurmrestd takes a script body \
                     without arguments, so the connector passes them with `set --`, which only a shell \
                     reads; use a bash script that execs your program with \"$@\"",
                    lines[0].trim_start_matches("#!").trim()
                ),
            ));
        }
        // Before the marker's block, which runs the script again as its grandchild with "$@":
        // the arguments `sbatch script ARGS` would have given it, in both shells.
        preamble.push_str(&format!("set -- {}\n", join(args)?));
    }
    if shell {
        // First, so the child (the task's script as written) starts right after it.
        preamble.push_str(&super::marker::preamble(exit_marker)?);
        preamble.push_str(USER_HOME);
        preamble.push_str(&modules_block(modules, module_init_scripts)?);
        for d in mkdirs {
            preamble.push_str(&format!("mkdir -p -- {}\n", quote(d)?));
        }
    } else if !modules.is_empty() || !mkdirs.is_empty() {
        return Err(RenderError::config(
            "script",
            format!(
                "the interpreter `{}` is not a shell, so the connector cannot load `modules` or create the \
                 output folder before it runs; use a bash script (it can exec your program), or drop `modules` \
                 and use output_upload=\"job\"",
                lines[0].trim_start_matches("#!").trim()
            ),
        ));
    }
    preamble.push_str(
        "# --- end of slurm-connector preamble; the task's script follows as written ---\n",
    );

    let mut out = String::new();
    if !has_shebang {
        // sbatch refuses a script without `#!`; the published plugin ran such scripts under bash.
        out.push_str("#!/bin/bash\n");
    }
    let split = first_command_line.min(lines.len());
    let (head, tail) = lines.split_at(split);
    for l in head {
        out.push_str(l);
        out.push('\n');
    }
    if !shell {
        // Nothing to add before a non-shell interpreter: keep the script byte for byte.
        return Ok(user_script.to_string());
    }
    out.push_str(&preamble);
    out.push_str(&tail.join("\n"));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A preamble of nothing but the marker, the first command on `line`.
    fn bare(line: usize) -> Preamble<'static> {
        Preamble {
            first_command_line: line,
            header: "",
            modules: &[],
            module_init_scripts: &[],
            mkdirs: &[],
            exit_marker: "/w/j.exit",
            args: &[],
        }
    }

    #[test]
    fn image_rewriting() {
        assert_eq!(pyxis_image("ghcr.io/acme/train:1"), "ghcr.io#acme/train:1");
        assert_eq!(pyxis_image("localhost/img:1"), "localhost#img:1");
        assert_eq!(pyxis_image("registry:5000/img"), "registry:5000#img");
        assert_eq!(pyxis_image("ubuntu:24.04"), "ubuntu:24.04");
        assert_eq!(pyxis_image("acme/train:1"), "acme/train:1");
        assert_eq!(
            pyxis_image("/shared/images/cpu.sqsh"),
            "/shared/images/cpu.sqsh"
        );
        assert_eq!(pyxis_image("./cpu.sqsh"), "./cpu.sqsh");
        assert_eq!(pyxis_image("ghcr.io#acme/x"), "ghcr.io#acme/x");
        assert_eq!(
            apptainer_image("ghcr.io/acme/eval:1.4"),
            "docker://ghcr.io/acme/eval:1.4"
        );
        assert_eq!(apptainer_image("/images/x.sif"), "/images/x.sif");
        assert_eq!(apptainer_image("oras://ghcr.io/x"), "oras://ghcr.io/x");
        assert_eq!(apptainer_image("x.sif"), "x.sif");
    }

    #[test]
    fn shebangs() {
        assert!(is_shell_shebang("#!/bin/bash"));
        assert!(is_shell_shebang("#!/usr/bin/env bash"));
        assert!(is_shell_shebang("#!/bin/sh -l"));
        assert!(!is_shell_shebang("#!/usr/bin/env python3"));
        assert!(!is_shell_shebang("#!/usr/bin/perl"));
    }

    #[test]
    fn script_preamble_goes_after_the_leading_block() {
        let s = "#!/bin/bash\n#SBATCH -t 5\n# note\necho hi\n";
        let mkdirs = ["/w/j.outputs".to_string()];
        let out = script_task(
            s,
            &Preamble {
                mkdirs: &mkdirs,
                ..bare(3)
            },
        )
        .unwrap();
        assert!(
            out.starts_with(
                "#!/bin/bash\n#SBATCH -t 5\n# note\n# slurm-connector: exit-status marker"
            ),
            "{out}"
        );
        assert!(out.ends_with("mkdir -p -- /w/j.outputs\n# --- end of slurm-connector preamble; the task's script follows as written ---\necho hi\n"), "{out}");
    }

    #[test]
    fn non_shell_script_kept_verbatim_or_refused() {
        let py = "#!/usr/bin/env python3\nprint(1)\n";
        assert_eq!(script_task(py, &bare(1)).unwrap(), py);
        let modules = ["x".to_string()];
        let with_module = Preamble {
            modules: &modules,
            ..bare(1)
        };
        assert!(script_task(py, &with_module).is_err());
    }

    #[test]
    fn a_function_task_runs_its_entrypoint_where_the_script_says() {
        let entry: Vec<String> = ["pyflyte-execute", "--prev-checkpoint", "", "--x", "a b"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let cmd = "pyflyte-execute --prev-checkpoint '' --x 'a b'";
        assert_eq!(
            function_script(Some("#!/bin/bash\nsource env\n{task.fn}\n"), &entry).unwrap(),
            format!("#!/bin/bash\nsource env\n{cmd}\n")
        );
        assert_eq!(
            function_script(None, &entry).unwrap(),
            format!("#!/bin/bash -i\n{cmd}\n"),
            "the published plugin's default script"
        );
        let e = function_script(Some("#!/bin/bash\necho hi\n"), &entry).unwrap_err();
        assert!(e.to_string().contains("{task.fn}"), "{e}");
        assert!(function_script(None, &[]).is_err());
    }

    #[test]
    fn script_arguments_are_set_before_the_marker_reruns_the_script() {
        let s = "#!/bin/bash\necho \"$1\"\n";
        let args = ["--tag".to_string(), "run one".to_string()];
        let with_args = Preamble {
            args: &args,
            ..bare(1)
        };
        let out = script_task(s, &with_args).unwrap();
        let set = out.find("set -- --tag 'run one'\n").expect(&out);
        assert!(set < out.find("exit-status marker").unwrap(), "{out}");
        let py = "#!/usr/bin/env python3\nprint(1)\n";
        let e = script_task(py, &with_args).unwrap_err();
        assert!(e.to_string().contains("batch_script_args"), "{e}");
    }

    #[test]
    fn srun_pin_cannot_be_undone() {
        let c = ContainerConfig {
            srun_args: vec!["--ntasks=4".into()],
            ..Default::default()
        };
        let cmd = vec!["a0".to_string()];
        let p = NativeParts {
            header: "",
            container: &c,
            image: "img",
            staged_image: None,
            container_env: &[],
            command: &cmd,
            modules: &[],
            module_init_scripts: &[],
            gpus_requested: false,
            mkdirs: &[],
            exit_marker: "/w/j.exit",
            ranks: false,
        };
        assert!(native(&p).unwrap_err().to_string().contains("srun_args"));
        let p = NativeParts { ranks: true, ..p };
        assert!(native(&p).unwrap_err().to_string().contains("sbatch.nodes"));
    }
}
