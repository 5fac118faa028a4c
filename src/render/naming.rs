//! Job names, the idempotency key, and every mark the connector leaves on a job, with their
//! formats, parsers and size limits, in this one file: the key at the end of a job's name, a
//! coalesced array's keys packed in its comment, or its name and log file names ([`KeysIn`]),
//! and the once-only protocol's mark in the comment of a job held for its check ([`AWAITING_CHECK`]). The key is
//! derived only from who the execution is, so a CreateTask retried after a timeout finds the
//! job the first attempt submitted instead of submitting a second one.

use super::spec::ExecutionIdentity;

/// Prefix of the key inside a job's `comment`.
pub const COMMENT_KEY_PREFIX: &str = "flyte-key=";

/// 16 lowercase hex digits: the first 64 bits of the execution's digest
/// ([`ExecutionIdentity::digest`]).
pub fn idempotency_key(id: &ExecutionIdentity) -> String {
    id.digest()[..8]
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
    /// The job name, then the file names of the array's own stdout and stderr
    /// ([`array_log_names`]): slurmdbd keeps the stdio paths unless
    /// `AccountingStoreFlags=no_stdio` (`accounting_storage_slurmdbd.c`; a `text` column) and
    /// slurmrestd returns them from v0.0.41, and a file name holds [`LOG_NAME_KEYS_MAX`] keys:
    /// [`NAME_AND_LOGS_KEYS_MAX`] keys.
    NameAndLogs,
}

impl KeysIn {
    /// How many keys an array carries this way, given how many its comment could hold.
    pub fn cap(self, comment_cap: usize) -> usize {
        match self {
            KeysIn::Comment => comment_cap,
            KeysIn::Name => NAME_KEYS_MAX,
            KeysIn::NameAndLogs => NAME_AND_LOGS_KEYS_MAX,
        }
    }
}

/// Keys one log file name holds ([`array_log_names`]): 21. A file name is at most 255 bytes
/// (`NAME_MAX` of Linux's file systems, Lustre's and GPFS's too) once Slurm replaced `%a` by
/// the index (at most 7 digits: `MaxArraySize` is at most 4 000 001).
pub const LOG_NAME_KEYS_MAX: usize =
    (NAME_MAX - COMMENT_KEYS_PREFIX.len() - ".4000000.out".len()) / PACKED_KEY_LEN;

/// Keys an array carries in its name and its two log file names ([`KeysIn::NameAndLogs`]): 64.
pub const NAME_AND_LOGS_KEYS_MAX: usize = NAME_KEYS_MAX + 2 * LOG_NAME_KEYS_MAX;

/// The file names (in the array's working directory) of a coalesced array's own stdout and
/// stderr carrying the keys its name cannot ([`KeysIn::NameAndLogs`]): `keys` are those past
/// the name's [`NAME_KEYS_MAX`], the first [`LOG_NAME_KEYS_MAX`] in stdout's
/// (`flyte-keys=<packed>.%a.out`), the rest in stderr's; a file without keys is named as any
/// array's ([`ARRAY_LOGS`]). Base64url has no `.`, so the keys end at the first one, and `%a`
/// keeps each element's files apart (the keys already tell the arrays apart).
pub fn array_log_names(keys: &[&str]) -> (String, String) {
    assert!(
        keys.len() <= 2 * LOG_NAME_KEYS_MAX,
        "two file names hold at most {} keys",
        2 * LOG_NAME_KEYS_MAX
    );
    let (out, err) = keys.split_at(keys.len().min(LOG_NAME_KEYS_MAX));
    let named = |keys: &[&str], ext: &str| {
        if keys.is_empty() {
            format!("{ARRAY_LOGS}_%A_%a.{ext}")
        } else {
            format!("{}.%a.{ext}", keys_comment(keys, None))
        }
    };
    (named(out, "out"), named(err, "err"))
}

