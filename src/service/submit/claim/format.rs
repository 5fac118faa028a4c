//! The claim's document: one JSON object per record, versioned, saying exactly one of *being
//! submitted* (by a holder, under a lease), *recorded* (the job that runs the execution) or
//! *deleted* (the tombstone), with who wrote it and when.
//!
//! ```json
//! {"version":1,"by":"connector-0","at":"2026-12-07T07:00:00.000Z","state":"submitting","lease_secs":60,"marker":"fc-3f9a…"}
//! {"version":1,"by":"connector-0","at":"2026-12-07T07:00:01.250Z","state":"recorded","job":{"job_id":4242}}
//! {"version":1,"by":"connector-1","at":"2026-12-07T07:00:01.300Z","state":"recorded","job":{"array_job_id":4300,"index":17},"array":"0-16,18-99"}
//! {"version":1,"by":"connector-1","at":"2026-12-07T07:05:00.000Z","state":"deleted"}
//! ```
//!
//! Which record may follow which is decided here ([`Record::may_follow`]), once, for every writer:
//! the tombstone is final, a recorded job can only be deleted, and a holding passes to another
//! replica only after its lease ran out.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

/// The version this build writes and reads. A record of a higher version was written by a newer
/// connector: it is refused as unreadable rather than misread (a rollback past a format change
/// must not guess).
pub const FORMAT_VERSION: u32 = 1;

/// One record of a claim: the envelope (format version, writer, time) and the state it states.
/// In JSON a flat object whose `state` says which fields it has: exactly those, nothing else
/// (a record that says two things is unreadable, not read as one of them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Wire", into = "Wire")]
pub struct Record {
    pub version: u32,
    /// The replica that wrote it (for a holding: the holder).
    pub by: String,
    /// When the writer wrote it, by its own clock (for a holding: the start of its lease).
    pub at: SystemTime,
    pub state: State,
}

/// What a claim says about its execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// The writer (`Record::by`) is submitting the execution's job, held, and will record it
    /// within `lease_secs` of `Record::at` or renew its holding with a new record; silent longer,
    /// another replica may take the claim over. `marker` is in the comment of the held job
    /// (the execution's, or its batch's array, of which it is element `index`): a replica that
    /// takes over finds the holder's unrecorded held job by it, in slurmctld's listing alone.
    ///
    /// `replaces`: the recorded array element this holding follows. slurmrestd releases a held
    /// array only as a whole, so an element whose recorder died before releasing its array is
    /// cancelled while still held and the execution submitted anew.
    Submitting {
        lease_secs: u64,
        marker: String,
        index: Option<u32>,
        replaces: Option<JobRef>,
    },
    /// This job runs the execution: answer every retried CreateTask with it. For an array's
    /// element, `array` is the array's indices as submitted (Slurm's syntax; gaps where another
    /// replica held a member of the batch), which every task's meta names, so that each
    /// replica follows the array as it is; absent for a job of its own. `marker`: the one its
    /// holding gave the job's comment, until the release removes it (a retried CreateTask
    /// settles a job left held only if it carries it: after a slurmctld restart the id may be
    /// another execution's job, held for its own claim); absent in records written before.
    Recorded {
        job: JobRef,
        array: Option<String>,
        marker: Option<String>,
    },
    /// DeleteTask came: nothing may run the execution any more (its job, if one was recorded
    /// before, is cancelled by the deleter).
    Deleted,
}

/// The Slurm job a claim records: `{"job_id":N}` or `{"array_job_id":N,"index":I}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "JobWire", into = "JobWire")]
pub enum JobRef {
    /// A job of its own.
    Job { job_id: u32 },
    /// An element of a coalesced job array: the array's job id and the element's index.
    Element { array_job_id: u32, index: u32 },
}

/// A record as its JSON object.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    version: u32,
    by: String,
    #[serde(with = "rfc3339")]
    at: SystemTime,
    state: Kind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lease_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    marker: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    index: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    replaces: Option<JobRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    job: Option<JobRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    array: Option<String>,
}

#[derive(Clone, Copy, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    Submitting,
    Recorded,
    Deleted,
}

impl TryFrom<Wire> for Record {
    type Error = String;

