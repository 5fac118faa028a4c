//! Whether a cluster coalesces, with which window, and how large its arrays may be: decided
//! once per cluster from the deployment's setting (`FLYTE_SLURM_COALESCE_WINDOW`) and what
//! slurmrestd shows of the cluster's slurm.conf (`GET conf`, v0.0.45+), by [`Coalescing::decide`];
//! `ClusterRuntime::coalescing` reads slurm.conf once and keeps the answer, `check` prints it.
//!
//! Why slurm.conf matters: an element that left slurmctld is recognised by its key in
//! slurmdbd's copy of the array's record. slurmdbd keeps the comment only with
//! `AccountingStoreFlags=job_comment` (recorded, `tests/fixtures/slurmrestd/COALESCE-FACTS.md`),
//! the job name always, in 255 characters, and the stdio paths unless `no_stdio`. So an array
//! packs its elements' keys in its comment where slurm.conf shows the flag (up to ~90 an
//! array), else in its name and then its logs' file names (64: [`KeysIn::NameAndLogs`]) where
//! slurm.conf shows no `no_stdio`, else in its name (22: [`KeysIn::Name`]). Slurm 24.11's
//! newest API (v0.0.42) shows no slurm.conf: its name, until slurmdbd's records show stdio paths
//! ([`Coalescing::with_log_paths_kept`]). Coalescing is on by default wherever there is
//! slurmdbd; without it no record is left once a job leaves slurmctld (and a cluster found
//! without accounting at run time does not coalesce either, `ClusterRuntime`'s index says so).

use std::time::Duration;

use crate::config::claims::OnceOnly;
use crate::config::{Coalesce, DEFAULT_COALESCE_WINDOW};
use crate::render::coalesce::BATCH_SCRIPT_BYTES;
use crate::render::naming::NAME_AND_LOGS_KEYS_MAX;
use crate::render::{KeysIn, NAME_KEYS_MAX};
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
    /// Where an array carries its elements' keys: the comment where slurm.conf shows slurmdbd
    /// keeping it, else the name (fewer keys, kept by every slurmdbd).
    pub keys_in: KeysIn,
    /// Why, in words: the start log and `check`.
    pub why: String,
    /// slurm.conf was not shown, so whether slurmdbd keeps the stdio paths is learned from its
    /// records ([`Coalescing::with_log_paths_kept`]).
    pub log_paths_unknown: bool,
    /// Elements are recorded in their executions' claims (`FLYTE_SLURM_ONCE_ONLY=claims`), not
    /// found by keys: an array holds what `MaxArraySize` allows, with or without slurmdbd.
    pub claims: bool,
}

impl Coalescing {
    /// From the setting, slurm.conf (`None`: slurmrestd shows none, before v0.0.45) and what
    /// keeps an execution to one job.
    pub fn decide(
        setting: Coalesce,
        conf: Option<&ClusterConf>,
        once_only: OnceOnly,
    ) -> Coalescing {
        let claims = once_only == OnceOnly::Claims;
        let limits = conf.map_or_else(Limits::default, |c| Limits {
            max_elements: c
                .max_array_elements()
                .unwrap_or(MAX_ARRAY_ELEMENTS)
                .min(MAX_ARRAY_ELEMENTS),
            script_bytes: usize::try_from(c.max_script_size() / 10 * 9).unwrap_or(usize::MAX),
        });
        let keys_in = match conf {
            Some(c) if c.keeps_job_comments() => KeysIn::Comment,
            Some(c) if c.keeps_stdio_paths() => KeysIn::NameAndLogs,
            _ => KeysIn::Name,
        };
        let slurmdbd = conf.map(|c| {
            c.accounting_storage_type
                .as_deref()
                .is_some_and(|t| t.ends_with("/slurmdbd"))
        });
        let keys = match (keys_in, conf) {
            _ if claims => format!(
                "each element recorded in its own execution's claim (FLYTE_SLURM_ONCE_ONLY=claims), \
                 up to MaxArraySize - 1 ({}) an array",
                limits.max_elements
            ),
            (KeysIn::Comment, _) => {
                "elements' keys in the array's comment (slurm.conf shows slurmdbd keeping job \
                 comments)"
                    .to_string()
            }
            (KeysIn::NameAndLogs, _) => format!(
                "elements' keys in the array's name and its logs' file names, at most \
                 {NAME_AND_LOGS_KEYS_MAX} an array (AccountingStoreFlags lacks job_comment and \
                 no_stdio; with job_comment, arrays hold up to ~90)"
            ),
            (KeysIn::Name, Some(_)) => format!(
                "elements' keys in the array's name, at most {NAME_KEYS_MAX} an array \
                 (AccountingStoreFlags has no_stdio and lacks job_comment; with it, arrays hold \
                 up to ~90)"
            ),
            (KeysIn::Name, None) => format!(
                "elements' keys in the array's name, at most {NAME_KEYS_MAX} an array (this \
                 slurmrestd cannot show slurm.conf, which needs v0.0.45 or later; up to \
                 {NAME_AND_LOGS_KEYS_MAX} once slurmdbd's records show it keeps jobs' stdio paths)"
            ),
        };
        let (window, why) = match (setting, slurmdbd) {
            (Coalesce::Off, _) => (None, "off (FLYTE_SLURM_COALESCE_WINDOW=off)".to_string()),
            (Coalesce::Auto, Some(false)) if !claims => (
                None,
                "off (auto: slurm.conf shows no slurmdbd, which finds an element once it left \
                 slurmctld)"
                    .to_string(),
            ),
            (Coalesce::Window(w), _) => (
                Some(w),
                format!(
                    "window {}ms (FLYTE_SLURM_COALESCE_WINDOW), {keys}",
                    w.as_millis()
                ),
            ),
            (Coalesce::Auto, _) => (
                Some(DEFAULT_COALESCE_WINDOW),
                format!(
                    "window {}ms (auto), {keys}",
                    DEFAULT_COALESCE_WINDOW.as_millis()
                ),
            ),
        };
        Coalescing {
            window,
            limits,
            keys_in,
            why,
            log_paths_unknown: conf.is_none(),
            claims,
        }
    }

