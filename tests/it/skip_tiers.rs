//! How a test's requirement of the real tiers parses (`common::skip`). Here, in the hermetic
//! binary, rather than in `common/`: every binary includes `common/`, and a `should_panic` test
//! there ran in each of them, its panic's backtrace symbolized (~59 MiB of heap) while
//! staging_memory measured its own memory.

use crate::common::skip::{Tier, required};

#[test]
fn the_requirement_parses() {
    assert!(required("").is_empty());
    assert!(required("0").is_empty());
    assert_eq!(required("1"), Tier::ALL.to_vec());
    assert_eq!(required("all"), Tier::ALL.to_vec());
    assert_eq!(
        required("cluster, no-accounting"),
        vec![Tier::Cluster, Tier::NoAccounting]
    );
}

#[test]
#[should_panic(expected = "unknown tier 'clustr'")]
fn a_typo_is_refused() {
    required("cluster,clustr");
}
