//! Uploads to a `file://` object store, copied inside the kernel.
//!
//! Streaming through `object_store`'s multipart upload copies every byte twice through user space
//! (read into a buffer, write out of it): about half of `cp`'s speed on a 2 GiB file here
//! (BENCHMARKS.md). For a local destination there is no reason to: `std::io::copy` between two
//! files uses `copy_file_range(2)` on Linux, as `cp` does, and memory stays flat. The result is
//! published the way `LocalFileSystem` publishes its own uploads — written to a staging file
//! beside the target, then renamed — so readers never see a partial object.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};

use super::error::{Result, StagingError};
use super::transfer::TransferCtl;

/// Bytes per `copy_file_range` round: between rounds, progress is reported and cancellation seen.
const ROUND: u64 = 64 * 1024 * 1024;

/// Copy `src` to `target`; `uri` names the destination in errors.
pub async fn copy(src: File, target: &Path, uri: &str, ctl: &TransferCtl) -> Result<u64> {
    let (target, uri, ctl) = (target.to_path_buf(), uri.to_string(), ctl.clone());
    tokio::task::spawn_blocking(move || {
        let staged = staging_path(&target);
        let result = copy_blocking(&src, &staged, &target, &uri, &ctl);
        if result.is_err() {
            // Cancelled or failed: no partial file stays behind.
            let _ = std::fs::remove_file(&staged);
        }
        result
    })
    .await
    .map_err(|e| StagingError::Io {
        op: "copy to",
        path: String::new(),
        source: std::io::Error::other(e),
    })?
}

/// `<target>#sc-<pid>-<n>`: `#` as `LocalFileSystem` marks its staged uploads, unique per copy.
fn staging_path(target: &Path) -> PathBuf {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut s = target.as_os_str().to_owned();
    s.push(format!("#sc-{}-{n}", std::process::id()));
    s.into()
}

fn copy_blocking(
    src: &File,
    staged: &Path,
    target: &Path,
    uri: &str,
    ctl: &TransferCtl,
) -> Result<u64> {
    let io = |op: &'static str| {
        move |e: std::io::Error| StagingError::Io {
            op,
            path: uri.to_string(),
            source: e,
        }
    };
    if let Some(dir) = target.parent() {
        std::fs::create_dir_all(dir).map_err(io("create the folder of"))?;
    }
    // A target there now is stale (the caller checked it is not this output): replaced. One that
    // appears while copying is another writer's upload of the same output.
    let stale = target.exists();
    let mut out = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(staged)
        .map_err(io("create"))?;
    let mut done = 0u64;
    loop {
        ctl.check()?;
        // `Take<&File>` into `File` still takes std's copy_file_range path.
        let n = std::io::copy(&mut src.take(ROUND), &mut out).map_err(io("copy to"))?;
        if n == 0 {
            break;
        }
        done += n;
        ctl.progress.add_done(n);
    }
    drop(out);
    ctl.check()?;
    if stale {
        std::fs::rename(staged, target).map_err(io("publish"))?;
    } else {
        publish(staged, target, done).map_err(io("publish"))?;
    }
    Ok(done)
}

/// Moves the staged copy to a `target` that did not exist when the copy began, unless another
/// writer published a file of the same size there meanwhile (two replicas uploading one job's
/// output): then that one stays and the copy is dropped, so the final file is written once. One
/// of another size is replaced, as a rename would.
fn publish(staged: &Path, target: &Path, size: u64) -> std::io::Result<()> {
    // A hard link fails if the target exists (a no-replace rename that works on every local
    // filesystem the store can sit on; renameat2's RENAME_NOREPLACE is not on all of them).
    match std::fs::hard_link(staged, target) {
        Ok(()) => std::fs::remove_file(staged),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            if std::fs::metadata(target).is_ok_and(|m| m.len() == size) {
                tracing::info!(target = %target.display(), "output published by another writer meanwhile; keeping it");
                std::fs::remove_file(staged)
            } else {
                std::fs::rename(staged, target)
            }
        }
        // No hard links here (some FUSE filesystems): the atomic rename, last writer wins.
        Err(_) => std::fs::rename(staged, target),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("local-copy-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[tokio::test]
    async fn copies_whole_file_into_new_folders_and_leaves_no_staging_file() {
        let d = tmp("ok");
        let src = d.join("src.bin");
        let data: Vec<u8> = (0..(3 * 1024 * 1024 + 17))
            .map(|i| (i % 251) as u8)
            .collect();
        std::fs::write(&src, &data).unwrap();
        let target = d.join("out/a/b/obj");
        let (ctl, _tx) = TransferCtl::new();
        let n = copy(File::open(&src).unwrap(), &target, "file:///x", &ctl)
            .await
            .unwrap();
        assert_eq!(n, data.len() as u64);
        assert_eq!(std::fs::read(&target).unwrap(), data);
        assert_eq!(ctl.progress.snapshot().0, n);
        let left: Vec<_> = std::fs::read_dir(target.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("obj")]);
    }

    #[test]
    fn a_file_published_meanwhile_with_the_same_size_stays_and_another_size_is_replaced() {
        let d = tmp("publish");
        let (staged, target) = (d.join("obj#sc"), d.join("obj"));
        std::fs::write(&staged, "bbbb").unwrap();
        std::fs::write(&target, "aaaa").unwrap();
        publish(&staged, &target, 4).unwrap();
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "aaaa",
            "the first publish stays"
        );
        assert!(!staged.exists(), "the second copy is dropped");
        std::fs::write(&staged, "bbbb").unwrap();
        std::fs::write(&target, "aa").unwrap();
        publish(&staged, &target, 4).unwrap();
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "bbbb",
            "a stale object is replaced"
        );
        std::fs::write(&staged, "cc").unwrap();
        std::fs::remove_file(&target).unwrap();
        publish(&staged, &target, 2).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "cc");
        assert!(!staged.exists());
    }

    #[tokio::test]
    async fn a_cancelled_copy_publishes_nothing() {
        let d = tmp("cancel");
        let src = d.join("src.bin");
        std::fs::write(&src, vec![1u8; 1024]).unwrap();
        let target = d.join("obj");
        let (ctl, tx) = TransferCtl::new();
        tx.send(true).unwrap();
        let e = copy(File::open(&src).unwrap(), &target, "file:///x", &ctl)
            .await
            .unwrap_err();
        assert!(matches!(e, StagingError::Cancelled), "{e}");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1, "only src.bin");
    }
}
