//! CreateTask's check of a pre-staged image (the cluster's image map chose a file for the task's
//! image): a file the connector can see through staging and that is not there fails the task at
//! once, instead of a job that queues, starts and only then fails in Pyxis or Apptainer.
//!
//! Where the connector cannot see the path (no staging, or a path outside the shared roots such as
//! a node-local `/images`), it is not checked here; the rendered script checks it on the node
//! and fails with a message naming the file and the rule (see `render/script.rs`).

use crate::render::StagedImage;
use crate::service::error::ServiceError;
use crate::staging::{Staging, StagingError};

pub async fn check(
    cluster: &str,
    staging: Option<&dyn Staging>,
    image: &StagedImage,
) -> Result<(), ServiceError> {
    let Some(staging) = staging else {
        return Ok(());
    };
    match staging.stat(&image.path).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(ServiceError::Invalid(format!(
            "image `{}`: the image rule `{}` of cluster `{cluster}` maps it to the pre-staged file \
             {}, which does not exist; stage the image there (e.g. `enroot import -o {} docker://...` \
             for Pyxis, `apptainer build {} docker://...` for Apptainer) or fix the rule in the \
             connector's config file",
            image.reference, image.pattern, image.path, image.path, image.path
        ))),
        // Outside what the connector may read: the job's own check reports it.
        Err(StagingError::Refused { .. }) => Ok(()),
        Err(e) => {
            // Staging hiccupped: not a reason to fail the task (the job checks it too).
            tracing::warn!(cluster, path = %image.path, error = %e, "could not check the pre-staged image; the job checks it on the node");
            Ok(())
        }
    }
}
