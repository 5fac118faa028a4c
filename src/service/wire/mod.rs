//! What crosses the wire besides the RPCs themselves: the request turned into the renderer's
//! input (`convert`), and the `resource_meta` the backend keeps for each task and sends back
//! with every call (`meta`, also the Python connector's, for a drop-in).
//!
//! A leaf of `service`: imports `proto`, `render` and `slurmrestd` types, nothing of `service`.

pub mod convert;
pub mod meta;
