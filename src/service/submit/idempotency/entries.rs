//! What the index holds: per key, the jobs carrying it (`Jobs`, with what was `Seen` of each:
//! awaiting its release, an element of a coalesced array); per job, its key or keys (`Keys`);
//! and how a job record's keys are read.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use crate::render::{key_of_record, record_keys};
use crate::slurmrestd::{JobId, JobInfo, JobRef};

/// One job carrying a key, as the last listing saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Still held for the duplicate check (its replica may be gone before releasing it).
    pub awaiting_release: bool,
    /// When this process first saw it.
    pub since: Instant,
    /// The key is one element of a coalesced job array (the job is the array's id).
    pub element: Option<Element>,
}

/// One element of a coalesced job array (`service/submit/coalesce`): index `index` of an array
/// whose indices are `array`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    pub index: u32,
    pub array: ArrayIndices,
}

impl Element {
    /// Element `index` of an array of `of` elements, `0-(of-1)` (the keys' arrays).
    pub fn of(index: u32, of: u32) -> Element {
        Element {
            index,
            array: ArrayIndices::first(of),
        }
    }
}

/// A job array's indices as it was submitted, in Slurm's syntax: `0-(n-1)` for a batch whose
/// every member it holds; for a batch through claims, the members this array holds (gaps where
/// another replica holds a member), so that every task's meta names what the array has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrayIndices(Arc<str>);

impl ArrayIndices {
    /// `0-(n-1)`.
    pub fn first(n: u32) -> ArrayIndices {
        ArrayIndices(format!("0-{}", n.saturating_sub(1)).into())
    }

    /// Exactly `indices`.
    pub fn exact(indices: &[u32]) -> ArrayIndices {
        ArrayIndices(crate::render::array::expr(indices).into())
    }

    /// An expression read back (a claim's record), as it is: the meta that names it is read by
    /// `ResourceMeta::array_indices`, which says what is wrong with one no submit wrote.
    pub fn from_expr(expr: &str) -> ArrayIndices {
        ArrayIndices(expr.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Where an execution runs: a job, or one element of a coalesced array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub job_id: JobId,
    pub element: Option<Element>,
}

impl Placement {
    pub fn job(job_id: JobId) -> Placement {
        Placement {
            job_id,
            element: None,
        }
    }

    /// What a cancel of this execution addresses.
    pub fn target(&self) -> JobRef {
        JobRef {
            id: self.job_id,
            element: self.element.as_ref().map(|e| e.index),
        }
    }
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.target().fmt(f)
    }
}

/// The keys a job carries: one execution's, or each element's of a coalesced array.
#[derive(Debug, Clone)]
pub(super) enum Keys {
    One(Arc<str>),
    Elements(Arc<[Arc<str>]>),
}

impl Keys {
    pub(super) fn iter(&self) -> impl Iterator<Item = &Arc<str>> {
        let (one, many) = match self {
            Keys::One(k) => (Some(k), &[][..]),
            Keys::Elements(ks) => (None, &ks[..]),
        };
        one.into_iter().chain(many.iter())
    }
}

/// The jobs carrying one key, lowest id first. Almost always one: a `Vec` holds it in 32 bytes
/// where a `BTreeMap` allocated a whole node (~350), which made most of the index's memory.
#[derive(Debug, Default)]
pub(super) struct Jobs(Vec<(JobId, Seen)>);

impl Jobs {
    pub(super) fn lowest(&self) -> Option<&(JobId, Seen)> {
        self.0.first()
    }

    pub(super) fn get(&self, id: &JobId) -> Option<&Seen> {
        self.0.iter().find(|(j, _)| j == id).map(|(_, s)| s)
    }

    pub(super) fn get_mut(&mut self, id: &JobId) -> Option<&mut Seen> {
        self.0.iter_mut().find(|(j, _)| j == id).map(|(_, s)| s)
    }

    /// Sets `id`'s entry (`replace`: even when it has one).
    pub(super) fn put(&mut self, id: JobId, seen: Seen, replace: bool) {
        match self.0.binary_search_by_key(&id, |(j, _)| *j) {
            Ok(i) if replace => self.0[i].1 = seen,
            Ok(_) => {}
            Err(i) => self.0.insert(i, (id, seen)),
        }
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &(JobId, Seen)> {
        self.0.iter()
    }

    pub(super) fn retain(&mut self, mut keep: impl FnMut(&JobId, &Seen) -> bool) {
        self.0.retain(|(j, s)| keep(j, s));
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The key's shared text: the one `by_key` holds, else a new one.
pub(super) fn shared_key(by_key: &HashMap<Arc<str>, Jobs>, key: &str) -> Arc<str> {
    by_key
        .get_key_value(key)
        .map(|(k, _)| k.clone())
        .unwrap_or_else(|| Arc::from(key))
}

/// What a settled key came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Winner {
    pub job_id: JobId,
    /// The key's element, when its job is a coalesced array.
    pub element: Option<Element>,
    /// Still held for the duplicate check when last listed: whoever answers with it releases it.
    pub awaiting_release: bool,
}

impl Winner {
    pub fn placement(&self) -> Placement {
        Placement {
            job_id: self.job_id,
            element: self.element.clone(),
        }
    }
}

/// The key a job carries that is no coalesced array: at the end of its name (or in the
/// comment of connectors before 0.27; slurmdbd keeps comments only with
/// AccountingStoreFlags=job_comment, names always).
pub(super) fn job_key(j: &JobInfo) -> Option<String> {
    key_of_record(j, None)
}

/// Every key a record carries, with the array element each stands for: a coalesced array's
/// (its pending remainder: every element; a started element: its own), else its one key.
pub(super) fn job_keys(j: &JobInfo) -> Vec<(String, Option<u32>)> {
    match record_keys(j) {
        Some(keys) => match j.array.as_ref().and_then(|a| a.task_id) {
            Some(i) => keys
                .into_iter()
                .nth(i as usize)
                .map(|k| (k, Some(i)))
                .into_iter()
                .collect(),
            None => keys
                .into_iter()
                .enumerate()
                .map(|(i, k)| (k, Some(i as u32)))
                .collect(),
        },
        None => job_key(j).map(|k| (k, None)).into_iter().collect(),
    }
}
