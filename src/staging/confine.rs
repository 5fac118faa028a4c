//! Path mapping and confinement.
//!
//! Every path the staging layer touches arrives as a *cluster* path (what the job script and Slurm
//! see) and is mapped to a *local* path (where this process sees the shared filesystem) through a
//! list of mounts, `FLYTE_SLURM_SHARED_MOUNTS=cluster_prefix=local_path[,...]`. The mounts are also
//! the confinement roots: a task declares its output paths, so without this a task could have the
//! connector upload `/etc/shadow` or the connector's own secrets. Refused: relative paths, any `..`
//! component, paths under no mount, and paths whose symlinks resolve outside their mount's root
//! (checked on the canonical path, and again on the opened descriptor — see `local.rs`).

use std::path::{Component, Path, PathBuf};

use super::error::{Result, StagingError};
// The mount syntax is parsed with the other operator-written values (the connector's config and
// the stager's `--roots` accept exactly the same).
pub use crate::config::units::Mount;
use crate::config::units::parse_mounts;

/// The configured roots, longest cluster prefix first so nested mounts win.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    mounts: Vec<Mount>,
}

/// A path that passed the lexical checks and was mapped to a local path (not yet canonicalized).
#[derive(Debug, Clone)]
pub struct Mapped {
    /// The normalized cluster path (for messages).
    pub cluster: String,
    /// Where this process sees it.
    pub local: PathBuf,
    /// The local root of the mount it falls under.
    pub local_root: PathBuf,
}

pub const SHARED_MOUNTS_VAR: &str = "FLYTE_SLURM_SHARED_MOUNTS";

impl Roots {
    /// Parse `cluster_prefix=local_path[,...]` (a bare `path` maps to itself): [`parse_mounts`].
    pub fn parse(spec: &str) -> Result<Self> {
        let bad = |message: String| StagingError::Config {
            var: SHARED_MOUNTS_VAR,
            message,
        };
        Self::new(parse_mounts(spec).map_err(bad)?)
    }

    /// Build from explicit mounts; both sides must be absolute and free of `..`.
    pub fn new(mut mounts: Vec<Mount>) -> Result<Self> {
        for m in &mounts {
            for (side, p) in [
                ("cluster prefix", &m.cluster_prefix),
                ("local path", &m.local_path),
            ] {
                if !p.is_absolute() || p.components().any(|c| c == Component::ParentDir) {
                    return Err(StagingError::Config {
                        var: SHARED_MOUNTS_VAR,
                        message: format!(
                            "{side} {} must be an absolute path without `..`",
                            p.display()
                        ),
                    });
                }
            }
        }
        if mounts.is_empty() {
            return Err(StagingError::Config {
                var: SHARED_MOUNTS_VAR,
                message: "at least one root is needed".into(),
            });
        }
        mounts.sort_by_key(|m| std::cmp::Reverse(m.cluster_prefix.components().count()));
        Ok(Roots { mounts })
    }

    /// Roots that are the same path on the cluster and here (the stager on a data-transfer node).
    pub fn identity<P: Into<PathBuf>>(paths: impl IntoIterator<Item = P>) -> Result<Self> {
        Self::new(
            paths
                .into_iter()
                .map(|p| {
                    let p = p.into();
                    Mount {
                        cluster_prefix: p.clone(),
                        local_path: p,
                    }
                })
                .collect(),
        )
    }

    pub fn mounts(&self) -> &[Mount] {
        &self.mounts
    }

    /// The cluster prefixes, for messages telling an author where outputs may live.
    pub fn describe(&self) -> String {
        let v: Vec<String> = self
            .mounts
            .iter()
            .map(|m| m.cluster_prefix.display().to_string())
            .collect();
        v.join(", ")
    }

    /// Lexical checks and mapping; no filesystem access.
    pub fn map(&self, cluster_path: &str) -> Result<Mapped> {
        let refuse = |reason: String| StagingError::refused(cluster_path, reason);
        if cluster_path.is_empty() {
            return Err(refuse("empty path".into()));
        }
        let p = Path::new(cluster_path);
        let mut normalized = PathBuf::from("/");
        for (i, c) in p.components().enumerate() {
            match c {
                Component::RootDir if i == 0 => {}
                Component::CurDir => {}
                Component::Normal(n) => normalized.push(n),
                Component::ParentDir => {
                    return Err(refuse("`..` components are not allowed".into()));
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(refuse("not a plain absolute path".into()));
                }
            }
        }
        if !p.is_absolute() {
            return Err(refuse(format!(
                "relative paths are not allowed; use an absolute path under {}",
                self.describe()
            )));
        }
        let mount = self
            .mounts
            .iter()
            .find(|m| normalized.starts_with(&m.cluster_prefix))
            .ok_or_else(|| {
                refuse(format!(
                    "outside the shared roots ({}); job files and outputs must live there",
                    self.describe()
                ))
            })?;
        let rest = normalized
            .strip_prefix(&mount.cluster_prefix)
            .expect("starts_with checked");
        Ok(Mapped {
            cluster: normalized.display().to_string(),
            local: mount.local_path.join(rest),
            local_root: mount.local_path.clone(),
        })
    }

