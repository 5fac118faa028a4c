//! The client progenitor generates from `openapi/slurmrestd-v0.0.42.json` at build time.
//! Only `slurmrestd::convert` and `slurmrestd::client` may use these types: everything else in the
//! crate speaks our own domain types, so a second API version is one more module plus a conversion.

#[allow(
    clippy::all,
    clippy::pedantic,
    unreachable_patterns,
    unused_imports,
    dead_code,
    missing_docs,
    mismatched_lifetime_syntaxes
)]
pub mod v0042 {
    include!(concat!(env!("OUT_DIR"), "/slurmrestd_v0_0_42.rs"));
}
