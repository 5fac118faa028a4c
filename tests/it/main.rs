//! The hermetic tier in one test binary: everything that needs no cluster, emulator or other
//! outside service (mock-slurmrestd in-process, wiremock, recorded real responses, the binary
//! itself), one module per former test file. One binary links the crate once instead of ~36 times
//! (issue 37: fewer test binaries for a faster CI), and `cargo test --test it` runs the whole tier;
//! a module alone is `cargo test --test it service_coalesce::`.
//!
//! Left as binaries of their own: the real tier (`real_*.rs`, `render_sbatch_diff.rs`,
//! `conformance.rs`: run per cluster by `.ci/run`, and real_failures takes node1 down, which
//! concurrent tests of other files must not meet), the object-store emulators (`emulators/`:
//! they set process-wide `AWS_*`/`GOOGLE_*`/`AZURE_*` variables) and `staging_memory.rs` (it
//! measures the peak RSS of its own process).

#[path = "../common/mod.rs"]
mod common;
#[path = "../render_support/mod.rs"]
mod render_support;

mod alert_drills;
mod claim_protocol;
mod claim_store;
mod cli_check;
mod cli_e2e;
mod cli_ingress;
mod deploy_examples;
mod docs_names;
mod fault_drills;
mod layering;
mod openapi_spec;
mod render_convert;
mod render_docs;
mod render_golden;
mod render_interruptible;
mod render_props;
mod render_refusals;
mod render_versions;
mod service_arrays;
mod service_claims;
mod service_clustered;
mod service_coalesce;
mod service_e2e;
mod service_failures;
mod service_flyte1;
mod service_identity;
mod service_images;
mod service_jobfiles;
mod service_outcomes;
mod service_proto;
mod service_replicas;
mod service_tls;
mod service_tracker;
mod skip_tiers;
mod slurmrestd_client;
mod slurmrestd_failures;
mod slurmrestd_mock;
mod slurmrestd_release;
mod slurmrestd_secrets;
mod slurmrestd_usage;
mod slurmrestd_versions;
mod staging_backends;
mod staging_logs;
mod staging_outputs;
