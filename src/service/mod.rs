//! The connector service (being built).
pub mod convert;
pub mod meta;