/// The keys packed in a log path's file name ([`array_log_names`]), expanded or not.
fn log_keys(path: Option<&str>) -> Option<Vec<String>> {
    let file = path?.rsplit('/').next()?;
    packed_keys_all(file.split('.').next()?)
}

/// The longest job name slurmdbd keeps whole (`tinytext`).
pub const NAME_MAX: usize = 255;
/// Keys a job name holds ([`keys_name`]): 22.
pub const NAME_KEYS_MAX: usize = (NAME_MAX - COMMENT_KEYS_PREFIX.len()) / PACKED_KEY_LEN;

/// Every key a job record packs, in index order, from its comment, or its name and then its
/// log file names (a coalesced array's, [`KeysIn`]); `None` for any other record.
pub fn record_keys(j: &crate::slurmrestd::JobInfo) -> Option<Vec<String>> {
    if let Some(keys) = j.comment.as_deref().and_then(packed_keys_all) {
        return Some(keys);
    }
    let mut keys = packed_keys_all(&j.name)?;
    if keys.len() == NAME_KEYS_MAX {
        // A full name may go on in the logs' names: stdout's, then (stdout's full) stderr's.
        for path in [&j.standard_output, &j.standard_error] {
            match log_keys(path.as_deref()) {
                Some(more) => {
                    let full = more.len() == LOG_NAME_KEYS_MAX;
                    keys.extend(more);
                    if !full {
                        break;
                    }
                }
                None => break,
            }
        }
    }
    Some(keys)
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
    held_by_user(j) && j.comment.as_deref().is_some_and(is_awaiting_check)
}

/// Appended to the comment of a job submitted held for its claim (`FLYTE_SLURM_ONCE_ONLY=claims`:
/// `service/submit/claim`), before the execution's (or batch's) marker and `]`; the release
/// restores the job's own comment. Found by whoever takes a holding over, in slurmctld's listing.
pub const CLAIM_MARK: &str = " [slurm-connector claim ";

/// The mark of a job held for the claim of `marker`.
pub fn claim_mark(marker: &str) -> String {
    format!("{CLAIM_MARK}{marker}]")
}

/// A comment without its claim's mark: the job's own, which the release restores.
pub fn without_claim_mark(comment: &str) -> &str {
    match comment.rfind(CLAIM_MARK) {
        Some(at) if comment.ends_with(']') => &comment[..at],
        _ => comment,
    }
}

/// Whether slurmctld's record is of a job still held for its claim: pending, held by its
/// submitter, its comment marked.
pub fn held_for_claim(j: &crate::slurmrestd::JobInfo) -> bool {
    held_by_user(j)
        && j.comment
            .as_deref()
            .is_some_and(|c| without_claim_mark(c).len() < c.len())
}

/// Whether the connector holds this job: for the keys' check, or for its claim. What GetTask
/// hands to the cluster's takeover task to settle when it lasts (`tracker::held_for_check`).
pub fn held_by_connector(j: &crate::slurmrestd::JobInfo) -> bool {
    awaiting_check(j) || held_for_claim(j)
}

fn held_by_user(j: &crate::slurmrestd::JobInfo) -> bool {
    j.state.base == crate::slurmrestd::BaseState::Pending
        // A pending record's reason carries slurmctld's description after it when there is one
        // (`JobHeldUser (launch failed requeued held)`): the bare name decides.
        && j.reason
            .as_deref()
            .is_some_and(|r| r.split(" (").next() == Some(HELD_BY_USER))
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
pub fn key_of_record(j: &crate::slurmrestd::JobInfo, element: Option<u32>) -> Option<String> {
    let (comment, name) = (j.comment.as_deref(), j.name.as_str());
    if let Some(c) = comment
        && c.starts_with(COMMENT_KEYS_PREFIX)
    {
        return packed_key_at(c, element?);
    }
    if name.starts_with(COMMENT_KEYS_PREFIX) {
        let index = element? as usize;
        if index < NAME_KEYS_MAX {
            return packed_key_at(name, index as u32);
        }
        return record_keys(j)?.into_iter().nth(index);
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
mod tests;
