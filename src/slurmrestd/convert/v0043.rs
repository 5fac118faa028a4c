//! slurmrestd v0.0.43 (Slurm 25.05 to 26.11): the seam (`each_version/`) compiled against this
//! version's generated types, and the few things this version does its own way.

pub(crate) use crate::slurmrestd::generated::v0043 as api;
pub(crate) use api::types as g;

include!("each_version/decode.rs");
include!("each_version/encode.rs");
include!("each_version/operations.rs");

mod quirks {
    use super::*;
    use crate::slurmrestd::client::DbJobsFilter;
    use crate::slurmrestd::convert::shapes;

    pub(super) const VERSION: ApiVersion = ApiVersion::V0043;

    shapes::cancel_with_status!();
    shapes::ping_pinged!(|p: &g::ControllerPing| p.primary);
    shapes::accounting_expanded_paths!();
    shapes::job_desc_since_v0042!(without_cores_per_socket);
    shapes::accounting_restarts!();
    shapes::db_jobs!();
}
