//! The ways versions differ, one macro per shape of one quirk. Each version module's `quirks`
//! lists the shapes it has (`v0042.rs`: `shapes::cancel_with_status!();` ...), and the macro body
//! is compiled against that version's types, so a wrong pick does not build.

/// v0.0.40-41: `DELETE job/{id}` answers `openapi_resp` with no per-job status: a job that was
/// unknown or already finished gets the same empty 200 as a cancelled one (recorded on 24.11).
macro_rules! cancel_without_status {
    () => {
        pub(super) type CancelResponse = g::OpenapiResp;
        pub(super) fn cancel_codes(_: &CancelResponse) -> Vec<i32> {
            Vec::new()
        }
    };
}

/// v0.0.42+: `DELETE job/{id}` answers each job's `status[].error.code` (2017 unknown, 2021
/// already finished).
macro_rules! cancel_with_status {
    () => {
        pub(super) type CancelResponse = g::OpenapiKillJobResp;
        pub(super) fn cancel_codes(r: &CancelResponse) -> Vec<i32> {
            r.status
                .iter()
                .flatten()
                .filter_map(|s| s.error.as_ref()?.code)
                .collect()
        }
    };
}

/// v0.0.40-44: `pinged: "UP"|"DOWN"` and `mode`; `$primary` reads whether it is the primary
/// (a field from v0.0.42, the `mode` before).
macro_rules! ping_pinged {
    ($primary:expr) => {
        pub(super) fn ping(p: &g::ControllerPing) -> Ping {
            Ping {
                hostname: p.hostname.clone().unwrap_or_default(),
                responding: p.pinged.as_deref() == Some("UP"),
                latency_us: p.latency,
                mode: p.mode.clone(),
                primary: $primary(p),
                status: None,
            }
        }
    };
}

/// v0.0.45+: `responding` and a `status` text instead of `pinged`/`mode`.
macro_rules! ping_responding {
    () => {
        pub(super) fn ping(p: &g::ControllerPing) -> Ping {
            Ping {
                hostname: p.hostname.clone().unwrap_or_default(),
                responding: p.responding == Some(true),
                latency_us: p.latency,
                mode: None,
                primary: p.primary,
                status: p.status.clone().filter(|s| !s.is_empty()),
            }
        }
    };
}

/// slurmdb job records with `stdout_expanded`/`stderr_expanded` (v0.0.41+): the real files,
/// `%j` replaced; the plain fields as older records have them.
macro_rules! accounting_expanded_paths {
    () => {
        pub(super) fn accounting_output_paths(j: &g::Job) -> (Option<String>, Option<String>) {
            (
                non_empty(&j.stdout_expanded).or_else(|| non_empty(&j.stdout)),
                non_empty(&j.stderr_expanded).or_else(|| non_empty(&j.stderr)),
            )
        }
    };
}

/// slurmdb job records with `restart_cnt` (v0.0.42+; before, how often Slurm requeued a job is
/// known only to slurmctld).
macro_rules! accounting_restarts {
    () => {
        pub(super) fn accounting_restarts(j: &g::Job) -> Option<u32> {
            j.restart_cnt.and_then(|n| u32::try_from(n).ok())
        }
    };
}

/// slurmdb's filtered `GET jobs/`: the same five parameters in every version (the trim script's
/// fix 12 drops the others).
macro_rules! db_jobs {
    () => {
        pub(super) fn db_jobs<'a>(
            a: &'a api::Client,
            f: &crate::dialect::DbJobsFilter<'a>,
        ) -> impl Future<
            Output = Result<
                ResponseValue<g::OpenapiSlurmdbdJobsResp>,
                GenError<g::OpenapiSlurmdbdJobsResp>,
            >,
        > + 'a {
            a.slurmdb_get_jobs(f.end_time, f.skip_steps, f.start_time, f.step, f.users)
        }
    };
}

