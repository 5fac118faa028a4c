//! The local backend: the cluster's shared filesystem is mounted in this process's view.
//!
//! Filesystem calls are blocking, so each operation runs in `spawn_blocking`. Reads are confined
//! twice: the canonical path must be under the root ([`Roots::resolve`]), and after opening, the
//! descriptor's own path (`/proc/self/fd/N`) must be too — so swapping a directory for a symlink
//! between the check and the open (a job still running can do that) gains nothing. Removal
//! goes through the pinned parent directory's descriptor for the same reason.

use std::collections::HashSet;
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use bytes::BytesMut;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use tokio::io::AsyncReadExt;

use super::backend::{
    ByteStream, Chunk, EntryKind, READ_AT_MAX_BYTES, ReadFrom, Staging, Stat, TAIL_MAX_BYTES,
    TAIL_MAX_LINES, WALK_MAX_ENTRIES, WalkEntry,
};
use super::confine::{Resolved, Roots, check_inside};
use super::error::{Result, StagingError};
use super::objstore;
use super::transfer::TransferCtl;

#[derive(Debug, Clone)]
pub struct LocalStaging {
    roots: Roots,
}

impl LocalStaging {
    pub fn new(roots: Roots) -> Self {
        LocalStaging { roots }
    }

    pub fn roots(&self) -> &Roots {
        &self.roots
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(StagingError::Io {
            op: "run",
            path: "staging worker".into(),
            source: std::io::Error::other(e.to_string()),
        })
    })
}

