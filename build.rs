//! What `--version` and the `slurm_connector_build_info` metric say: the git commit
//! (`SLURM_CONNECTOR_GIT_HASH`). The generated code lives in crates of its own (`crates/slurmrestd`:
//! the slurmrestd clients; `crates/proto`: Flyte's protocols), so the rerun this script does on
//! every commit recompiles only this crate.

use std::{env, process::Command};

fn main() {
    build_info();
}

/// The commit this binary was built from, for `--version` and `slurm_connector_build_info`: an
/// operator comparing replicas (or an image with its source) needs it. `SLURM_CONNECTOR_GIT_HASH`
/// wins (an image built from a context without `.git` passes it as a build argument); else git's
/// HEAD; else `unknown`. build.rs reruns when HEAD moves, so the hash is never stale.
fn build_info() {
    println!("cargo:rerun-if-env-changed=SLURM_CONNECTOR_GIT_HASH");
    let given = env::var("SLURM_CONNECTOR_GIT_HASH")
        .ok()
        .filter(|h| !h.trim().is_empty());
    let hash = given.or_else(|| {
        // What moves HEAD: HEAD itself (a checkout), the branch's ref (a commit) or packed-refs.
        let mut watch = vec!["HEAD".to_string(), "packed-refs".to_string()];
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watch.push(branch);
        }
        for name in watch {
            if let Some(path) = git(&["rev-parse", "--git-path", &name])
                && std::path::Path::new(&path).exists()
            {
                println!("cargo:rerun-if-changed={path}");
            }
        }
        git(&["rev-parse", "--short=12", "HEAD"])
    });
    println!(
        "cargo:rustc-env=SLURM_CONNECTOR_GIT_HASH={}",
        hash.as_deref().map(str::trim).unwrap_or("unknown")
    );
}

/// `git ARGS` in the package's folder: its trimmed output, or `None` (no git, not a checkout).
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(env::var("CARGO_MANIFEST_DIR").ok()?)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}