    fn try_from(w: Wire) -> Result<Self, String> {
        let holding = (w.lease_secs, w.marker, w.index, w.replaces);
        if let Some(a) = &w.array {
            if !matches!(w.job, Some(JobRef::Element { .. })) {
                return Err("`array` is the indices of a recorded array element's array".into());
            }
            crate::render::array::indices(a).map_err(|why| format!("`array` {a:?}: {why}"))?;
        }
        let state = match (w.state, holding, w.job) {
            (Kind::Submitting, (Some(lease_secs), Some(marker), index, replaces), None)
                if w.array.is_none() =>
            {
                State::Submitting {
                    lease_secs,
                    marker,
                    index,
                    replaces,
                }
            }
            (Kind::Recorded, (None, marker, None, None), Some(job)) => State::Recorded {
                job,
                array: w.array,
                marker,
            },
            (Kind::Deleted, (None, None, None, None), None) => State::Deleted,
            (Kind::Submitting, ..) => {
                return Err(
                    "a \"submitting\" record has `lease_secs` and `marker` (and an array \
                     element's `index`, a replaced element's `replaces`), and no `job`"
                        .into(),
                );
            }
            (Kind::Recorded, ..) => {
                return Err("a \"recorded\" record has `job` and no holding's fields".into());
            }
            (Kind::Deleted, ..) => {
                return Err("a \"deleted\" record has neither `job` nor a holding's fields".into());
            }
        };
        Ok(Record {
            version: w.version,
            by: w.by,
            at: w.at,
            state,
        })
    }
}

impl From<Record> for Wire {
    fn from(r: Record) -> Self {
        let (state, (lease_secs, marker, index, replaces), job, array) = match r.state {
            State::Submitting {
                lease_secs,
                marker,
                index,
                replaces,
            } => (
                Kind::Submitting,
                (Some(lease_secs), Some(marker), index, replaces),
                None,
                None,
            ),
            State::Recorded { job, array, marker } => {
                (Kind::Recorded, (None, marker, None, None), Some(job), array)
            }
            State::Deleted => (Kind::Deleted, (None, None, None, None), None, None),
        };
        Wire {
            version: r.version,
            by: r.by,
            at: r.at,
            state,
            lease_secs,
            marker,
            index,
            replaces,
            job,
            array,
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobWire {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    job_id: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    array_job_id: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    index: Option<u32>,
}

impl TryFrom<JobWire> for JobRef {
    type Error = String;

    fn try_from(w: JobWire) -> Result<Self, String> {
        match (w.job_id, w.array_job_id, w.index) {
            (Some(job_id), None, None) => Ok(JobRef::Job { job_id }),
            (None, Some(array_job_id), Some(index)) => Ok(JobRef::Element {
                array_job_id,
                index,
            }),
            _ => Err("a job is `{\"job_id\":N}` or `{\"array_job_id\":N,\"index\":I}`".into()),
        }
    }
}

impl From<JobRef> for JobWire {
    fn from(j: JobRef) -> Self {
        match j {
            JobRef::Job { job_id } => JobWire {
                job_id: Some(job_id),
                array_job_id: None,
                index: None,
            },
            JobRef::Element {
                array_job_id,
                index,
            } => JobWire {
                job_id: None,
                array_job_id: Some(array_job_id),
                index: Some(index),
            },
        }
    }
}

impl std::fmt::Display for JobRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobRef::Job { job_id } => write!(f, "job {job_id}"),
            JobRef::Element {
                array_job_id,
                index,
            } => write!(f, "job {array_job_id}_{index}"),
        }
    }
}

impl State {
    /// Its name in the document (`state`), for messages.
    pub fn name(&self) -> &'static str {
        match self {
            State::Submitting { .. } => "submitting",
            State::Recorded { .. } => "recorded",
            State::Deleted => "deleted",
        }
    }
}

impl Record {
    /// A record of `state` by `by`, written now (to the millisecond the document keeps, so the
    /// record written and the record read back are equal).
    pub fn new(by: impl Into<String>, state: State) -> Self {
        let ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        Record {
            version: FORMAT_VERSION,
            by: by.into(),
            at: SystemTime::UNIX_EPOCH + Duration::from_millis(ms as u64),
            state,
        }
    }

    /// When a holding's lease runs out (`None` for a record that is not a holding).
    pub fn lease_end(&self) -> Option<SystemTime> {
        match self.state {
            State::Submitting { lease_secs, .. } => Some(self.at + Duration::from_secs(lease_secs)),
            _ => None,
        }
    }

    /// Whether `self` is a holding whose lease ran out by `now`. Judged by the reader's clock
    /// against the writer's: replicas' clocks must agree to well within a lease (NTP does).
    pub fn expired(&self, now: SystemTime) -> bool {
        self.lease_end().is_some_and(|end| end <= now)
    }

