//! Whether a cluster coalesces, with which window, and how large its arrays may be: decided
//! once per cluster from the deployment's setting (`FLYTE_SLURM_COALESCE_WINDOW`) and what
//! slurmrestd shows of the cluster's slurm.conf (`GET conf`, v0.0.45+), by [`Coalescing::decide`];
//! `ClusterRuntime::coalescing` reads slurm.conf once and keeps the answer, `check` prints it.
//!
//! Why slurm.conf decides the default: an element that left slurmctld is recognised by its key
//! in slurmdbd's copy of the array's comment, which slurmdbd keeps only with
//! `AccountingStoreFlags=job_comment` (recorded, `tests/fixtures/slurmrestd/COALESCE-FACTS.md`).
//! Without it, a CreateTask retried after its array left slurmctld would run its task again. So
//! the default coalesces where slurm.conf shows the flag, and nowhere else; a window set by the
//! operator coalesces wherever there is slurmdbd (the operator vouches for the flag where
//! slurmrestd is too old to show it).

use std::time::Duration;

use crate::config::{Coalesce, DEFAULT_COALESCE_WINDOW};
use crate::render::coalesce::BATCH_SCRIPT_BYTES;
use crate::slurmrestd::ClusterConf;

/// slurmctld's default `MaxArraySize` (1001: indices 0 to 1000 exclusive of the bound).
pub const MAX_ARRAY_ELEMENTS: usize = 1000;

/// What bounds one array, from slurm.conf where slurmrestd shows it, else Slurm's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `MaxArraySize` - 1.
    pub max_elements: usize,
    /// What the elements' scripts may add up to: 90 % of `max_script_size` (the dispatch
    /// around them, and a margin).
    pub script_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_elements: MAX_ARRAY_ELEMENTS,
            script_bytes: BATCH_SCRIPT_BYTES,
        }
    }
}

/// Coalescing on one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coalescing {
    /// `None`: every task is a job of its own.
    pub window: Option<Duration>,
    pub limits: Limits,
    /// Why, in words: the start log and `check`.
    pub why: String,
    /// A window the operator set on a cluster whose slurm.conf shows no slurmdbd keeping job
    /// comments: an element that left slurmctld could run twice (`check` fails it).
    pub at_risk: bool,
}

impl Coalescing {
    /// From the setting and slurm.conf (`None`: slurmrestd shows none, before v0.0.45).
    pub fn decide(setting: Coalesce, conf: Option<&ClusterConf>) -> Coalescing {
        let limits = conf.map_or_else(Limits::default, |c| Limits {
            max_elements: c
                .max_array_elements()
                .unwrap_or(MAX_ARRAY_ELEMENTS)
                .min(MAX_ARRAY_ELEMENTS),
            script_bytes: usize::try_from(c.max_script_size() / 10 * 9).unwrap_or(usize::MAX),
        });
        let comments = conf.map(ClusterConf::keeps_job_comments);
        let (window, why) = match (setting, comments) {
            (Coalesce::Off, _) => (None, "off (FLYTE_SLURM_COALESCE_WINDOW=off)".to_string()),
            (Coalesce::Window(w), Some(false)) => (
                Some(w),
                format!(
                    "window {}ms (FLYTE_SLURM_COALESCE_WINDOW), but slurm.conf shows no slurmdbd \
                     keeping job comments (AccountingStoreFlags lacks job_comment): a CreateTask \
                     retried after its array left slurmctld would run its task again; add \
                     job_comment or set FLYTE_SLURM_COALESCE_WINDOW=off",
                    w.as_millis()
                ),
            ),
            (Coalesce::Window(w), _) => (
                Some(w),
                format!("window {}ms (FLYTE_SLURM_COALESCE_WINDOW)", w.as_millis()),
            ),
            (Coalesce::Auto, Some(true)) => (
                Some(DEFAULT_COALESCE_WINDOW),
                format!(
                    "window {}ms (auto: slurm.conf shows slurmdbd keeping job comments)",
                    DEFAULT_COALESCE_WINDOW.as_millis()
                ),
            ),
            (Coalesce::Auto, Some(false)) => (
                None,
                "off (auto: slurm.conf shows no slurmdbd keeping job comments, which finds an \
                 element once it left slurmctld; add job_comment to AccountingStoreFlags to \
                 coalesce)"
                    .to_string(),
            ),
            (Coalesce::Auto, None) => (
                None,
                format!(
                    "off (auto: this slurmrestd cannot show slurm.conf, which needs v0.0.45 or \
                     later; with AccountingStoreFlags=job_comment, set \
                     FLYTE_SLURM_COALESCE_WINDOW={}ms)",
                    DEFAULT_COALESCE_WINDOW.as_millis()
                ),
            ),
        };
        Coalescing {
            window,
            limits,
            why,
            at_risk: matches!(setting, Coalesce::Window(_)) && comments == Some(false),
        }
    }

