//! What differs between data_parser versions, kept as data: `data/<version>/` holds, per version,
//! a real job record, a real slurmdb job record, real ping/diag/partitions bodies and the
//! accepted job_desc_msg fields of that version's spec (regenerate with
//! `scripts/extract-version-data.py`). The few differences that are behaviour rather than shape
//! are the predicates on [`ApiVersion`] below, each pinned by a recording.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde_json::Value;

use crate::config::{ApiVersion, SlurmVersion};

/// The bundled files of one version.
struct Files {
    job: &'static str,
    slurmdb_job: &'static str,
    job_desc_fields: &'static str,
    ping: &'static str,
    diag: &'static str,
    partitions: &'static str,
}

macro_rules! files {
    ($v:literal) => {
        Files {
            job: include_str!(concat!("../data/", $v, "/job.json")),
            slurmdb_job: include_str!(concat!("../data/", $v, "/slurmdb_job.json")),
            job_desc_fields: include_str!(concat!("../data/", $v, "/job_desc_fields.json")),
            ping: include_str!(concat!("../data/", $v, "/ping.json")),
            diag: include_str!(concat!("../data/", $v, "/diag.json")),
            partitions: include_str!(concat!("../data/", $v, "/partitions.json")),
        }
    };
}

static FILES: [Files; 7] = [
    files!("v0.0.40"),
    files!("v0.0.41"),
    files!("v0.0.42"),
    files!("v0.0.43"),
    files!("v0.0.44"),
    files!("v0.0.45"),
    files!("v0.0.46"),
];

/// Which template of a version.
#[derive(Clone, Copy)]
pub(crate) enum Template {
    /// `jobs[0]` of `GET /slurm/<v>/job/{id}`.
    Job,
    /// `jobs[0]` of `GET /slurmdb/<v>/job/{id}`.
    SlurmdbJob,
    /// `GET /slurm/<v>/ping/` without meta/errors/warnings.
    Ping,
    /// `GET /slurm/<v>/diag/` without meta/errors/warnings.
    Diag,
    /// `GET /slurm/<v>/partitions/` without meta/errors/warnings.
    Partitions,
}

fn index(v: ApiVersion) -> usize {
    ApiVersion::ALL
        .iter()
        .position(|x| *x == v)
        .expect("every version is in ALL")
}

/// A fresh copy of a version's template.
pub(crate) fn template(v: ApiVersion, t: Template) -> Value {
    static CACHE: [[OnceLock<Value>; 5]; 7] = [const { [const { OnceLock::new() }; 5] }; 7];
    let f = &FILES[index(v)];
    let (slot, text) = match t {
        Template::Job => (0, f.job),
        Template::SlurmdbJob => (1, f.slurmdb_job),
        Template::Ping => (2, f.ping),
        Template::Diag => (3, f.diag),
        Template::Partitions => (4, f.partitions),
    };
    CACHE[index(v)][slot]
        .get_or_init(|| serde_json::from_str(text).expect("bundled template is valid JSON"))
        .clone()
}

/// Field name -> kind of `<v>_job_desc_msg` (what a submit of that version accepts).
pub(crate) fn job_desc_fields(v: ApiVersion) -> &'static BTreeMap<String, String> {
    static CACHE: [OnceLock<BTreeMap<String, String>>; 7] = [const { OnceLock::new() }; 7];
    CACHE[index(v)].get_or_init(|| {
        serde_json::from_str(FILES[index(v)].job_desc_fields)
            .expect("bundled job_desc_fields.json is valid JSON")
    })
}

/// The version and the release a request is answered as (set per served version by the
/// router, read by every handler).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Served {
    pub api: ApiVersion,
    pub release: SlurmVersion,
}

impl ApiVersion {
    /// v0.0.40/41 repeat the submit result in a `result` object
    /// (`{job_id, step_id, error_code, error, job_submit_user_msg}`), recorded on 24.11.
    pub(crate) fn submit_has_result_block(self) -> bool {
        self.minor() <= 41
    }

    /// v0.0.42+ answer `DELETE job/{id}` with a `status` list; v0.0.40/41 with neither
    /// `status` nor any sign of an unknown or finished job.
    pub(crate) fn delete_has_status(self) -> bool {
        self.minor() >= 42
    }

    /// v0.0.40/41 cannot parse unix seconds in a query (`jobs/?update_time=`, slurmdb's
    /// `start_time`): 422 with 9202 + 9000 (recorded 24.11 bug).
    pub(crate) fn unix_time_query_broken(self) -> bool {
        self.minor() <= 41
    }

    /// v0.0.40 wants no_val fields as objects: a plain integer is applied but warned about
    /// (`Expected OpenAPI type=object ... but got OpenAPI type=integer ...`).
    pub(crate) fn warns_plain_no_val(self) -> bool {
        self.minor() == 40
    }

    /// v0.0.40 dumps `job_resources` in its older shape (`allocated_nodes`, sockets as maps).
    pub(crate) fn legacy_job_resources(self) -> bool {
        self.minor() == 40
    }

    /// v0.0.45+ have `GET job/{id}/requeue` (the spec's paths; answers recorded on 26.05).
    pub(crate) fn has_requeue(self) -> bool {
        self.minor() >= 45
    }
}