    /// Map and resolve every symlink; the canonical path must stay under the canonical root.
    /// Blocking (filesystem calls): run inside `spawn_blocking`.
    pub fn resolve(&self, cluster_path: &str) -> Result<Resolved> {
        let mapped = self.map(cluster_path)?;
        let root = canonical_root(&mapped)?;
        let canonical = std::fs::canonicalize(&mapped.local)
            .map_err(|e| StagingError::io("resolve", &mapped.cluster, e))?;
        check_inside(&mapped.cluster, &canonical, &root)?;
        Ok(Resolved {
            cluster: mapped.cluster,
            local: canonical,
            root,
        })
    }

    /// Like [`Roots::resolve`] but does not follow the last component (for remove: deleting a
    /// symlink must delete the link, not what it points to). The path must not be a root itself.
    pub fn resolve_parent(&self, cluster_path: &str) -> Result<Resolved> {
        let mapped = self.map(cluster_path)?;
        let root = canonical_root(&mapped)?;
        let name = match mapped.local.file_name() {
            Some(n) if mapped.local != mapped.local_root => n.to_owned(),
            _ => {
                return Err(StagingError::refused(
                    &mapped.cluster,
                    "a shared root itself cannot be removed",
                ));
            }
        };
        let parent = mapped.local.parent().expect("has a file name");
        let parent = std::fs::canonicalize(parent)
            .map_err(|e| StagingError::io("resolve", &mapped.cluster, e))?;
        check_inside(&mapped.cluster, &parent, &root)?;
        Ok(Resolved {
            cluster: mapped.cluster,
            local: parent.join(name),
            root,
        })
    }
}

/// A confined path: `local` is canonical (or, from `resolve_parent`, has a canonical parent).
#[derive(Debug, Clone)]
pub struct Resolved {
    pub cluster: String,
    pub local: PathBuf,
    /// The canonical local root it must stay under.
    pub root: PathBuf,
}

fn canonical_root(mapped: &Mapped) -> Result<PathBuf> {
    std::fs::canonicalize(&mapped.local_root).map_err(|e| StagingError::Config {
        var: SHARED_MOUNTS_VAR,
        message: format!(
            "the local side {} of the mount for {} is not usable: {e}",
            mapped.local_root.display(),
            mapped.cluster
        ),
    })
}

/// `canonical` must be `root` or below it. Component-wise, so `/data2` is not under `/data`.
pub fn check_inside(cluster: &str, canonical: &Path, root: &Path) -> Result<()> {
    if canonical.starts_with(root) {
        Ok(())
    } else {
        Err(StagingError::refused(
            cluster,
            "it is (or goes through) a symlink that resolves outside the shared roots",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_map() {
        let r = Roots::parse("/scratch=/mnt/s, /home/flyte").unwrap();
        let m = r.map("/scratch/jobs/./a.out").unwrap();
        assert_eq!(m.local, PathBuf::from("/mnt/s/jobs/a.out"));
        assert_eq!(m.cluster, "/scratch/jobs/a.out");
        assert_eq!(
            r.map("/home/flyte/x").unwrap().local,
            PathBuf::from("/home/flyte/x")
        );
        assert!(r.map("/scratch2/x").unwrap_err().is_refused());
        assert!(r.map("/scratch/../etc/shadow").unwrap_err().is_refused());
        assert!(r.map("scratch/x").unwrap_err().is_refused());
        assert!(r.map("").unwrap_err().is_refused());
    }

    #[test]
    fn nested_mount_wins() {
        let r = Roots::parse("/a=/x,/a/b=/y").unwrap();
        assert_eq!(r.map("/a/b/c").unwrap().local, PathBuf::from("/y/c"));
        assert_eq!(r.map("/a/c").unwrap().local, PathBuf::from("/x/c"));
    }

    #[test]
    fn one_parser_for_every_reader() {
        let m = parse_mounts(" /shared/=/mnt/s/ , /home/flyte ").unwrap();
        assert_eq!(m[0].cluster_prefix, PathBuf::from("/shared"));
        assert_eq!(m[0].local_path, PathBuf::from("/mnt/s"));
        assert_eq!(m[1].cluster_prefix, m[1].local_path);
        for bad in ["rel", "/a=rel", "/a/../b=/x", "=", ","] {
            let e = parse_mounts(bad).unwrap_err();
            assert!(e.contains("cluster_prefix=local_path"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn bad_specs_name_the_variable() {
        for spec in ["", "=/x", "/x=", "rel=/x", "/x=../y", " , "] {
            let e = Roots::parse(spec).unwrap_err().to_string();
            assert!(e.starts_with(SHARED_MOUNTS_VAR), "{spec:?}: {e}");
        }
    }
}