    /// The sentence `check` prints: the decision and, when on, what bounds a batch.
    pub fn describe(&self, cap_without_comment: usize) -> String {
        match self.window {
            None => format!("{}: every task is a job of its own", self.why),
            Some(_) => format!(
                "{}: tasks of one shape arriving within it are one job array, at most {} \
                 elements (the keys a 1024-byte comment holds, and MaxArraySize) and {} KiB of \
                 script (max_script_size)",
                self.why,
                cap_without_comment.min(self.limits.max_elements),
                self.limits.script_bytes / 1024,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(flags: &[&str], max_array: u32, sched: &[&str]) -> ClusterConf {
        ClusterConf {
            max_array_size: Some(max_array),
            accounting_store_flags: flags.iter().map(|f| f.to_string()).collect(),
            accounting_storage_type: Some("accounting_storage/slurmdbd".into()),
            scheduler_parameters: sched.iter().map(|f| f.to_string()).collect(),
        }
    }

    #[test]
    fn the_default_coalesces_only_where_slurmdbd_keeps_comments() {
        let with = conf(&["job_comment", "job_script"], 1001, &[]);
        let on = Coalescing::decide(Coalesce::Auto, Some(&with));
        assert_eq!(on.window, Some(DEFAULT_COALESCE_WINDOW));
        assert_eq!(on.limits, Limits::default());
        // Recorded on 26.05 (v0.0.45): the dev cluster's flags before job_comment was added.
        let without = conf(&["job_script", "job_env"], 1001, &[]);
        let off = Coalescing::decide(Coalesce::Auto, Some(&without));
        assert_eq!(off.window, None);
        assert!(off.why.contains("job_comment"), "{}", off.why);
        let old = Coalescing::decide(Coalesce::Auto, None);
        assert_eq!(old.window, None);
        assert!(old.why.contains("v0.0.45"), "{}", old.why);
        // No slurmdbd at all: no comments kept, whatever the flags say.
        let mut none = with.clone();
        none.accounting_storage_type = Some("accounting_storage/none".into());
        assert_eq!(Coalescing::decide(Coalesce::Auto, Some(&none)).window, None);
    }

    #[test]
    fn a_window_set_by_the_operator_holds_and_warns() {
        let w = Duration::from_millis(300);
        let without = conf(&["job_script"], 1001, &[]);
        let c = Coalescing::decide(Coalesce::Window(w), Some(&without));
        assert_eq!(c.window, Some(w));
        assert!(c.why.contains("would run its task again"), "{}", c.why);
        assert!(c.at_risk);
        assert_eq!(
            Coalescing::decide(Coalesce::Window(w), None).window,
            Some(w)
        );
        assert_eq!(
            Coalescing::decide(Coalesce::Off, Some(&without)).window,
            None
        );
    }

    #[test]
    fn limits_come_from_slurm_conf() {
        let small = conf(
            &["job_comment"],
            51,
            &["bf_interval=30", "max_script_size=1048576"],
        );
        let c = Coalescing::decide(Coalesce::Auto, Some(&small));
        assert_eq!(
            c.limits,
            Limits {
                max_elements: 50,
                script_bytes: 1048576 / 10 * 9
            }
        );
        assert!(
            c.describe(88).contains("at most 50 elements"),
            "{}",
            c.describe(88)
        );
        // A MaxArraySize above Slurm's default does not make batches larger than the comment's
        // keys allow anyway; the bound stays the default's.
        let big = conf(&["job_comment"], 100001, &[]);
        assert_eq!(
            Coalescing::decide(Coalesce::Auto, Some(&big))
                .limits
                .max_elements,
            MAX_ARRAY_ELEMENTS
        );
    }
}