    /// Where slurm.conf was not shown: once slurmdbd's records showed it keeps jobs' stdio
    /// paths (`idempotency::Index::log_paths_kept`), the keys past the name's go in the logs'
    /// file names.
    pub fn with_log_paths_kept(mut self) -> Coalescing {
        if self.log_paths_unknown && self.keys_in == KeysIn::Name && !self.claims {
            self.keys_in = KeysIn::NameAndLogs;
            self.why = self.why.replace(
                "cannot show slurm.conf",
                "cannot show slurm.conf, but slurmdbd's records show the jobs' stdio paths: \
                 also in the logs' file names",
            );
        }
        self
    }

    /// The sentence `check` prints: the decision and, when on, what bounds a batch
    /// (`cap_without_comment`: the keys a comment holds beside no task comment).
    pub fn describe(&self, cap_without_comment: usize) -> String {
        let keys = match self.keys_in {
            _ if self.claims => "claims hold any number".to_string(),
            KeysIn::Comment => format!("{cap_without_comment} keys a 1024-byte comment holds"),
            KeysIn::Name => format!("{NAME_KEYS_MAX} keys a job name holds"),
            KeysIn::NameAndLogs => {
                format!("{NAME_AND_LOGS_KEYS_MAX} keys a job name and two log file names hold")
            }
        };
        match self.window {
            None => format!("{}: every task is a job of its own", self.why),
            Some(_) => format!(
                "{}: tasks of one shape arriving within it are one job array, at most {} \
                 elements (the {keys}, and MaxArraySize) and {} KiB of script \
                 (max_script_size)",
                self.why,
                self.cap(cap_without_comment),
                self.limits.script_bytes / 1024,
            ),
        }
    }

