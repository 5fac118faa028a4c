//! Object-store destinations: parse an output URI into a store and a path, stream a file into
//! it with bounded memory, check that an object (or a prefix) exists.
//!
//! Credentials and endpoints come from the environment the way `object_store` reads it
//! (`AWS_*`; `GOOGLE_*` and `SERVICE_ACCOUNT`; `AZURE_*` and, with `AZURE_STORAGE_USE_EMULATOR`,
//! `AZURITE_BLOB_STORAGE_URL`: docs/configuration.md), on whichever side does the upload: the
//! connector in local mode, the stager in sidecar mode. Every build has S3, GCS, Azure and file://.

use std::sync::Arc;

use bytes::BytesMut;
use futures::StreamExt;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt, ObjectStoreScheme, PutPayload, WriteMultipart};
use tokio::io::{AsyncRead, AsyncReadExt};
use url::Url;

use super::error::{Result, StagingError};
use super::transfer::TransferCtl;

/// Multipart part size. Memory per upload is about `PART_SIZE * (MAX_PARTS_IN_FLIGHT + 1)`,
/// whatever the file size. 8 MiB is above S3's 5 MiB minimum part; above ~80 GB parts grow so
/// a file stays under S3's 10,000-part limit (see [`part_size_for`]).
pub const PART_SIZE: usize = 8 * 1024 * 1024;
/// Parts uploading concurrently.
pub const MAX_PARTS_IN_FLIGHT: usize = 2;
const READ_CHUNK: usize = 1024 * 1024;
/// S3's limit on parts per multipart upload.
const MAX_PARTS: u64 = 10_000;

/// A parsed destination: which store, which path inside it, and the URI (for messages).
#[derive(Debug, Clone)]
pub struct Destination {
    pub uri: String,
    /// Which store the object is in ([`store_key`]): objects with one key share a store.
    pub store_key: String,
    pub store: Arc<dyn ObjectStore>,
    pub path: StorePath,
    /// For `file://`: the file the store would write, so uploads can copy in the kernel
    /// (`staging::local_copy`) instead of streaming through user space.
    pub local_path: Option<std::path::PathBuf>,
}

/// Parse `s3://bucket/key`, `gs://bucket/key`, `abfs://container/key` (and `az://`),
/// `file:///abs/path` into a store + path: a store of its own (see [`Stores`] for one per bucket).
pub fn open(uri: &str) -> Result<Destination> {
    let (url, scheme, path) = parse(uri)?;
    let store = build(uri, scheme)?;
    Ok(destination(uri, &url, store, path))
}

/// Opened stores, one per bucket (container, filesystem), for a caller that opens many URIs in
/// few buckets: an S3, GCS or Azure client keeps its connection pool and its credentials, so
/// opening one per object would cost a TLS handshake (and, with web identity, a token exchange)
/// every time. Never emptied: a deployment writes to a handful of buckets, and only Flyte's
/// backend may name them (the gRPC port is the backend's alone).
#[derive(Default)]
pub struct Stores {
    open: std::sync::Mutex<std::collections::HashMap<String, Arc<dyn ObjectStore>>>,
}

impl Stores {
    /// [`open`], with the store of `uri`'s bucket built the first time and shared after.
    pub fn open(&self, uri: &str) -> Result<Destination> {
        let (url, scheme, path) = parse(uri)?;
        let key = store_key(&url);
        let cached = self.lock().get(&key).cloned();
        let store = match cached {
            Some(store) => store,
            None => {
                // Built outside the lock (a builder reads the environment); of two racing
                // builds the first inserted is kept, the other dropped unused.
                let built = build(uri, scheme)?;
                self.lock().entry(key).or_insert(built).clone()
            }
        };
        Ok(destination(uri, &url, store, path))
    }

    /// `store` as the one of `key`'s bucket: a test's store where a URI would open one.
    #[cfg(test)]
    pub(crate) fn insert(&self, key: &str, store: Arc<dyn ObjectStore>) {
        self.lock().insert(key.to_string(), store);
    }

