//! Where a claim lives and how it is read and written: a folder of immutable records, each
//! created only if absent (the module doc of `claim` says why), and the start-up probe that a
//! store honours that.
//!
//! Stores are opened as staging opens an output destination (`staging::objstore::open`: the
//! same schemes, the same credentials from the environment), so a claim is wherever that
//! deployment's outputs can be written.

use std::sync::Arc;
use std::time::SystemTime;

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use super::format::{FORMAT_VERSION, Record};
use super::{ClaimError, Result};
use crate::render::spec::ExecutionIdentity;
use crate::staging::objstore;

/// The claim's folder under an execution's output prefix.
pub const CLAIM_DIR: &str = ".slurm-connector/claim";
/// Under a connector-owned prefix: `<prefix>/claims/<sha256 of the identity>/`.
const OWNED_DIR: &str = "claims";
/// Where [`probe`] writes its throwaway claim, under the prefix it is given.
const PROBE_DIR: &str = ".slurm-connector/probe";
/// A record's name is its sequence number in ten digits (every `u32`), so names sort as numbers.
const NAME_DIGITS: usize = 10;

/// One execution's claim in its store.
#[derive(Debug, Clone)]
pub struct ClaimStore {
    store: Arc<dyn ObjectStore>,
    dir: Path,
    /// The folder's URI, for messages.
    uri: String,
}

/// The claim as read: its highest record and that record's number, the point a writer advances
/// from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Current {
    seq: u32,
    record: Record,
}

impl Current {
    pub fn record(&self) -> &Record {
        &self.record
    }

    /// The record's number (1 for the claim's first).
    pub fn seq(&self) -> u32 {
        self.seq
    }
}

fn object_name(seq: u32) -> String {
    format!("{seq:0NAME_DIGITS$}.json")
}

