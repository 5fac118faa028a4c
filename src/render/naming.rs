//! Job names, the idempotency key, and every mark the connector leaves on a job, with their
//! formats, parsers and size limits, in this one file: the key at the end of a job's name, a
//! coalesced array's keys packed in its comment or name ([`KeysIn`]), and the once-only
//! protocol's mark in the comment of a job held for its check ([`AWAITING_CHECK`]). The key is
//! derived only from who the execution is, so a CreateTask retried after a timeout finds the
//! job the first attempt submitted instead of submitting a second one.

use sha2::{Digest, Sha256};

use super::spec::ExecutionIdentity;

/// Prefix of the key inside a job's `comment`.
pub const COMMENT_KEY_PREFIX: &str = "flyte-key=";

/// 16 lowercase hex digits (64 bits of SHA-256) over org, project, domain, run, action and
/// attempt, each length-prefixed so no two identities share an encoding. A cryptographic hash,
/// so a run name cannot be crafted to collide with another run's key and adopt its job.
pub fn idempotency_key(id: &ExecutionIdentity) -> String {
    let mut h = Sha256::new();
    for part in [
        &id.org,
        &id.project,
        &id.domain,
        &id.run_name,
        &id.action_name,
    ] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    h.update(id.attempt.to_be_bytes());
    h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The short task name: the last dotted component of `TaskTemplate.id.name`
/// (`pipeline.preprocess` → `preprocess`), [`sanitize`]d to 40 characters (`task` if nothing is
/// left).
pub fn sanitize_short_name(task_name: &str) -> String {
    let short = task_name.rsplit('.').next().unwrap_or(task_name);
    let out = sanitize(short, 40);
    if out.is_empty() {
        "task".to_string()
    } else {
        out
    }
}

/// `s` limited to `[A-Za-z0-9_-]` (others become `-`, runs of `-` one) and `max` characters,
/// without `-` at either end: what a job name, a file name and a shell word all take as it is.
fn sanitize(s: &str, max: usize) -> String {
    let mut out = String::new();
    for c in s.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            c
        } else {
            '-'
        };
        if c == '-' && out.ends_with('-') {
            continue;
        }
        out.push(c);
    }
    let out: String = out.trim_matches('-').chars().take(max).collect();
    out.trim_end_matches('-').to_string()
}

/// `flyte-<run>-<short name>-<key>`. The run, so that `squeue`, `sacct` and a grep of the job
/// files find a Flyte run's jobs (the job name is the one text of a job every Slurm shows and
/// slurmdbd keeps by default); the whole 16-hex key at the end, so the job can be recognised by
/// its name alone where the comment is not kept (slurmdbd stores comments only with
/// `AccountingStoreFlags=job_comment`), and 64 bits make two executions' names collide never in
/// practice (8 hex would, among ~100k runs of one task). The action is not in it: a map's
/// elements are actions of one run, and the name (without the key) is what its coalesced array
/// is named by ([`array_name`]). A run name that sanitizes to nothing is left out.
pub fn job_name(run: &str, task_name: &str, key: &str) -> String {
    let run = sanitize(run, 40);
    let task = sanitize_short_name(task_name);
    if run.is_empty() {
        format!("flyte-{task}-{key}")
    } else {
        format!("flyte-{run}-{task}-{key}")
    }
}

/// The comment of a job array made of several executions (`service/submit/coalesce`): their
/// keys packed in index order, then the tasks' own comment. A job's comment is the one text
/// slurmctld lists with every record (its elements' too) and slurmdbd keeps
/// (`AccountingStoreFlags=job_comment`), and it holds at most [`COMMENT_MAX`] characters, so
/// each key takes 11 (its 8 bytes in unpadded base64url) instead of 16.
pub fn keys_comment(keys: &[&str], user: Option<&str>) -> String {
    use base64::Engine;
    let mut out = String::from(COMMENT_KEYS_PREFIX);
    for k in keys {
        let bytes = hex_bytes(k).expect("keys are 16 hex digits (idempotency_key)");
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode_string(bytes, &mut out);
    }
    if let Some(c) = user {
        out.push(' ');
        out.push_str(c);
    }
    out
}