    /// How many elements an array holds, given how many keys its comment could hold.
    pub fn cap(&self, comment_cap: usize) -> usize {
        if self.claims {
            return self.limits.max_elements;
        }
        self.keys_in.cap(comment_cap).min(self.limits.max_elements)
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
    fn the_default_coalesces_wherever_there_is_slurmdbd_keys_in_the_comment_where_it_keeps_them() {
        let with = conf(&["job_comment", "job_script"], 1001, &[]);
        let on = Coalescing::decide(Coalesce::Auto, Some(&with), OnceOnly::Keys);
        assert_eq!(on.window, Some(DEFAULT_COALESCE_WINDOW));
        assert_eq!(on.keys_in, KeysIn::Comment);
        assert_eq!(on.limits, Limits::default());
        assert_eq!(on.cap(88), 88);
        // Recorded on 26.05 (v0.0.45): the dev cluster's flags before job_comment was added.
        let without = conf(&["job_script", "job_env"], 1001, &[]);
        // slurmdbd keeps the stdio paths unless `no_stdio`: the name and the logs' names.
        let named = Coalescing::decide(Coalesce::Auto, Some(&without), OnceOnly::Keys);
        assert_eq!(named.window, Some(DEFAULT_COALESCE_WINDOW));
        assert_eq!(named.keys_in, KeysIn::NameAndLogs);
        assert_eq!(named.cap(88), NAME_AND_LOGS_KEYS_MAX);
        assert!(named.why.contains("no_stdio"), "{}", named.why);
        assert_eq!(named.clone().with_log_paths_kept(), named);
        let no_stdio = conf(&["job_script", "no_stdio"], 1001, &[]);
        let named = Coalescing::decide(Coalesce::Auto, Some(&no_stdio), OnceOnly::Keys);
        assert_eq!(named.keys_in, KeysIn::Name);
        assert_eq!(named.cap(88), NAME_KEYS_MAX);
        assert!(named.why.contains("job_comment"), "{}", named.why);
        // Not even slurmdbd's records showing stdio paths turn it back.
        assert_eq!(named.clone().with_log_paths_kept(), named);
        // 24.11: v0.0.42 shows no slurm.conf: the name, until slurmdbd's records show the paths.
        let old = Coalescing::decide(Coalesce::Auto, None, OnceOnly::Keys);
        assert_eq!(old.window, Some(DEFAULT_COALESCE_WINDOW));
        assert_eq!(old.keys_in, KeysIn::Name);
        assert!(old.why.contains("v0.0.45"), "{}", old.why);
        assert!(
            old.describe(88).contains("at most 22 elements"),
            "{}",
            old.describe(88)
        );
        let seen = old.with_log_paths_kept();
        assert_eq!(seen.keys_in, KeysIn::NameAndLogs);
        assert!(seen.why.contains("stdio paths"), "{}", seen.why);
        assert!(
            seen.describe(88).contains("at most 64 elements"),
            "{}",
            seen.describe(88)
        );
        // No slurmdbd at all: no record once a job left slurmctld, whatever the flags say.
        let mut none = with.clone();
        none.accounting_storage_type = Some("accounting_storage/none".into());
        let off = Coalescing::decide(Coalesce::Auto, Some(&none), OnceOnly::Keys);
        assert_eq!(off.window, None);
        assert!(off.why.contains("no slurmdbd"), "{}", off.why);
    }

    #[test]
    fn a_window_set_by_the_operator_holds_with_the_keys_where_slurmdbd_keeps_them() {
        let w = Duration::from_millis(300);
        let without = conf(&["job_script"], 1001, &[]);
        let c = Coalescing::decide(Coalesce::Window(w), Some(&without), OnceOnly::Keys);
        assert_eq!(c.window, Some(w));
        assert_eq!(c.keys_in, KeysIn::NameAndLogs);
        let c = Coalescing::decide(Coalesce::Window(w), None, OnceOnly::Keys);
        assert_eq!((c.window, c.keys_in), (Some(w), KeysIn::Name));
        assert_eq!(
            Coalescing::decide(Coalesce::Off, Some(&without), OnceOnly::Keys).window,
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
        let c = Coalescing::decide(Coalesce::Auto, Some(&small), OnceOnly::Keys);
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
            Coalescing::decide(Coalesce::Auto, Some(&big), OnceOnly::Keys)
                .limits
                .max_elements,
            MAX_ARRAY_ELEMENTS
        );
    }

    #[test]
    fn under_claims_arrays_hold_what_max_array_size_allows_with_or_without_slurmdbd() {
        let none = ClusterConf {
            accounting_storage_type: Some("accounting_storage/none".into()),
            ..conf(&[], 401, &[])
        };
        for c in [Some(conf(&["no_stdio"], 401, &[])), Some(none), None] {
            let keys = Coalescing::decide(Coalesce::Auto, c.as_ref(), OnceOnly::Keys);
            let claims = Coalescing::decide(Coalesce::Auto, c.as_ref(), OnceOnly::Claims);
            assert_eq!(claims.window, Some(DEFAULT_COALESCE_WINDOW), "{c:?}");
            let max = if c.is_some() { 400 } else { MAX_ARRAY_ELEMENTS };
            assert_eq!(
                claims.cap(0),
                max,
                "{c:?}: not the comment's, the name's or the logs'"
            );
            assert!(
                keys.cap(88) < max || keys.window.is_none(),
                "{c:?}: {keys:?}"
            );
            assert!(claims.why.contains("claim"), "{}", claims.why);
            assert!(
                claims
                    .describe(88)
                    .contains(&format!("at most {max} elements"))
            );
            assert_eq!(claims.clone().with_log_paths_kept(), claims);
        }
        assert_eq!(
            Coalescing::decide(Coalesce::Off, None, OnceOnly::Claims).window,
            None
        );
    }
}