    /// Whether `next` may follow `self` at `now`; `Err` says why not. The rules every writer
    /// keeps, so that a claim never goes back on what it said:
    /// - a tombstone is final (a late record after DeleteTask is refused);
    /// - a recorded job stays the execution's job until it is deleted, or, an array element
    ///   its recorder left held, until a holding that names it as the one it `replaces`;
    /// - a holding is renewed by its holder, recorded by its holder (only the holder has the held
    ///   job), deleted by anyone, and taken over by another replica once its lease ran out.
    pub fn may_follow(&self, next: &Record, now: SystemTime) -> Result<(), String> {
        match (&self.state, &next.state) {
            (State::Deleted, _) => Err("the execution was deleted; a tombstone is final".into()),
            (State::Recorded { .. }, State::Deleted) => Ok(()),
            (
                State::Recorded { job, .. },
                State::Submitting {
                    replaces: Some(r), ..
                },
            ) if r == job => Ok(()),
            (State::Recorded { job, .. }, _) => Err(format!(
                "the claim already records {job}; only a tombstone may follow"
            )),
            (State::Submitting { .. }, State::Deleted) => Ok(()),
            (State::Submitting { .. }, _) if next.by == self.by => Ok(()),
            (State::Submitting { .. }, State::Submitting { .. }) if self.expired(now) => Ok(()),
            (State::Submitting { .. }, State::Submitting { .. }) => Err(format!(
                "{} holds it under a lease that has not run out",
                self.by
            )),
            (State::Submitting { .. }, State::Recorded { .. }) => Err(format!(
                "{} holds it: only the holder records its job",
                self.by
            )),
        }
    }
}