fn seq_of(name: &str) -> Option<u32> {
    let digits = name.strip_suffix(".json")?;
    if digits.len() != NAME_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The folder of the claim of the execution writing to `output_prefix`.
pub(super) fn output_prefix_uri(output_prefix: &str) -> String {
    objstore::join_uri(output_prefix, CLAIM_DIR)
}

/// The folder of `id`'s claim under a prefix of the connector's own.
pub(super) fn connector_prefix_uri(prefix: &str, id: &ExecutionIdentity) -> String {
    objstore::join_uri(prefix, &format!("{OWNED_DIR}/{}", identity_hash(id)))
}

/// A fresh folder for a throwaway claim of [`probe`] under `prefix`.
pub(super) fn probe_uri(prefix: &str) -> String {
    objstore::join_uri(
        prefix,
        &format!("{PROBE_DIR}/{:016x}", rand::random::<u64>()),
    )
}

/// The execution's whole digest ([`ExecutionIdentity::digest`]) in hex: a folder name no run
/// name can be crafted to share.
fn identity_hash(id: &ExecutionIdentity) -> String {
    id.digest().iter().map(|b| format!("{b:02x}")).collect()
}

impl ClaimStore {
    /// The claim of the execution writing to `output_prefix`:
    /// `<output_prefix>/.slurm-connector/claim/`. The prefix is unique per Flyte attempt, so it
    /// names the execution, and the deployment can already write there.
    pub fn under_output_prefix(output_prefix: &str) -> Result<Self> {
        Self::open(&objstore::open, &output_prefix_uri(output_prefix))
    }

    /// The claim of `id` under a prefix of the connector's own (for deployments whose
    /// credentials cannot write under the output prefixes): `<prefix>/claims/<sha256>/`.
    pub fn under_connector_prefix(prefix: &str, id: &ExecutionIdentity) -> Result<Self> {
        Self::open(&objstore::open, &connector_prefix_uri(prefix, id))
    }

    /// The claim in the folder `uri`, its store opened by `open` (one of its own, or a
    /// deployment's shared one: `objstore::Stores::open`).
    pub(super) fn open(
        open: &dyn Fn(&str) -> Result<objstore::Destination, crate::staging::StagingError>,
        uri: &str,
    ) -> Result<Self> {
        let dest = open(uri).map_err(|e| ClaimError::Location(Box::new(e)))?;
        Ok(Self::new(dest.store, dest.path, dest.uri))
    }

    /// A claim in the folder `dir` of `store` (`uri` names it in messages): for a store built
    /// otherwise than from a URI.
    pub fn new(store: Arc<dyn ObjectStore>, dir: Path, uri: impl Into<String>) -> Self {
        ClaimStore {
            store,
            dir,
            uri: uri.into(),
        }
    }

    /// The claim folder's URI.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    fn path(&self, seq: u32) -> Path {
        self.dir.clone().join(object_name(seq))
    }

    fn store_err(
        &self,
        op: &'static str,
        object: String,
    ) -> impl FnOnce(object_store::Error) -> ClaimError + '_ {
        move |source| ClaimError::Store {
            uri: self.uri.clone(),
            op,
            object,
            source: Box::new(source),
        }
    }

    /// Every object in the claim's folder.
    async fn list(&self) -> Result<Vec<object_store::ObjectMeta>> {
        self.store
            .list(Some(&self.dir))
            .try_collect()
            .await
            .map_err(self.store_err("list", String::new()))
    }

    /// The claim's current record; `None` when nothing claimed the execution yet. Two requests:
    /// a listing of the folder, a read of its highest record.
    pub async fn read(&self) -> Result<Option<Current>> {
        let listed = self.list().await?;
        let Some(seq) = listed
            .iter()
            .filter_map(|m| m.location.filename().and_then(seq_of))
            .max()
        else {
            return Ok(None);
        };
        let object = object_name(seq);
        let bytes = self
            .store
            .get(&self.path(seq))
            .await
            .map_err(self.store_err("read", object.clone()))?
            .bytes()
            .await
            .map_err(self.store_err("read", object.clone()))?;
        let record = parse(&bytes).map_err(|reason| ClaimError::Unreadable {
            uri: self.uri.clone(),
            object,
            reason,
        })?;
        Ok(Some(Current { seq, record }))
    }

    /// Claims an execution nothing claimed yet: record 1, if absent. [`ClaimError::Conflict`]
    /// when another writer created it first.
    pub async fn create(&self, record: Record) -> Result<Current> {
        self.put_new(1, record).await
    }

    /// Writes `record` after `from` (what [`read`](Self::read) returned): refused when it may
    /// not follow it ([`Record::may_follow`]), [`ClaimError::Conflict`] when the claim changed
    /// since `from` was read.
    pub async fn advance(&self, from: &Current, record: Record) -> Result<Current> {
        let refused = |reason: String| ClaimError::Refused {
            uri: self.uri.clone(),
            object: object_name(from.seq),
            from: from.record.state.name(),
            to: record.state.name(),
            reason,
        };
        from.record
            .may_follow(&record, SystemTime::now())
            .map_err(refused)?;
        let seq = from
            .seq
            .checked_add(1)
            .ok_or_else(|| refused("the claim has no record numbers left".into()))?;
        self.put_new(seq, record).await
    }

    async fn put_new(&self, seq: u32, record: Record) -> Result<Current> {
        let object = object_name(seq);
        let path = self.path(seq);
        let body = bytes::Bytes::from(serde_json::to_vec(&record).expect("a record serializes"));
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match self
            .store
            .put_opts(&path, PutPayload::from(body.clone()), opts)
            .await
        {
            Ok(_) => Ok(Current { seq, record }),
            Err(object_store::Error::AlreadyExists { .. }) => {
                // object_store retries a conditional PUT answered 5xx, 429 or 408: when the first
                // attempt had landed, the retry meets this very record. Byte for byte the same
                // (writer, millisecond, state) is this writer's own, a win, not a conflict.
                let existing = match self.store.get(&path).await {
                    Ok(got) => got.bytes().await.ok(),
                    Err(_) => None,
                };
                if existing.as_ref() == Some(&body) {
                    return Ok(Current { seq, record });
                }
                Err(ClaimError::Conflict {
                    uri: self.uri.clone(),
                    object,
                })
            }
            Err(e @ object_store::Error::NotImplemented { .. }) => {
                Err(ClaimError::NotConditional {
                    uri: self.uri.clone(),
                    reason: format!(
                        "its client refuses create-if-absent: {}",
                        crate::staging::error::redact(&e)
                    ),
                })
            }
            // The outcome is unknown (a timeout may come after the record landed): the caller
            // reads the claim again, and a current record equal to its own is its own.
            Err(e) => Err(self.store_err("create", object)(e)),
        }
    }

    /// Removes the claim's records (the probe's own throwaway claim; an execution's claim goes
    /// with its output prefix).
    async fn remove(&self) -> Result<()> {
        let listed = self.list().await?;
        for m in listed {
            let name = m.location.filename().unwrap_or_default().to_string();
            self.store
                .delete(&m.location)
                .await
                .map_err(self.store_err("delete", name))?;
        }
        Ok(())
    }
}

/// A record from its bytes: the version first, so a newer connector's record is named as such
/// rather than failing on a field this build does not know.
fn parse(bytes: &[u8]) -> Result<Record, String> {
    #[derive(serde::Deserialize)]
    struct Version {
        version: u32,
    }
    let v: Version = serde_json::from_slice(bytes)
        .map_err(|e| format!("not a claim record (no format version): {e}"))?;
    if v.version > FORMAT_VERSION {
        return Err(format!(
            "written by a newer connector (format version {}; this one reads up to \
             {FORMAT_VERSION}): run that version",
            v.version
        ));
    }
    serde_json::from_slice(bytes).map_err(|e| format!("not a claim record: {e}"))
}

/// Proves that the store at `prefix` (a URI the connector may write under, as an output
/// prefix) honours create-if-absent, the one primitive claims rest on: a throwaway claim under
/// `<prefix>/.slurm-connector/probe/<random>/` is created, read back, and created again, which
/// must fail as a conflict. `Err(ClaimError::NotConditional)` names the store and the fix; a
/// store that cannot be reached or written fails with its own error. The throwaway claim is
/// removed (a failure to remove it is logged, not fatal: it is a few bytes).
pub async fn probe(prefix: &str) -> Result<()> {
    probe_at(&ClaimStore::open(&objstore::open, &probe_uri(prefix))?).await
}

