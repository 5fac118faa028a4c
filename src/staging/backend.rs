//! The staging interface: what the service needs from the cluster's shared filesystem.
//!
//! Two implementations: `LocalStaging` in local.rs (the filesystem is mounted here) and
//! `SidecarStaging` in stager/client.rs (a `slurm-connector stager` has the mount). Every
//! path argument is a *cluster* path; both backends confine it to their roots. The methods return
//! boxed futures so the service can hold an `Arc<dyn Staging>` chosen at startup.

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};

use super::error::Result;
use super::transfer::TransferCtl;

/// A file's bytes, in order, in bounded chunks.
pub type ByteStream = BoxStream<'static, std::io::Result<Bytes>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    File,
    Dir,
    /// A fifo, socket or device: never read (a fifo would block the reader forever).
    Other,
}

/// What `stat` reports (after following symlinks that stay inside the roots).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stat {
    pub kind: EntryKind,
    pub size: u64,
    /// Modification time, seconds since the Unix epoch.
    pub modified_unix: Option<i64>,
}

/// A file found by `walk`: its name relative to the walked directory (`/`-separated) and size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalkEntry {
    pub relative: String,
    pub size: u64,
}

/// The most lines `tail` returns, whatever is asked: keeps a log request bounded.
pub const TAIL_MAX_LINES: usize = 10_000;
/// The most bytes `tail` reads back from the end of a file (lines longer than this are cut).
pub const TAIL_MAX_BYTES: u64 = 4 * 1024 * 1024;
/// The most bytes one `read_at` returns: a log page is bounded whatever the file size.
pub const READ_AT_MAX_BYTES: u64 = 4 * 1024 * 1024;
/// The most files `walk` lists: a directory output with more is refused, not half-uploaded.
pub const WALK_MAX_ENTRIES: usize = 200_000;

/// Where [`Staging::read_at`] starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFrom {
    /// At this byte offset (past the end: nothing is read, and the chunk says the file's size,
    /// so a reader can tell a truncated file from one that did not grow).
    Offset(u64),
    /// This many bytes before the end (the whole file when it is shorter).
    End(u64),
}

/// What [`Staging::read_at`] read: `bytes` start at byte `start` of a file that was `size`
/// bytes long when it was read (so `start + bytes.len()` is where the next read continues,
/// and anything written after the read is left for it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub start: u64,
    pub size: u64,
    pub bytes: Bytes,
}

pub trait Staging: Send + Sync + std::fmt::Debug {
    /// `None` when the path does not exist.
    fn stat<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Option<Stat>>>;

    /// The last `lines` lines (at most [`TAIL_MAX_LINES`], read from the end of the file with
    /// bounded memory), lossily decoded as UTF-8; `None` when the file does not exist.
    fn tail<'a>(&'a self, path: &'a str, lines: usize) -> BoxFuture<'a, Result<Option<String>>>;

    /// At most `max` bytes (capped at [`READ_AT_MAX_BYTES`]) of a regular file from `from`, in one
    /// open: a growing log is paged by offset, never read again from its start. `None` when the
    /// file does not exist.
    fn read_at<'a>(
        &'a self,
        path: &'a str,
        from: ReadFrom,
        max: u64,
    ) -> BoxFuture<'a, Result<Option<Chunk>>>;

    /// Every regular file under a directory, recursively, sorted by relative name. A symlink
    /// (file or directory) resolving outside the roots fails the whole walk.
    fn walk<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<WalkEntry>>>;

    /// A regular file's content as a stream.
    fn read<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<ByteStream>>;

    /// Remove a file, a symlink (not its target) or a whole tree; `false` if it was not there.
    fn remove<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<bool>>;

    /// Stream one regular file to an object-store URI (multipart, bounded memory), adding to
    /// `ctl`'s progress as bytes go and stopping (aborting the upload) when `ctl` is cancelled.
    /// The sidecar does this on its side, so the bytes never pass through the connector.
    fn upload_file<'a>(
        &'a self,
        path: &'a str,
        dest_uri: &'a str,
        ctl: &'a TransferCtl,
    ) -> BoxFuture<'a, Result<u64>>;
}
