//! An object store that asks a hook before each request it passes on: the claim's tests make a
//! replica's store die mid-batch with it, the claim's bench counts requests with it.

use std::fmt;
use std::sync::Arc;

use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// The kind of request a hook is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Put,
    Get,
    List,
    Other,
}

/// Decides, before each request, whether it fails (`Err`) or passes on.
pub trait Hook: fmt::Debug + Send + Sync + 'static {
    fn before(&self, op: Op) -> object_store::Result<()>;
}

/// `inner`, with `hook` asked before each request.
#[derive(Debug)]
pub struct Hooked<H> {
    pub inner: Arc<dyn ObjectStore>,
    pub hook: H,
}

impl<H> fmt::Display for Hooked<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hooked({})", self.inner)
    }
}

#[async_trait::async_trait]
impl<H: Hook> ObjectStore for Hooked<H> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.hook.before(Op::Put)?;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.hook.before(Op::Other)?;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.hook.before(Op::Get)?;
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        if let Err(e) = self.hook.before(Op::List) {
            return Box::pin(futures::stream::once(async move { Err(e) }));
        }
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.hook.before(Op::List)?;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.hook.before(Op::Other)?;
        self.inner.copy_opts(from, to, options).await
    }
}
