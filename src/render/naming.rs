//! Job names and the idempotency key. The key is derived only from who the execution is, so a
//! CreateTask retried after a timeout finds the job the first attempt submitted (by the key at the
//! end of its name, or, for a coalesced job array, in its comment) instead of submitting a second
//! one.

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
/// (`pipeline.preprocess` → `preprocess`), limited to `[A-Za-z0-9_-]` (others become `-`) and
/// 40 characters.
pub fn sanitize_short_name(task_name: &str) -> String {
    let short = task_name.rsplit('.').next().unwrap_or(task_name);
    let mut out = String::new();
    for c in short.chars() {
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
    let out: String = out.trim_matches('-').chars().take(40).collect();
    let out = out.trim_end_matches('-').to_string();
    if out.is_empty() {
        "task".to_string()
    } else {
        out
    }
}

/// `flyte-<short name>-<key>`: the whole 16-hex key, so the job can be recognised by its name alone
/// where the comment is not kept (slurmdbd stores comments only with
/// `AccountingStoreFlags=job_comment`), and 64 bits make two executions' names collide never in
/// practice (8 hex would, among ~100k runs of one task).
pub fn job_name(task_name: &str, key: &str) -> String {
    format!("flyte-{}-{key}", sanitize_short_name(task_name))
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

/// Prefix of the packed keys of a coalesced array's comment ([`keys_comment`]).
pub const COMMENT_KEYS_PREFIX: &str = "flyte-keys=";
/// The longest comment slurmctld accepts (`_test_strlen(comment, 1024)` in job_mgr.c; recorded:
/// `tests/fixtures/slurmrestd/*_coalesce-comment-*`).
pub const COMMENT_MAX: usize = 1024;
/// Characters one key takes in [`keys_comment`].
pub const PACKED_KEY_LEN: usize = 11;

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
/// the packed comment), else the key in the comment of connectors before 0.27 (`flyte-key=`),
/// else the key at the end of its name.
pub fn key_of_record(comment: Option<&str>, name: &str, element: Option<u32>) -> Option<String> {
    if let Some(c) = comment
        && c.starts_with(COMMENT_KEYS_PREFIX)
    {
        return packed_key_at(c, element?);
    }
    comment
        .and_then(key_from_comment)
        .or_else(|| key_from_job_name(name))
        .map(str::to_string)
}

/// The name of a coalesced job array of tasks named `element` (`flyte-<task>-<key>`): the
/// task's without a key (`flyte-<task>-array`), so no execution's key is read from it.
pub fn array_name(element: &str) -> String {
    match element.rsplit_once('-') {
        Some((task, _key)) => format!("{task}-array"),
        None => format!("{element}-array"),
    }
}

/// The key at the end of a name written by [`job_name`].
pub fn key_from_job_name(name: &str) -> Option<&str> {
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
        let name = job_name("pipeline.preprocess", &key);
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
            job_name("ops.nightly", key),
            "flyte-nightly-0123456789abcdef"
        );
        assert_eq!(
            key_from_comment("flyte-key=0123456789abcdef nightly run"),
            Some(key)
        );
        assert_eq!(key_from_comment("flyte-key=0123456789abcdef"), Some(key));
        assert_eq!(key_from_comment("nightly"), None);
        let array = array_name("flyte-prep-0123456789abcdef");
        assert_eq!(array, "flyte-prep-array");
        assert_eq!(key_from_job_name(&array), None);
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
        let name = job_name("t", &keys[0]);
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
