//! slurmrestd v0.0.45 (Slurm 26.05 and later): the seam (`each_version/`) compiled against this
//! version's generated types, and the few things this version does its own way.

pub(crate) use crate::slurmrestd::generated::v0045 as api;
pub(crate) use api::types as g;

include!("each_version/decode.rs");
include!("each_version/encode.rs");
include!("each_version/operations.rs");

mod quirks {
    use super::*;
    use crate::slurmrestd::client::DbJobsFilter;
    use crate::slurmrestd::convert::shapes;

    pub(super) const VERSION: ApiVersion = ApiVersion::V0045;

    shapes::cancel_with_status!();
    shapes::ping_responding!();
    shapes::accounting_expanded_paths!();
    shapes::job_desc_since_v0042!(with_cores_per_socket);
    shapes::accounting_restarts!();
    shapes::db_jobs!();
}