/// Resolve, or `None` if the path does not exist (any other refusal is an error).
fn resolve_opt(roots: &Roots, path: &str) -> Result<Option<Resolved>> {
    match roots.resolve(path) {
        Ok(r) => Ok(Some(r)),
        Err(StagingError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Open a resolved regular file and check the opened descriptor is still under the root.
pub(crate) fn open_confined(r: &Resolved) -> Result<fs::File> {
    let file = fs::File::open(&r.local).map_err(|e| StagingError::io("open", &r.cluster, e))?;
    let fd_path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    let real = fs::read_link(&fd_path).map_err(|e| StagingError::Io {
        op: "verify (needs /proc) the opened file",
        path: r.cluster.clone(),
        source: e,
    })?;
    check_inside(&r.cluster, &real, &r.root)?;
    let meta = file
        .metadata()
        .map_err(|e| StagingError::io("stat", &r.cluster, e))?;
    if !meta.is_file() {
        return Err(StagingError::refused(
            &r.cluster,
            "not a regular file (directories, fifos and devices cannot be read)",
        ));
    }
    Ok(file)
}

fn stat_blocking(roots: &Roots, path: &str) -> Result<Option<Stat>> {
    let Some(r) = resolve_opt(roots, path)? else {
        return Ok(None);
    };
    let meta = fs::metadata(&r.local).map_err(|e| StagingError::io("stat", &r.cluster, e))?;
    let kind = if meta.is_file() {
        EntryKind::File
    } else if meta.is_dir() {
        EntryKind::Dir
    } else {
        EntryKind::Other
    };
    let modified_unix = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs() as i64);
    Ok(Some(Stat {
        kind,
        size: meta.len(),
        modified_unix,
    }))
}

/// Read backwards from the end in 64 KiB blocks until `lines` complete lines are found, the file
/// start, or [`TAIL_MAX_BYTES`]: memory is bounded whatever the file size.
pub(crate) fn tail_file(file: &mut fs::File, lines: usize, cluster: &str) -> Result<String> {
    const BLOCK: u64 = 64 * 1024;
    let lines = lines.min(TAIL_MAX_LINES);
    if lines == 0 {
        return Ok(String::new());
    }
    let io = |e| StagingError::io("tail", cluster, e);
    let len = file.seek(SeekFrom::End(0)).map_err(io)?;
    let mut pos = len;
    // Blocks read, last block first.
    let mut blocks: Vec<Vec<u8>> = Vec::new();
    let mut read = 0u64;
    let mut newlines = 0usize;
    let mut trailing_newline_seen = false;
    while pos > 0 && read < TAIL_MAX_BYTES {
        let n = BLOCK.min(pos).min(TAIL_MAX_BYTES - read);
        pos -= n;
        file.seek(SeekFrom::Start(pos)).map_err(io)?;
        let mut block = vec![0u8; n as usize];
        file.read_exact(&mut block).map_err(io)?;
        read += n;
        let mut count = block.iter().filter(|&&b| b == b'\n').count();
        if !trailing_newline_seen {
            // The file's final newline ends the last line; it does not start another.
            trailing_newline_seen = true;
            if block.last() == Some(&b'\n') {
                count -= 1;
            }
        }
        newlines += count;
        blocks.push(block);
        if newlines >= lines {
            break;
        }
    }
    let mut data = Vec::with_capacity(read as usize);
    for b in blocks.iter().rev() {
        data.extend_from_slice(b);
    }
    let body = data.strip_suffix(b"\n").unwrap_or(&data);
    // Start after the `lines`-th newline from the end, if there are that many.
    let mut start = 0;
    let mut seen = 0;
    for (i, &b) in body.iter().enumerate().rev() {
        if b == b'\n' {
            seen += 1;
            if seen == lines {
                start = i + 1;
                break;
            }
        }
    }
    Ok(String::from_utf8_lossy(&body[start..]).into_owned())
}

fn tail_blocking(roots: &Roots, path: &str, lines: usize) -> Result<Option<String>> {
    let Some(r) = resolve_opt(roots, path)? else {
        return Ok(None);
    };
    let mut file = open_confined(&r)?;
    tail_file(&mut file, lines, &r.cluster).map(Some)
}

/// One open, one seek, one bounded read: the size is the descriptor's, taken before reading, and
/// the read stops there, so bytes written meanwhile are the next page's.
pub(crate) fn read_at_file(
    file: &mut fs::File,
    from: ReadFrom,
    max: u64,
    cluster: &str,
) -> Result<Chunk> {
    let io = |e| StagingError::io("read", cluster, e);
    let size = file.metadata().map_err(io)?.len();
    let start = match from {
        ReadFrom::Offset(o) => o.min(size),
        ReadFrom::End(n) => size.saturating_sub(n),
    };
    let n = max.min(READ_AT_MAX_BYTES).min(size - start);
    let mut buf = vec![0u8; n as usize];
    file.seek(SeekFrom::Start(start)).map_err(io)?;
    // The file may have been truncated since the size was read: keep what was there.
    let mut got = 0;
    while got < buf.len() {
        match file.read(&mut buf[got..]).map_err(io)? {
            0 => break,
            k => got += k,
        }
    }
    buf.truncate(got);
    Ok(Chunk {
        start,
        size,
        bytes: buf.into(),
    })
}

fn read_at_blocking(roots: &Roots, path: &str, from: ReadFrom, max: u64) -> Result<Option<Chunk>> {
    let Some(r) = resolve_opt(roots, path)? else {
        return Ok(None);
    };
    let mut file = open_confined(&r)?;
    read_at_file(&mut file, from, max, &r.cluster).map(Some)
}

fn walk_blocking(roots: &Roots, path: &str) -> Result<Vec<WalkEntry>> {
    let top = roots.resolve(path)?;
    let io = |op, p: &str, e| StagingError::io(op, p, e);
    if !fs::metadata(&top.local)
        .map_err(|e| io("stat", &top.cluster, e))?
        .is_dir()
    {
        return Err(StagingError::refused(&top.cluster, "not a directory"));
    }
    let mut out = Vec::new();
    // Canonical directories already listed: a symlink loop inside the root ends here.
    let mut visited = HashSet::from([top.local.clone()]);
    let mut stack = vec![(top.local.clone(), String::new())];
    while let Some((dir, rel)) = stack.pop() {
        let cluster_dir = join_cluster(&top.cluster, &rel);
        for entry in fs::read_dir(&dir).map_err(|e| io("list", &cluster_dir, e))? {
            let entry = entry.map_err(|e| io("list", &cluster_dir, e))?;
            let name = entry.file_name().into_string().map_err(|n| {
                StagingError::refused(
                    format!("{cluster_dir}/{}", n.to_string_lossy()),
                    "the file name is not UTF-8, so it has no object-store key",
                )
            })?;
            let rel_child = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let cluster_child = join_cluster(&top.cluster, &rel_child);
            let ft = entry
                .file_type()
                .map_err(|e| io("stat", &cluster_child, e))?;
            let (real, meta) = if ft.is_symlink() {
                let c =
                    fs::canonicalize(entry.path()).map_err(|e| io("resolve", &cluster_child, e))?;
                check_inside(&cluster_child, &c, &top.root)?;
                let m = fs::metadata(&c).map_err(|e| io("stat", &cluster_child, e))?;
                (c, m)
            } else {
                let m = entry
                    .metadata()
                    .map_err(|e| io("stat", &cluster_child, e))?;
                (entry.path(), m)
            };
            if meta.is_dir() {
                if visited.insert(real.clone()) {
                    stack.push((real, rel_child));
                } else {
                    tracing::debug!(path = %cluster_child, "directory already walked (symlink loop?)");
                }
            } else if meta.is_file() {
                out.push(WalkEntry {
                    relative: rel_child,
                    size: meta.len(),
                });
                if out.len() > WALK_MAX_ENTRIES {
                    return Err(StagingError::refused(
                        &top.cluster,
                        format!(
                            "more than {WALK_MAX_ENTRIES} files; archive them into fewer files"
                        ),
                    ));
                }
            } else {
                tracing::warn!(path = %cluster_child, "skipping a fifo, socket or device in a walked directory");
            }
        }
    }
    out.sort_by(|a, b| a.relative.cmp(&b.relative));
    Ok(out)
}

fn join_cluster(top: &str, rel: &str) -> String {
    if rel.is_empty() {
        top.to_string()
    } else {
        format!("{}/{rel}", top.trim_end_matches('/'))
    }
}

fn remove_blocking(roots: &Roots, path: &str) -> Result<bool> {
    let r = match roots.resolve_parent(path) {
        Ok(r) => r,
        Err(StagingError::NotFound { .. }) => return Ok(false),
        Err(e) => return Err(e),
    };
    let (parent, name) = match (r.local.parent(), r.local.file_name()) {
        (Some(p), Some(n)) => (p, n),
        _ => return Err(StagingError::refused(&r.cluster, "no parent directory")),
    };
    // Pin the parent: open it, check the descriptor is under the root, and remove through
    // `/proc/self/fd/N/<name>`. A parent swapped for a symlink after the check (by a job still
    // running) then cannot redirect the removal outside the root.
    let dir = fs::File::open(parent).map_err(|e| StagingError::io("open", &r.cluster, e))?;
    let fd_path = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
    let real = fs::read_link(&fd_path).map_err(|e| StagingError::Io {
        op: "verify (needs /proc) the parent of",
        path: r.cluster.clone(),
        source: e,
    })?;
    check_inside(&r.cluster, &real, &r.root)?;
    let target = fd_path.join(name);
    let meta = match fs::symlink_metadata(&target) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(StagingError::io("stat", &r.cluster, e)),
    };
    // std's remove_dir_all does not follow symlinks inside the tree (and is race-safe since
    // Rust 1.58.1), so a link to elsewhere inside the tree is unlinked, not descended into.
    let res = if meta.is_dir() {
        fs::remove_dir_all(&target)
    } else {
        fs::remove_file(&target)
    };
    drop(dir);
    match res {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(StagingError::io("remove", &r.cluster, e)),
    }
}

/// Open a confined file for streaming: (async file, size).
pub(crate) async fn open_for_stream(roots: &Roots, path: &str) -> Result<(tokio::fs::File, u64)> {
    let roots = roots.clone();
    let path = path.to_string();
    blocking(move || {
        let r = roots.resolve(&path)?;
        let f = open_confined(&r)?;
        let size = f
            .metadata()
            .map_err(|e| StagingError::io("stat", &r.cluster, e))?
            .len();
        Ok((tokio::fs::File::from_std(f), size))
    })
    .await
}

/// A file as a stream of 64 KiB chunks.
pub(crate) fn file_stream(file: tokio::fs::File) -> ByteStream {
    futures::stream::unfold(Some(file), |state| async move {
        let mut file = state?;
        let mut buf = BytesMut::with_capacity(64 * 1024);
        match file.read_buf(&mut buf).await {
            Ok(0) => None,
            Ok(_) => Some((Ok(buf.freeze()), Some(file))),
            Err(e) => Some((Err(e), None)),
        }
    })
    .boxed()
}

/// Upload one confined file to `dest_uri`: shared by the local backend and the stager.
pub(crate) async fn upload_confined(
    roots: &Roots,
    path: &str,
    dest_uri: &str,
    ctl: &TransferCtl,
) -> Result<u64> {
    let dest = objstore::open(dest_uri)?;
    let (file, size) = open_for_stream(roots, path).await?;
    // Another replica (or this one, before a restart) may have published this output already:
    // any replica's GetTask uploads a finished job's outputs, and each keeps its transfers in
    // memory. An object of the same size written after the job wrote its file is that upload;
    // writing the final key again would only race it. (An older object is an earlier attempt's
    // or a stale one: it is replaced.)
    let written = file.metadata().await.ok().and_then(|m| m.modified().ok());
    if let Some(written) = written
        && objstore::published_since(&dest, size, written).await?
    {
        tracing::info!(uri = %dest.uri, size, "output already published (by another replica or an earlier call); not uploading it again");
        ctl.progress.add_done(size);
        return Ok(size);
    }
    if let Some(target) = &dest.local_path {
        let src = file.into_std().await;
        return super::local_copy::copy(src, target, &dest.uri, ctl).await;
    }
    objstore::upload_reader(file, size, &dest, ctl).await
}

impl Staging for LocalStaging {
    fn stat<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Option<Stat>>> {
        let (roots, path) = (self.roots.clone(), path.to_string());
        blocking(move || stat_blocking(&roots, &path)).boxed()
    }

    fn tail<'a>(&'a self, path: &'a str, lines: usize) -> BoxFuture<'a, Result<Option<String>>> {
        let (roots, path) = (self.roots.clone(), path.to_string());
        blocking(move || tail_blocking(&roots, &path, lines)).boxed()
    }

    fn read_at<'a>(
        &'a self,
        path: &'a str,
        from: ReadFrom,
        max: u64,
    ) -> BoxFuture<'a, Result<Option<Chunk>>> {
        let (roots, path) = (self.roots.clone(), path.to_string());
        blocking(move || read_at_blocking(&roots, &path, from, max)).boxed()
    }

    fn walk<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<WalkEntry>>> {
        let (roots, path) = (self.roots.clone(), path.to_string());
        blocking(move || walk_blocking(&roots, &path)).boxed()
    }

    fn read<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<ByteStream>> {
        async move {
            let (file, _) = open_for_stream(&self.roots, path).await?;
            Ok(file_stream(file))
        }
        .boxed()
    }

    fn remove<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<bool>> {
        let (roots, path) = (self.roots.clone(), path.to_string());
        blocking(move || remove_blocking(&roots, &path)).boxed()
    }

    fn upload_file<'a>(
        &'a self,
        path: &'a str,
        dest_uri: &'a str,
        ctl: &'a TransferCtl,
    ) -> BoxFuture<'a, Result<u64>> {
        upload_confined(&self.roots, path, dest_uri, ctl).boxed()
    }
}
