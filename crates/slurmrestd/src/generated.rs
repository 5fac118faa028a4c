//! The clients progenitor generates from `openapi/slurmrestd-<version>.json` at build time, one
//! module per data_parser version. The trimmed specs give every version the same type and method
//! names (`scripts/trim-openapi.py`, fixes 9-11), so the one conversion seam
//! (`slurmrestd::convert`) is written once and compiled against each module. Nothing outside
//! `slurmrestd` can name these types.

macro_rules! generated {
    ($($module:ident => $file:literal),* $(,)?) => {$(
        #[allow(
            clippy::all,
            clippy::pedantic,
            unreachable_patterns,
            unused_imports,
            dead_code,
            missing_docs,
            mismatched_lifetime_syntaxes
        )]
        pub(crate) mod $module {
            include!(concat!(env!("OUT_DIR"), "/", $file));
        }
    )*};
}

generated!(
    v0040 => "slurmrestd_v0_0_40.rs",
    v0041 => "slurmrestd_v0_0_41.rs",
    v0042 => "slurmrestd_v0_0_42.rs",
    v0043 => "slurmrestd_v0_0_43.rs",
    v0044 => "slurmrestd_v0_0_44.rs",
    v0045 => "slurmrestd_v0_0_45.rs",
    v0046 => "slurmrestd_v0_0_46.rs",
);