/// The name of a coalesced job array that carries its elements' keys ([`KeysIn::Name`]): the
/// prefix and the keys packed in index order, as [`keys_comment`] packs them. At most
/// [`NAME_MAX`] characters: [`NAME_KEYS_MAX`] keys.
pub fn keys_name(keys: &[&str]) -> String {
    assert!(
        keys.len() <= NAME_KEYS_MAX,
        "a job name holds at most {NAME_KEYS_MAX} keys"
    );
    keys_comment(keys, None)
}

/// Where a coalesced array carries its elements' keys, the one text of it slurmdbd must keep
/// for a CreateTask retried after the array left slurmctld to find its element
/// (`service/submit/coalesce_settings.rs` decides it per cluster).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeysIn {
    /// The comment ([`keys_comment`]): up to 1024 characters, ~90 keys, but slurmdbd keeps it
    /// only with `AccountingStoreFlags=job_comment`.
    Comment,
    /// The job name ([`keys_name`]): slurmdbd keeps it always, in 255 characters (its
    /// `job_name` column is a `tinytext`, `as_mysql_job.c`): [`NAME_KEYS_MAX`] keys.
    Name,
}

/// The longest job name slurmdbd keeps whole (`tinytext`).
pub const NAME_MAX: usize = 255;
/// Keys a job name holds ([`keys_name`]): 22.
pub const NAME_KEYS_MAX: usize = (NAME_MAX - COMMENT_KEYS_PREFIX.len()) / PACKED_KEY_LEN;

/// Every key a job record packs, in index order, from its comment or its name (a coalesced
/// array's, [`KeysIn`]); `None` for any other record.
pub fn record_keys(comment: Option<&str>, name: &str) -> Option<Vec<String>> {
    comment
        .and_then(packed_keys_all)
        .or_else(|| packed_keys_all(name))
}

/// Prefix of the packed keys of a coalesced array's comment or name ([`keys_comment`],
/// [`keys_name`]).
pub const COMMENT_KEYS_PREFIX: &str = "flyte-keys=";
/// The longest comment slurmctld accepts (`_test_strlen(comment, 1024)` in job_mgr.c; recorded:
/// `tests/fixtures/slurmrestd/*_coalesce-comment-*`).
pub const COMMENT_MAX: usize = 1024;
/// Characters one key takes in [`keys_comment`].
pub const PACKED_KEY_LEN: usize = 11;

/// Appended to the comment of a job submitted held for the once-only check, and removed by the
/// release (in the same update): a held job is released only if it carries it, so neither a
/// task's own `--hold` nor someone's `scontrol hold` is ever undone by the connector.
pub const AWAITING_CHECK: &str = " [held by slurm-connector: duplicate check]";

/// The comment a job is submitted with for the check: its own, marked.
pub fn awaiting_comment(comment: Option<&str>) -> String {
    format!("{}{AWAITING_CHECK}", comment.unwrap_or_default())
}

/// Whether a comment carries the check's mark.
pub fn is_awaiting_check(comment: &str) -> bool {
    comment.ends_with(AWAITING_CHECK)
}

/// A comment without the check's mark: what the release restores.
pub fn without_check_mark(comment: &str) -> &str {
    comment.strip_suffix(AWAITING_CHECK).unwrap_or(comment)
}

/// slurmctld's reason for a job its submitter held (`hold: true` at submit is always this, also
/// for a privileged submitter; an admin's hold or a job_submit plugin's is `JobHeldAdmin`).
const HELD_BY_USER: &str = "JobHeldUser";

/// Whether slurmctld's record is of a job still held for the once-only check: pending, held by
/// its submitter, its comment marked. A task's own `--hold` lacks the mark; a job released (or
/// held again by someone) is not this.
pub fn awaiting_check(j: &crate::slurmrestd::JobInfo) -> bool {
    j.state.base == crate::slurmrestd::BaseState::Pending
        // A pending record's reason carries slurmctld's description after it when there is one
        // (`JobHeldUser (launch failed requeued held)`): the bare name decides.
        && j.reason
            .as_deref()
            .is_some_and(|r| r.split(" (").next() == Some(HELD_BY_USER))
        && j.comment.as_deref().is_some_and(is_awaiting_check)
}

