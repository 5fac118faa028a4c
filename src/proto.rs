//! The flyteidl2 connector protocol subset, generated from `proto/` by `build.rs`.
//!
//! Modules follow the protobuf packages: `proto::flyteidl2::connector`, `::core`, `::task`,
//! `::logs::dataplane`. Re-exports below are the names the rest of the crate uses most.

#![allow(clippy::all, clippy::pedantic, missing_docs)]

include!(concat!(env!("OUT_DIR"), "/flyteidl2.rs"));

pub use flyteidl2::connector;
pub use flyteidl2::core;
pub use flyteidl2::task;
