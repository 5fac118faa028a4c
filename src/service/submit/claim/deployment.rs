//! The deployment's claims: where each execution's claim is (under its output prefix, or under
//! a prefix of the connector's own: `FLYTE_SLURM_CLAIMS`), each store opened once per bucket and
//! proven once to honour create-if-absent, and this process as the holder its claims name.
//!
//! With claims under output prefixes the stores are known only from the requests that name them,
//! so the first claim in a store probes it ([`probe_at`], under that execution's own output
//! prefix): a store that does not honour conditional writes fails every CreateTask whose claim
//! would be there, with the store and the fix named, unless a single replica is declared. A
//! connector-owned prefix was probed before `serve` started (`check_at_start`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::OnceCell;

use super::protocol::Holder;
use super::store::{self, ClaimStore, probe_at};
use super::{ClaimError, Result};
use crate::config::claims::{ClaimLocation, ClaimSettings};
use crate::render::spec::ExecutionIdentity;
use crate::staging::objstore::Stores;

/// The claims of this process: its settings, its holder, the stores it opened.
pub struct Claims {
    settings: ClaimSettings,
    holder: Holder,
    stores: Stores,
    /// Per store ([`objstore::Destination::store_key`](crate::staging::objstore::Destination)):
    /// what its probe found. A probe that failed to reach the store leaves the cell empty, so
    /// the next claim there probes again.
    verdicts: Mutex<HashMap<String, Arc<OnceCell<Verdict>>>>,
}

/// What a store's probe found.
#[derive(Debug, Clone)]
enum Verdict {
    Conditional,
    NotConditional { reason: String },
}

impl Claims {
    /// This process's claims, its holder drawn once (a restarted process is another holder).
    pub fn new(settings: ClaimSettings) -> Claims {
        Claims {
            holder: Holder::of_process(&settings),
            settings,
            stores: Stores::default(),
            verdicts: Mutex::default(),
        }
    }

    /// This process, as its claims name it.
    pub fn holder(&self) -> &Holder {
        &self.holder
    }

    pub fn settings(&self) -> &ClaimSettings {
        &self.settings
    }

    /// How many stores claims were opened in.
    pub fn stores_open(&self) -> usize {
        self.stores.len()
    }

    /// The claim of the execution `id`, which writes its outputs to `output_prefix`: there, or
    /// under the connector's own prefix. With claims under output prefixes, a store met for the
    /// first time is probed first.
    pub async fn of(&self, output_prefix: &str, id: &ExecutionIdentity) -> Result<ClaimStore> {
        let open = |uri: &str| self.stores.open(uri);
        match &self.settings.location {
            ClaimLocation::Prefix(prefix) => {
                ClaimStore::open(&open, &store::connector_prefix_uri(prefix, id))
            }
            ClaimLocation::OutputPrefix => {
                let uri = store::output_prefix_uri(output_prefix);
                let dest = open(&uri).map_err(|e| ClaimError::Location(Box::new(e)))?;
                self.check(&dest.store_key, output_prefix).await?;
                Ok(ClaimStore::new(dest.store, dest.path, dest.uri))
            }
        }
    }

    /// The claim whose folder is `uri` (a meta's `claim`: opened, and its store checked, by the
    /// CreateTask that named it).
    pub fn at(&self, uri: &str) -> Result<ClaimStore> {
        ClaimStore::open(&|u: &str| self.stores.open(u), uri)
    }

    /// Whether the store `key` (where `prefix` is) may hold claims: probed under `prefix` the
    /// first time, the verdict kept.
    async fn check(&self, key: &str, prefix: &str) -> Result<()> {
        let cell = self.cells().entry(key.to_string()).or_default().clone();
        let verdict = cell
            .get_or_try_init(|| async {
                let open = |uri: &str| self.stores.open(uri);
                match probe_at(&ClaimStore::open(&open, &store::probe_uri(prefix))?).await {
                    Ok(()) => {
                        tracing::info!(store = key, "claims: the store honours conditional writes");
                        Ok(Verdict::Conditional)
                    }
                    Err(ClaimError::NotConditional { reason, .. }) => {
                        if self.settings.single_replica {
                            tracing::warn!(store = key, %reason, "claims: the store does not honour conditional writes; accepted because FLYTE_SLURM_SINGLE_REPLICA=true");
                        } else {
                            tracing::error!(store = key, %reason, "claims: the store does not honour conditional writes: CreateTasks whose outputs go there are refused");
                        }
                        Ok(Verdict::NotConditional { reason })
                    }
                    Err(e) => Err(e),
                }
            })
            .await?;
        match verdict {
            Verdict::Conditional => Ok(()),
            Verdict::NotConditional { .. } if self.settings.single_replica => Ok(()),
            Verdict::NotConditional { reason } => Err(ClaimError::NotConditional {
                uri: key.to_string(),
                reason: reason.clone(),
            }),
        }
    }