    /// How many stores are open.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Arc<dyn ObjectStore>>> {
        // Held only to look up or insert: a panic cannot leave the map half-written.
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Which store a URI's object is in: its scheme and authority (`s3://bucket`, `gs://bucket`,
/// `abfs://container@account...`, `file://`), and for `http(s)://` URLs (path-style S3, Azure's
/// blob endpoint) the first path segment too, which names the bucket or container there.
pub fn store_key(url: &Url) -> String {
    let base = &url[..url::Position::BeforePath];
    match url.scheme() {
        "http" | "https" => {
            let bucket = url.path_segments().and_then(|mut s| s.next()).unwrap_or("");
            format!("{base}/{bucket}")
        }
        _ => base.to_string(),
    }
}

fn parse(uri: &str) -> Result<(Url, ObjectStoreScheme, StorePath)> {
    let bad = |reason: String| StagingError::BadUri {
        uri: uri.to_string(),
        reason,
    };
    let url = Url::parse(uri).map_err(|e| bad(e.to_string()))?;
    let (scheme, path) = ObjectStoreScheme::parse(&url).map_err(|_| {
        bad("use s3://bucket/key, gs://bucket/key, abfs://container/key or file:///path".into())
    })?;
    if !matches!(
        scheme,
        ObjectStoreScheme::Local
            | ObjectStoreScheme::AmazonS3
            | ObjectStoreScheme::GoogleCloudStorage
            | ObjectStoreScheme::MicrosoftAzure
    ) {
        return Err(bad(format!(
            "{scheme:?} is not an output destination: use s3://, gs://, abfs:// (or az://) or file://"
        )));
    }
    if path.as_ref().is_empty() {
        return Err(bad("no object key after the bucket".into()));
    }
    Ok((url, scheme, path))
}

/// The store of a URI `parse` accepted: credentials and endpoint from the environment.
fn build(uri: &str, scheme: ObjectStoreScheme) -> Result<Arc<dyn ObjectStore>> {
    let store_err = |source| StagingError::Store {
        uri: uri.into(),
        source,
    };
    Ok(match scheme {
        ObjectStoreScheme::AmazonS3 => Arc::new(
            object_store::aws::AmazonS3Builder::from_env()
                .with_url(uri)
                .build()
                .map_err(store_err)?,
        ),
        ObjectStoreScheme::GoogleCloudStorage => Arc::new(
            object_store::gcp::GoogleCloudStorageBuilder::from_env()
                .with_url(uri)
                .build()
                .map_err(store_err)?,
        ),
        ObjectStoreScheme::MicrosoftAzure => Arc::new(
            object_store::azure::MicrosoftAzureBuilder::from_env()
                .with_url(uri)
                .build()
                .map_err(store_err)?,
        ),
        // `parse` lets nothing else through.
        _ => Arc::new(object_store::local::LocalFileSystem::new()),
    })
}

fn destination(uri: &str, url: &Url, store: Arc<dyn ObjectStore>, path: StorePath) -> Destination {
    let local_path = (url.scheme() == "file")
        .then(|| {
            object_store::local::LocalFileSystem::new()
                .path_to_filesystem(&path)
                .ok()
        })
        .flatten();
    Destination {
        uri: uri.to_string(),
        store_key: store_key(url),
        store,
        path,
        local_path,
    }
}

/// `<prefix>/<relative>`, each `/`-separated segment of `relative` percent-encoded so that any
/// file name (spaces, `#`, `?`, `%`) round-trips through the URI to the same object key.
pub fn join_uri(prefix: &str, relative: &str) -> String {
    let mut out = prefix.trim_end_matches('/').to_string();
    for seg in relative.split('/').filter(|s| !s.is_empty()) {
        out.push('/');
        out.push_str(&encode_segment(seg));
    }
    out
}

fn encode_segment(seg: &str) -> String {
    let mut s = String::with_capacity(seg.len());
    for b in seg.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

/// Part size for a file of `size` bytes: [`PART_SIZE`], grown so the part count stays under S3's
/// 10,000 (a 100 GB file gets ~10 MB parts). Memory stays bounded by the file size / 10,000.
pub fn part_size_for(size: u64) -> usize {
    let needed = size.div_ceil(MAX_PARTS - 1);
    (needed as usize).max(PART_SIZE)
}

fn store_err(dest: &Destination) -> impl Fn(object_store::Error) -> StagingError + '_ {
    move |e| StagingError::Store {
        uri: dest.uri.clone(),
        source: e,
    }
}

/// The error of a write to `dest`: a bucket or container that does not exist is named (a write
/// into one is a 404, which `object_store` reports as the object "not found", or, for S3, as a
/// generic error carrying S3's `NoSuchBucket`).
fn write_err(dest: &Destination) -> impl Fn(object_store::Error) -> StagingError + '_ {
    move |e| {
        let missing = matches!(e, object_store::Error::NotFound { .. })
            || ["NoSuchBucket", "ContainerNotFound"]
                .iter()
                .any(|code| e.to_string().contains(code));
        match bucket_of(&dest.uri).filter(|_| missing) {
            Some(bucket) => StagingError::NoBucket {
                uri: dest.uri.clone(),
                bucket,
                source: e,
            },
            None => store_err(dest)(e),
        }
    }
}