/// Job description fields v0.0.42 and later share beyond the common ones; `cores_per_socket`
/// (dropped in v0.0.41, back in v0.0.45) is `without_cores_per_socket` or `with_cores_per_socket`.
macro_rules! job_desc_since_v0042 {
    (without_cores_per_socket) => {
        pub(super) fn version_fields(
            job: &JobDescription,
            msg: &mut g::JobDescMsg,
        ) -> Result<(), Unexpressible> {
            refuse_unless(job.cores_per_socket.is_none(), "cores_per_socket")?;
            msg.oom_kill_step = job.oom_kill_step.map(i32::from);
            msg.segment_size = job.segment_size.map(u16_no_val);
            msg.distribution_plane_size = job.distribution_plane_size.map(u16_no_val);
            Ok(())
        }
    };
    (with_cores_per_socket) => {
        pub(super) fn version_fields(
            job: &JobDescription,
            msg: &mut g::JobDescMsg,
        ) -> Result<(), Unexpressible> {
            msg.cores_per_socket = int(job.cores_per_socket);
            msg.oom_kill_step = job.oom_kill_step.map(i32::from);
            msg.segment_size = job.segment_size.map(u16_no_val);
            msg.distribution_plane_size = job.distribution_plane_size.map(u16_no_val);
            Ok(())
        }
    };
}

/// v0.0.40-44: no `GET conf` (recorded: a text/plain 404 on 24.11 v0.0.42 and 26.05 v0.0.44).
macro_rules! conf_none {
    () => {
        pub(super) async fn conf(
            _: &Api,
            _: Caller<'_>,
        ) -> Result<Option<ClusterConf>, ClientError> {
            Ok(None)
        }
    };
}

/// v0.0.45+: `GET conf`, slurm.conf as `slurm_conf` (the trim script keeps the keys read here).
macro_rules! conf_read {
    () => {
        impl Envelope for g::OpenapiConfResp {
            fn errors(&self) -> Vec<SlurmError> {
                errors_of(&self.errors)
            }
            fn warnings(&self) -> Vec<String> {
                warnings_of(&self.warnings)
            }
            fn server(&self) -> ServerInfo {
                server_of(&self.meta)
            }
        }

        pub(super) async fn conf(
            a: &Api,
            c: Caller<'_>,
        ) -> Result<Option<ClusterConf>, ClientError> {
            let resp = a
                .call(c, "conf", Idempotency::Idempotent, |a| a.slurm_get_conf())
                .await?;
            let s = resp.slurm_conf.as_ref();
            Ok(Some(ClusterConf {
                max_array_size: s
                    .and_then(|s| s.max_array_size)
                    .and_then(|n| u32::try_from(n).ok()),
                accounting_store_flags: s
                    .and_then(|s| s.accounting_store_flags.clone())
                    .unwrap_or_default(),
                accounting_storage_type: s.and_then(|s| s.accounting_storage_type.clone()),
                scheduler_parameters: s
                    .and_then(|s| s.scheduler_parameters.clone())
                    .unwrap_or_default(),
            }))
        }
    };
}

/// One API version's module (`v00NN.rs`): its generated client and types, the seam
/// (`each_version/`) compiled against them, and `quirks`, what this version does its own way
/// (mostly the shapes above): `version_module! { v0043, V0043, <quirk items> }`.
macro_rules! version_module {
    ($generated:ident, $version:ident, $($quirk:item)*) => {
        pub(crate) use crate::generated::$generated as api;
        pub(crate) use api::types as g;

        include!("each_version/decode.rs");
        include!("each_version/encode.rs");
        include!("each_version/operations.rs");

        mod quirks {
            use super::*;
            use crate::convert::shapes;

            pub(super) const VERSION: ApiVersion = ApiVersion::$version;

            $($quirk)*
        }
    };
}

/// What every version from v0.0.42 on does alike, said once: they differ only in how the ping
/// says which controller answered (`ping_pinged(...)` or `ping_responding()`), whether the job
/// description has `cores_per_socket` (`with_cores_per_socket` or `without_cores_per_socket`),
/// and whether there is `GET conf` (`conf_read` or `conf_none`).
macro_rules! since_v0042 {
    ($ping:ident ( $($how:tt)* ), $cores:ident, $conf:ident) => {
        shapes::cancel_with_status!();
        shapes::$ping!($($how)*);
        shapes::accounting_expanded_paths!();
        shapes::job_desc_since_v0042!($cores);
        shapes::accounting_restarts!();
        shapes::db_jobs!();
        shapes::$conf!();
    };
}

pub(super) use {
    accounting_expanded_paths, accounting_restarts, cancel_with_status, cancel_without_status,
    conf_none, conf_read, db_jobs, job_desc_since_v0042, ping_pinged, ping_responding, since_v0042,
    version_module,
};
