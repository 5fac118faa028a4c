use super::*;

/// Benchmarks measure bytes per tracked job: an entry stays at 24 bytes (plus the map's 4-byte
/// key and control byte); exit codes and reasons live in the rare boxed extra.
#[test]
fn entry_is_compact() {
    assert_eq!(std::mem::size_of::<Packed>(), 4);
    assert!(
        std::mem::size_of::<Entry>() <= 24,
        "{}",
        std::mem::size_of::<Entry>()
    );
}