/// The bucket (`s3://`, `gs://`) or container (`abfs://`, `az://`, also as
/// `abfs://container@account.dfs.core.windows.net/`) of a destination URI; `None` for `file://`.
pub fn bucket_of(uri: &str) -> Option<String> {
    let url = Url::parse(uri).ok()?;
    if url.scheme() == "file" {
        return None;
    }
    if !url.username().is_empty() {
        return Some(url.username().to_string());
    }
    url.host_str().map(str::to_string)
}

// `redact` lives with the error type that shows store errors (error.rs); re-exported for the
// callers that print a store's error themselves.
pub use super::error::redact;

/// Stream `reader` (expected `size` bytes) to `dest`. Small files go in one PUT; larger ones as
/// a multipart upload with at most [`MAX_PARTS_IN_FLIGHT`] parts in flight. On cancel the
/// multipart upload is aborted so no orphaned parts stay behind.
pub async fn upload_reader<R>(
    mut reader: R,
    size: u64,
    dest: &Destination,
    ctl: &TransferCtl,
) -> Result<u64>
where
    R: AsyncRead + Unpin + Send,
{
    let part = part_size_for(size);
    let read_err = |e| StagingError::Io {
        op: "read for upload to",
        path: dest.uri.clone(),
        source: e,
    };
    // Fill the first part: if the file ends inside it, a single PUT is enough.
    let mut first = BytesMut::with_capacity(part.min(size as usize + 1).max(1));
    while first.len() < part {
        ctl.check()?;
        let want = (part - first.len()).min(READ_CHUNK);
        let mut limited = (&mut reader).take(want as u64);
        let n = tokio::select! {
            biased;
            _ = ctl.cancelled() => return Err(StagingError::Cancelled),
            n = limited.read_buf(&mut first) => n.map_err(read_err)?,
        };
        if n == 0 {
            let len = first.len() as u64;
            tokio::select! {
                biased;
                _ = ctl.cancelled() => return Err(StagingError::Cancelled),
                r = dest.store.put(&dest.path, PutPayload::from_bytes(first.freeze())) => {
                    r.map_err(write_err(dest))?;
                }
            }
            ctl.progress.add_done(len);
            return Ok(len);
        }
    }
    let upload = dest
        .store
        .put_multipart(&dest.path)
        .await
        .map_err(write_err(dest))?;
    let mut writer = WriteMultipart::new_with_chunk_size(upload, part);
    let mut sent = first.len() as u64;
    writer.put(first.freeze());
    ctl.progress.add_done(sent);
    let result: Result<()> = async {
        loop {
            tokio::select! {
                biased;
                _ = ctl.cancelled() => return Err(StagingError::Cancelled),
                r = writer.wait_for_capacity(MAX_PARTS_IN_FLIGHT) => r.map_err(write_err(dest))?,
            }
            let mut buf = BytesMut::with_capacity(READ_CHUNK);
            let n = tokio::select! {
                biased;
                _ = ctl.cancelled() => return Err(StagingError::Cancelled),
                n = reader.read_buf(&mut buf) => n.map_err(read_err)?,
            };
            if n == 0 {
                return Ok(());
            }
            sent += n as u64;
            ctl.progress.add_done(n as u64);
            writer.put(buf.freeze());
        }
    }
    .await;
    match result {
        Ok(()) => {
            tokio::select! {
                biased;
                _ = ctl.cancelled() => return Err(StagingError::Cancelled),
                r = writer.finish() => { r.map_err(write_err(dest))?; }
            }
            Ok(sent)
        }
        Err(e) => {
            if let Err(abort) = writer.abort().await {
                tracing::warn!(uri = %dest.uri, error = %redact(&abort), "aborting a multipart upload failed");
            }
            Err(e)
        }
    }
}

/// Is there an object at `dest` of `size` bytes, last modified at or after `written` (when the
/// job wrote its file)? That is this output, already uploaded.
pub async fn published_since(
    dest: &Destination,
    size: u64,
    written: std::time::SystemTime,
) -> Result<bool> {
    match dest.store.head(&dest.path).await {
        Ok(meta) => {
            let modified: std::time::SystemTime = meta.last_modified.into();
            Ok(meta.size == size && modified >= written)
        }
        Err(object_store::Error::NotFound { .. }) => Ok(false),
        Err(e) => Err(store_err(dest)(e)),
    }
}