    fn cells(&self) -> MutexGuard<'_, HashMap<String, Arc<OnceCell<Verdict>>>> {
        // Held only to look up or insert a cell: a panic cannot leave the map half-written.
        self.verdicts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStore;

    fn identity(run: &str) -> ExecutionIdentity {
        ExecutionIdentity {
            run_name: run.into(),
            action_name: "a0".into(),
            ..ExecutionIdentity::default()
        }
    }

    /// An S3 client that refuses create-if-absent before any request (object_store's
    /// `AWS_CONDITIONAL_PUT=disabled`, for S3-compatible servers without `If-None-Match`), put
    /// where the claims' bucket would be opened: the endpoint is a closed port, so nothing else
    /// could make a claim there pass.
    fn not_conditional(claims: &Claims, bucket: &str) {
        let s3: Arc<dyn ObjectStore> = Arc::new(
            object_store::aws::AmazonS3Builder::new()
                .with_bucket_name(bucket)
                .with_region("us-east-1")
                .with_endpoint("http://127.0.0.1:9")
                .with_allow_http(true)
                .with_access_key_id("AKIDEXAMPLE")
                .with_secret_access_key("claims-secret-key")
                .with_conditional_put(object_store::aws::S3ConditionalPut::Disabled)
                .with_retry(object_store::RetryConfig {
                    max_retries: 0,
                    ..Default::default()
                })
                .build()
                .unwrap(),
        );
        claims.stores.insert(&format!("s3://{bucket}"), s3);
    }

    #[tokio::test]
    async fn a_store_is_probed_once_and_its_claims_share_it() {
        let root = scratch("probed-once");
        let claims = Claims::new(ClaimSettings::default());
        let prefix = |run: &str| format!("file://{}/{run}/a0", root.display());
        let a = claims.of(&prefix("r1"), &identity("r1")).await.unwrap();
        let b = claims.of(&prefix("r2"), &identity("r2")).await.unwrap();
        assert!(
            a.uri().ends_with("/r1/a0/.slurm-connector/claim"),
            "{}",
            a.uri()
        );
        assert!(
            b.uri().ends_with("/r2/a0/.slurm-connector/claim"),
            "{}",
            b.uri()
        );
        assert_eq!(claims.stores_open(), 1);
        // One probe, under the first execution's prefix, its records removed after (the
        // local filesystem leaves its empty folder).
        let probes: Vec<_> = std::fs::read_dir(root.join("r1/a0/.slurm-connector/probe"))
            .unwrap()
            .map(|d| d.unwrap().path())
            .collect();
        assert_eq!(probes.len(), 1, "{probes:?}");
        assert_eq!(std::fs::read_dir(&probes[0]).unwrap().count(), 0);
        assert!(!root.join("r2/a0/.slurm-connector").exists());
        assert!(matches!(
            claims.cells()["file://"].get(),
            Some(Verdict::Conditional)
        ));
        std::fs::remove_dir_all(root).unwrap();
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "slurm-connector-claims-{name}-{:016x}",
            rand::random::<u64>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[tokio::test]
    async fn a_store_without_conditional_writes_refuses_its_claims_unless_single_replica() {
        let claims = Claims::new(ClaimSettings::default());
        not_conditional(&claims, "outputs");
        for run in ["r1", "r2"] {
            let e = claims
                .of(&format!("s3://outputs/{run}/a0"), &identity(run))
                .await
                .unwrap_err();
            let msg = e.to_string();
            assert!(matches!(e, ClaimError::NotConditional { .. }), "{msg}");
            for part in ["object store s3://outputs ", "run a single replica"] {
                assert!(msg.contains(part), "{part:?} in {msg}");
            }
            assert!(!msg.contains("claims-secret-key"), "{msg}");
        }
        let single = Claims::new(ClaimSettings {
            single_replica: true,
            ..ClaimSettings::default()
        });
        not_conditional(&single, "outputs");
        let c = single
            .of("s3://outputs/r1/a0", &identity("r1"))
            .await
            .unwrap();
        assert_eq!(c.uri(), "s3://outputs/r1/a0/.slurm-connector/claim");
    }

    #[tokio::test]
    async fn a_connector_prefix_is_not_probed_again() {
        let root = scratch("connector-prefix");
        let claims = Claims::new(ClaimSettings {
            location: ClaimLocation::Prefix(format!("file://{}/claims", root.display())),
            ..ClaimSettings::default()
        });
        let c = claims
            .of("s3://elsewhere/r1/a0", &identity("r1"))
            .await
            .unwrap();
        assert!(c.uri().contains("/claims/claims/"), "{}", c.uri());
        assert!(claims.cells().is_empty());
        std::fs::remove_dir_all(root).unwrap();
    }
}