/// [`probe`] in the folder of `claim`, which must be a throwaway one (for a store built
/// otherwise than from a URI); its records are removed after.
pub async fn probe_at(claim: &ClaimStore) -> Result<()> {
    let result = probe_claim(claim).await;
    if let Err(e) = claim.remove().await {
        tracing::warn!(uri = %claim.uri, error = %e, "removing the conditional-write probe's objects failed");
    }
    result
}

/// What the start-up check of the deployment's claims found (`serve` logs it, `check` prints it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartCheck {
    /// The store at this prefix honours create-if-absent.
    Conditional { prefix: String },
    /// It does not, and a single replica was declared: nothing races it, so it is accepted.
    SingleReplica { prefix: String, reason: String },
    /// Claims go under each task's output prefix and no prefix was named to probe at start: each
    /// store is known only from the requests that name it.
    NotProbed,
}

impl std::fmt::Display for StartCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartCheck::Conditional { prefix } => {
                write!(f, "{prefix} honours conditional writes")
            }
            StartCheck::SingleReplica { prefix, reason } => write!(
                f,
                "{prefix} does not honour conditional writes ({reason}); accepted because \
                 FLYTE_SLURM_SINGLE_REPLICA=true: run exactly one replica"
            ),
            StartCheck::NotProbed => f.write_str(
                "under each task's output prefix, not probed at start (set \
                 FLYTE_SLURM_CLAIMS_PROBE to a prefix in the store Flyte writes outputs to)",
            ),
        }
    }
}

/// The start-up check of the deployment's claims: [`probe`] of the prefix `settings` name (the
/// connector's own, or the one named to probe with claims under output prefixes). A store that
/// does not honour conditional writes is an error unless a single replica is declared; a store
/// that cannot be reached or written is an error (no CreateTask could be claimed there).
pub async fn check_at_start(settings: &crate::config::claims::ClaimSettings) -> Result<StartCheck> {
    let Some(prefix) = settings.probe_prefix() else {
        return Ok(StartCheck::NotProbed);
    };
    match probe(prefix).await {
        Ok(()) => Ok(StartCheck::Conditional {
            prefix: prefix.to_string(),
        }),
        Err(ClaimError::NotConditional { reason, .. }) if settings.single_replica => {
            Ok(StartCheck::SingleReplica {
                prefix: prefix.to_string(),
                reason,
            })
        }
        Err(e) => Err(e),
    }
}

async fn probe_claim(claim: &ClaimStore) -> Result<()> {
    let not_conditional = |reason: String| ClaimError::NotConditional {
        uri: claim.uri.clone(),
        reason,
    };
    // Two writers' records (they differ in `by`): a second create of the same bytes would be
    // taken for a retry of the first and succeed.
    let first = claim
        .create(Record::new("probe-1", super::State::Deleted))
        .await?;
    match claim.read().await? {
        Some(read) if read == first => {}
        other => {
            return Err(not_conditional(format!(
                "a record just written reads back as {other:?}"
            )));
        }
    }
    match claim
        .create(Record::new("probe-2", super::State::Deleted))
        .await
    {
        Err(e) if e.is_conflict() => Ok(()),
        Err(e) => Err(e),
        Ok(_) => Err(not_conditional(format!(
            "a second create-if-absent of {} succeeded over the existing object",
            object_name(1)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_as_numbers() {
        assert_eq!(object_name(1), "0000000001.json");
        assert_eq!(object_name(u32::MAX), "4294967295.json");
        assert_eq!(seq_of("0000000012.json"), Some(12));
        for odd in [
            "12.json",
            "000000001a.json",
            "0000000001.json#1",
            "0000000001",
        ] {
            assert_eq!(seq_of(odd), None, "{odd}");
        }
    }

    #[test]
    fn a_newer_record_is_named_as_such() {
        let e = parse(br#"{"version":2,"by":"x","at":"2027-01-01T00:00:00Z","state":"new"}"#)
            .unwrap_err();
        assert!(e.contains("newer connector"), "{e}");
        let e = parse(b"[]").unwrap_err();
        assert!(e.contains("not a claim record"), "{e}");
    }

    #[test]
    fn identities_hash_apart() {
        let a = ExecutionIdentity {
            run_name: "ab".into(),
            action_name: "c".into(),
            ..ExecutionIdentity::default()
        };
        let b = ExecutionIdentity {
            run_name: "a".into(),
            action_name: "bc".into(),
            ..ExecutionIdentity::default()
        };
        assert_ne!(identity_hash(&a), identity_hash(&b));
        assert_eq!(identity_hash(&a).len(), 64);
        let c = ExecutionIdentity {
            attempt: 1,
            ..a.clone()
        };
        assert_ne!(identity_hash(&a), identity_hash(&c));
    }
}