/// Does the object (file) or any object under the prefix (dir) exist?
pub async fn exists(dest: &Destination, dir: bool) -> Result<bool> {
    if dir {
        let mut list = dest.store.list(Some(&dest.path));
        match list.next().await {
            Some(Ok(_)) => Ok(true),
            Some(Err(e)) => Err(store_err(dest)(e)),
            None => Ok(false),
        }
    } else {
        match dest.store.head(&dest.path).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(store_err(dest)(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_schemes() {
        let d = open("file:///tmp/out/x").unwrap();
        assert_eq!(d.path.as_ref(), "tmp/out/x");
        let d = open("s3://bucket/prefix/a b").unwrap();
        assert_eq!(d.path.as_ref(), "prefix/a b");
        for bad in ["not a uri", "ftp://h/x", "s3://bucket", "s3://bucket/"] {
            assert!(
                matches!(open(bad), Err(StagingError::BadUri { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn stores_are_one_per_bucket() {
        let key = |u: &str| store_key(&Url::parse(u).unwrap());
        assert_eq!(key("s3://outputs/runs/a/0"), "s3://outputs");
        assert_eq!(key("gs://outputs/x"), "gs://outputs");
        assert_eq!(
            key("abfs://c@acct.dfs.core.windows.net/x"),
            "abfs://c@acct.dfs.core.windows.net"
        );
        assert_eq!(key("file:///tmp/a/b"), "file://");
        assert_eq!(
            key("https://s3.us-east-1.amazonaws.com/outputs/runs/a"),
            "https://s3.us-east-1.amazonaws.com/outputs"
        );
        let stores = Stores::default();
        let a = stores.open("s3://outputs/runs/a/0/.claim").unwrap();
        let b = stores.open("s3://outputs/runs/b/0/.claim").unwrap();
        let other = stores.open("s3://other/runs/a").unwrap();
        assert!(Arc::ptr_eq(&a.store, &b.store));
        assert!(!Arc::ptr_eq(&a.store, &other.store));
        assert_eq!(
            (a.path.as_ref(), b.path.as_ref()),
            ("runs/a/0/.claim", "runs/b/0/.claim")
        );
        let f = stores.open("file:///tmp/x/y").unwrap();
        assert_eq!(
            f.local_path.as_deref(),
            Some(std::path::Path::new("/tmp/x/y"))
        );
        assert_eq!(stores.len(), 3);
        assert!(matches!(
            stores.open("s3://outputs"),
            Err(StagingError::BadUri { .. })
        ));
        assert_eq!(stores.len(), 3);
    }

    #[test]
    fn every_cloud_scheme_is_built_in() {
        // Whether a store can be built depends on the environment (Azure needs an account);
        // what matters is that none is refused as unsupported by this build.
        for uri in ["gs://bucket/k", "abfs://container/k", "az://container/k"] {
            assert!(
                !matches!(open(uri), Err(StagingError::BadUri { .. })),
                "{uri}"
            );
        }
    }

    #[test]
    fn buckets_and_redaction() {
        assert_eq!(bucket_of("s3://b1/x").as_deref(), Some("b1"));
        assert_eq!(bucket_of("gs://b2/x/y").as_deref(), Some("b2"));
        assert_eq!(bucket_of("abfs://c3/x").as_deref(), Some("c3"));
        assert_eq!(
            bucket_of("abfs://c4@acct.dfs.core.windows.net/x").as_deref(),
            Some("c4")
        );
        assert_eq!(bucket_of("file:///tmp/x"), None);
        let msg = "Error performing PUT https://acct.blob.core.windows.net/c/k?sv=2022&sig=SECRETSIG%3D&comp=block in 1s - 404: body";
        let r = redact(&msg);
        assert!(!r.contains("SECRETSIG"), "{r}");
        assert!(
            r.contains("https://acct.blob.core.windows.net/c/k?<query redacted> in 1s"),
            "{r}"
        );
    }

    #[test]
    fn join_round_trips_odd_names() {
        let u = join_uri("s3://b/p/", "d/a b#1?%.txt");
        assert_eq!(u, "s3://b/p/d/a%20b%231%3F%25.txt");
        assert_eq!(open(&u).unwrap().path.as_ref(), "p/d/a b#1?%.txt");
    }

    #[test]
    fn part_size_keeps_under_part_limit() {
        assert_eq!(part_size_for(0), PART_SIZE);
        let huge = 200 * 1024 * 1024 * 1024u64;
        assert!(huge.div_ceil(part_size_for(huge) as u64) < MAX_PARTS);
    }
}