/// RFC 3339 in UTC with milliseconds, as a person reading the object expects.
mod rfc3339 {
    use std::time::SystemTime;

    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_rfc3339_millis(*t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_rfc3339_weak(&s)
            .map_err(|e| D::Error::custom(format!("`at` {s:?} is not an RFC 3339 time: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn rec(by: &str, t: u64, state: State) -> Record {
        Record {
            version: FORMAT_VERSION,
            by: by.into(),
            at: at(t),
            state,
        }
    }

    #[test]
    fn documents_read_as_written() {
        for (state, json) in [
            (
                State::Submitting {
                    lease_secs: 60,
                    marker: "fc-1".into(),
                    index: None,
                    replaces: None,
                },
                r#""state":"submitting","lease_secs":60,"marker":"fc-1""#,
            ),
            (
                State::Submitting {
                    lease_secs: 60,
                    marker: "fb-2".into(),
                    index: Some(3),
                    replaces: None,
                },
                r#""state":"submitting","lease_secs":60,"marker":"fb-2","index":3"#,
            ),
            (
                State::Submitting {
                    lease_secs: 60,
                    marker: "fc-1".into(),
                    index: None,
                    replaces: Some(JobRef::Element {
                        array_job_id: 4300,
                        index: 17,
                    }),
                },
                r#""state":"submitting","lease_secs":60,"marker":"fc-1","replaces":{"array_job_id":4300,"index":17}"#,
            ),
            (
                State::Recorded {
                    job: JobRef::Job { job_id: 4242 },
                    array: None,
                    marker: None,
                },
                r#""state":"recorded","job":{"job_id":4242}"#,
            ),
            (
                State::Recorded {
                    job: JobRef::Job { job_id: 4242 },
                    array: None,
                    marker: Some("fc-1".into()),
                },
                r#""state":"recorded","marker":"fc-1","job":{"job_id":4242}"#,
            ),
            (
                State::Recorded {
                    job: JobRef::Element {
                        array_job_id: 4300,
                        index: 17,
                    },
                    array: None,
                    marker: None,
                },
                r#""state":"recorded","job":{"array_job_id":4300,"index":17}"#,
            ),
            (
                State::Recorded {
                    job: JobRef::Element {
                        array_job_id: 4300,
                        index: 17,
                    },
                    array: Some("0-16,18-99".into()),
                    marker: None,
                },
                r#""state":"recorded","job":{"array_job_id":4300,"index":17},"array":"0-16,18-99""#,
            ),
            (State::Deleted, r#""state":"deleted""#),
        ] {
            let r = rec("connector-0", 0, state);
            let text = serde_json::to_string(&r).unwrap();
            assert_eq!(
                text,
                format!(
                    r#"{{"version":1,"by":"connector-0","at":"2027-01-15T08:00:00.000Z",{json}}}"#
                )
            );
            assert_eq!(serde_json::from_str::<Record>(&text).unwrap(), r);
        }
    }

    #[test]
    fn a_document_that_says_two_things_is_refused() {
        let both = r#"{"version":1,"by":"a","at":"2027-01-15T08:00:00Z","state":"deleted","job":{"job_id":1}}"#;
        assert!(serde_json::from_str::<Record>(both).is_err());
        let odd = r#"{"version":1,"by":"a","at":"2027-01-15T08:00:00Z","state":"recorded","job":{"job_id":1,"index":2}}"#;
        let e = serde_json::from_str::<Record>(odd).unwrap_err().to_string();
        assert!(e.contains("array_job_id"), "{e}");
        let unknown =
            r#"{"version":1,"by":"a","at":"2027-01-15T08:00:00Z","state":"deleted","why":"x"}"#;
        assert!(serde_json::from_str::<Record>(unknown).is_err());
        // An array's indices belong to a recorded element, in Slurm's syntax.
        for odd in [
            r#"{"version":1,"by":"a","at":"2027-01-15T08:00:00Z","state":"recorded","job":{"job_id":1},"array":"0-3"}"#,
            r#"{"version":1,"by":"a","at":"2027-01-15T08:00:00Z","state":"recorded","job":{"array_job_id":1,"index":2},"array":"3-1"}"#,
            r#"{"version":1,"by":"a","at":"2027-01-15T08:00:00Z","state":"submitting","lease_secs":60,"marker":"m","index":2,"array":"0-3"}"#,
        ] {
            let e = serde_json::from_str::<Record>(odd).unwrap_err().to_string();
            assert!(e.contains("array"), "{odd}: {e}");
        }
        let bad_time = r#"{"version":1,"by":"a","at":"yesterday","state":"deleted"}"#;
        let e = serde_json::from_str::<Record>(bad_time)
            .unwrap_err()
            .to_string();
        assert!(e.contains("RFC 3339"), "{e}");
    }

    #[test]
    fn transitions() {
        let job = State::Recorded {
            job: JobRef::Job { job_id: 7 },
            array: None,
            marker: None,
        };
        let hold = |by: &str, lease| {
            let marker = "fc-1".into();
            let index = None;
            rec(
                by,
                0,
                State::Submitting {
                    lease_secs: lease,
                    marker,
                    index,
                    replaces: None,
                },
            )
        };
        let now = at(30);
        // The holder renews and records; anyone deletes.
        assert!(hold("a", 60).may_follow(&hold("a", 60), now).is_ok());
        assert!(
            hold("a", 60)
                .may_follow(&rec("a", 1, job.clone()), now)
                .is_ok()
        );
        assert!(
            hold("a", 60)
                .may_follow(&rec("b", 1, State::Deleted), now)
                .is_ok()
        );
        // Another replica takes over only after the lease.
        let e = hold("a", 60).may_follow(&hold("b", 60), now).unwrap_err();
        assert!(e.contains("lease"), "{e}");
        assert!(hold("a", 10).may_follow(&hold("b", 60), now).is_ok());
        // Only the holder records.
        let e = hold("a", 10)
            .may_follow(&rec("b", 1, job.clone()), now)
            .unwrap_err();
        assert!(e.contains("only the holder"), "{e}");
        // A recorded job is only deleted; a tombstone is final.
        let recorded = rec("a", 1, job.clone());
        assert!(
            recorded
                .may_follow(&rec("b", 2, State::Deleted), now)
                .is_ok()
        );
        assert!(recorded.may_follow(&hold("a", 60), now).is_err());
        // A holding that replaces the recorded job (an element left held), and only that one.
        let replacing = |job| {
            let state = State::Submitting {
                lease_secs: 60,
                marker: "fc-1".into(),
                index: None,
                replaces: Some(job),
            };
            rec("c", 3, state)
        };
        assert!(
            recorded
                .may_follow(&replacing(JobRef::Job { job_id: 7 }), now)
                .is_ok()
        );
        let e = recorded
            .may_follow(&replacing(JobRef::Job { job_id: 8 }), now)
            .unwrap_err();
        assert!(e.contains("only a tombstone"), "{e}");
        let dead = rec("b", 2, State::Deleted);
        for next in [hold("a", 60), rec("a", 3, job), rec("b", 3, State::Deleted)] {
            let e = dead.may_follow(&next, now).unwrap_err();
            assert!(e.contains("final"), "{e}");
        }
    }
}