/// How many keys an array's comment holds beside the tasks' own `comment` and the check's mark,
/// within [`COMMENT_MAX`].
pub fn comment_keys_max(comment: Option<&str>) -> usize {
    let fixed =
        COMMENT_KEYS_PREFIX.len() + comment.map_or(0, |c| c.len() + 1) + AWAITING_CHECK.len();
    COMMENT_MAX.saturating_sub(fixed) / PACKED_KEY_LEN
}

/// The key of element `index` of a coalesced array, from its comment ([`keys_comment`]).
pub fn packed_key_at(comment: &str, index: u32) -> Option<String> {
    let packed = packed_keys(comment)?;
    let at = index as usize * PACKED_KEY_LEN;
    unpack(packed.get(at..at + PACKED_KEY_LEN)?)
}

/// Every key of a coalesced array's comment, in index order; `None` for any other comment.
pub fn packed_keys_all(comment: &str) -> Option<Vec<String>> {
    let packed = packed_keys(comment)?;
    (0..packed.len() / PACKED_KEY_LEN)
        .map(|i| unpack(&packed[i * PACKED_KEY_LEN..(i + 1) * PACKED_KEY_LEN]))
        .collect()
}

fn packed_keys(comment: &str) -> Option<&str> {
    let rest = comment.strip_prefix(COMMENT_KEYS_PREFIX)?;
    let packed = rest.split(' ').next()?;
    (!packed.is_empty() && packed.len() % PACKED_KEY_LEN == 0).then_some(packed)
}

fn unpack(packed: &str) -> Option<String> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(packed)
        .ok()?;
    (bytes.len() == 8).then(|| bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn hex_bytes(key: &str) -> Option<Vec<u8>> {
    (key.len() == 16)
        .then(|| {
            (0..8)
                .map(|i| u8::from_str_radix(key.get(2 * i..2 * i + 2)?, 16).ok())
                .collect()
        })
        .flatten()
}

/// The execution a job record stands for: element `element` of a coalesced array (its key in
/// the packed comment or name, [`KeysIn`]), else the key in the comment of connectors before 0.27 (`flyte-key=`),
/// else the key at the end of its name.
pub fn key_of_record(comment: Option<&str>, name: &str, element: Option<u32>) -> Option<String> {
    if let Some(c) = comment
        && c.starts_with(COMMENT_KEYS_PREFIX)
    {
        return packed_key_at(c, element?);
    }
    if name.starts_with(COMMENT_KEYS_PREFIX) {
        return packed_key_at(name, element?);
    }
    comment
        .and_then(key_from_comment)
        .or_else(|| key_from_job_name(name))
        .map(str::to_string)
}

/// The name of a coalesced job array whose elements are named `elements` (each
/// `flyte-<run>-<task>-<key>`): theirs without the key (`flyte-<run>-<task>-array`) when they
/// share it, as a map's elements do (one run, one task), so `squeue` shows the run of each
/// element; `flyte-array` for a batch of several runs or tasks of one shape. No execution's
/// key is read from it.
pub fn array_name<'a>(elements: impl IntoIterator<Item = &'a str>) -> String {
    let mut stems = elements
        .into_iter()
        .map(|e| e.rsplit_once('-').map_or(e, |(stem, _key)| stem));
    let first = stems.next().unwrap_or("flyte");
    if stems.all(|s| s == first) {
        format!("{first}-array")
    } else {
        "flyte-array".to_string()
    }
}

/// The file name (before `_<array>_<index>.out`) of what Slurm writes for a coalesced array's
/// element before the element's own script takes over its output. Not the array's name: that
/// one depends on all its elements, and an element's files are found from its own meta.
pub const ARRAY_LOGS: &str = "flyte-array";

/// What [`ARRAY_LOGS`] was until job names carried the run (CHANGELOG, Unreleased): the
/// array's name, from its first element's name. Its files are still cleaned up after an upgrade.
pub fn legacy_array_logs(element: &str) -> String {
    match element.rsplit_once('-') {
        Some((stem, _key)) => format!("{stem}-array"),
        None => format!("{element}-array"),
    }
}

/// The key at the end of a name written by [`job_name`].
pub fn key_from_job_name(name: &str) -> Option<&str> {
    if name.starts_with(COMMENT_KEYS_PREFIX) {
        // A coalesced array's packed keys ([`keys_name`]): base64url has `-` too, and its last
        // run could look like a key.
        return None;
    }
    let key = name.strip_prefix("flyte-")?.rsplit('-').next()?;
    (key.len() == 16 && key.bytes().all(|b| b.is_ascii_hexdigit())).then_some(key)
}

/// The key inside a comment of a connector before 0.27, which wrote `flyte-key=<key> <the
/// task's comment>` (a job's comment is now the task's own: the key is in its name).
pub fn key_from_comment(comment: &str) -> Option<&str> {
    let rest = comment.strip_prefix(COMMENT_KEY_PREFIX)?;
    let key = rest.split(' ').next()?;
    (key.len() == 16 && key.bytes().all(|b| b.is_ascii_hexdigit())).then_some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_comes_back_from_the_name() {
        let key = idempotency_key(&id("r1", 0));
        let name = job_name("r1", "pipeline.preprocess", &key);
        assert_eq!(name, format!("flyte-r1-preprocess-{key}"));
        assert_eq!(key_from_job_name(&name), Some(key.as_str()));
        assert_eq!(
            key_from_job_name("flyte-x-0abcbbf0"),
            None,
            "an 8-hex name is not a key"
        );
        assert_eq!(key_from_job_name("other-0123456789abcdef"), None);
    }

    fn id(run: &str, attempt: u32) -> ExecutionIdentity {
        ExecutionIdentity {
            org: "acme".into(),
            project: "p".into(),
            domain: "d".into(),
            run_name: run.into(),
            action_name: "a0".into(),
            attempt,
        }
    }

    #[test]
    fn key_is_stable_and_distinguishes_every_part() {
        let k = idempotency_key(&id("r1", 0));
        assert_eq!(k.len(), 16);
        assert_eq!(k, idempotency_key(&id("r1", 0)));
        assert_ne!(k, idempotency_key(&id("r1", 1)));
        assert_ne!(k, idempotency_key(&id("r2", 0)));
        // Length prefixes: moving a character between fields changes the key.
        let mut a = id("r1", 0);
        a.project = "pd".into();
        a.domain = "".into();
        let mut b = id("r1", 0);
        b.project = "p".into();
        b.domain = "d".into();
        assert_ne!(idempotency_key(&a), idempotency_key(&b));
        // Pinned: the key must never change across versions (it identifies running jobs).
        assert_eq!(idempotency_key(&id("r1", 0)), k);
    }

    #[test]
    fn names() {
        assert_eq!(sanitize_short_name("pipeline.preprocess"), "preprocess");
        assert_eq!(sanitize_short_name("a.b c/d;e"), "b-c-d-e");
        assert_eq!(sanitize_short_name("...."), "task");
        assert_eq!(sanitize_short_name(&"x".repeat(100)).len(), 40);
        let key = "0123456789abcdef";
        assert_eq!(
            job_name("r8k2 run", "ops.nightly", key),
            "flyte-r8k2-run-nightly-0123456789abcdef",
            "the run sanitized like the task"
        );
        assert_eq!(
            job_name("", "ops.nightly", key),
            "flyte-nightly-0123456789abcdef",
            "no run, no segment"
        );
        assert_eq!(
            key_from_comment("flyte-key=0123456789abcdef nightly run"),
            Some(key)
        );
        assert_eq!(key_from_comment("flyte-key=0123456789abcdef"), Some(key));
        assert_eq!(key_from_comment("nightly"), None);
        let (a, b) = (
            "flyte-r1-prep-0123456789abcdef",
            "flyte-r1-prep-fedcba9876543210",
        );
        let array = array_name([a, b]);
        assert_eq!(
            array, "flyte-r1-prep-array",
            "a map's elements: their run and task"
        );
        assert_eq!(key_from_job_name(&array), None);
        assert_eq!(
            array_name([a, "flyte-r2-prep-fedcba9876543210"]),
            "flyte-array",
            "two runs in one batch: neither's name"
        );
        assert_eq!(
            legacy_array_logs("flyte-prep-0123456789abcdef"),
            "flyte-prep-array"
        );
    }

    /// COMMENT_MAX is what slurmctld enforces (recorded on 24.11 and 26.05, v0.0.40-44): a
    /// comment of 1024 bytes is taken whole, one of 1025 refused with error 2012.
    #[test]
    fn the_comment_limit_is_slurmctlds() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/slurmrestd");
        for prefix in ["24.11_v0.0.40", "24.11_v0.0.42", "26.05_v0.0.44"] {
            let read = |n: usize| -> serde_json::Value {
                let f = format!("{dir}/{prefix}_coalesce-comment-{n}-submit.json");
                serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap()
            };
            let ok = read(COMMENT_MAX);
            assert_eq!(
                ok["request"]["body"]["job"]["comment"]
                    .as_str()
                    .unwrap()
                    .len(),
                COMMENT_MAX
            );
            assert!(
                ok["response"]["body"]["job_id"].as_u64().is_some(),
                "{prefix}: {ok}"
            );
            let refused = read(COMMENT_MAX + 1);
            assert_eq!(
                refused["response"]["body"]["errors"][0]["error_number"], 2012,
                "{prefix}: {refused}"
            );
        }
    }

    #[test]
    fn a_name_holds_22_keys_in_slurmdbds_255_characters_and_gives_them_back() {
        let keys: Vec<String> = (0..NAME_KEYS_MAX)
            .map(|i| idempotency_key(&id(&format!("r{i}"), 0)))
            .collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let name = keys_name(&refs);
        assert_eq!(NAME_KEYS_MAX, 22);
        assert!(name.len() <= NAME_MAX, "{} characters", name.len());
        assert_eq!(record_keys(None, &name), Some(keys.clone()));
        // slurmdbd without job_comment: the comment is gone, the task's own, or the check's mark.
        assert_eq!(record_keys(Some("the task's"), &name), Some(keys.clone()));
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(key_of_record(None, &name, Some(i as u32)).as_ref(), Some(k));
        }
        assert_eq!(key_of_record(None, &name, None), None);
        assert_eq!(key_from_job_name(&name), None);
        // A plain job's name is no array's.
        let plain = job_name("r", "t", &keys[0]);
        assert_eq!(record_keys(None, &plain), None);
    }

    #[test]
    fn a_coalesced_arrays_keys_come_back_by_index() {
        let keys: Vec<String> = (0..90)
            .map(|i| idempotency_key(&id(&format!("r{i}"), 0)))
            .collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let c = keys_comment(&refs, Some("nightly run"));
        assert_eq!(
            c.len(),
            COMMENT_KEYS_PREFIX.len() + 90 * PACKED_KEY_LEN + 12
        );
        assert!(c.ends_with(" nightly run"));
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(packed_key_at(&c, i as u32).as_deref(), Some(k.as_str()));
            assert_eq!(
                key_of_record(Some(&c), "flyte-x-map", Some(i as u32)).as_deref(),
                Some(k.as_str())
            );
        }
        assert_eq!(packed_key_at(&c, 90), None, "past the last element");
        assert_eq!(packed_keys_all(&c), Some(keys.clone()));
        // The array's own record (its pending remainder) is no one element.
        assert_eq!(key_of_record(Some(&c), "flyte-x-map", None), None);
        // A single job: its name; an old connector's job: its comment.
        let name = job_name("r1", "t", &keys[0]);
        assert_eq!(
            key_of_record(Some("the task's comment"), &name, None).as_deref(),
            Some(keys[0].as_str())
        );
        assert_eq!(
            key_of_record(Some("flyte-key=0123456789abcdef x"), "other", None).as_deref(),
            Some("0123456789abcdef")
        );
        assert_eq!(packed_keys_all("flyte-keys=abc"), None, "not whole keys");
    }
}
