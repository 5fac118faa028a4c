//! Job names and the idempotency key. The key is derived only from who the execution is, so a
//! CreateTask retried after a timeout finds the job the first attempt submitted (by name prefix
//! or by the key in the job's comment) instead of submitting a second one.

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

/// The job's comment: the key first (so it is found without parsing), then the task's own.
pub fn comment(key: &str, user: Option<&str>) -> String {
    match user {
        Some(c) => format!("{COMMENT_KEY_PREFIX}{key} {c}"),
        None => format!("{COMMENT_KEY_PREFIX}{key}"),
    }
}

/// The key at the end of a name written by [`job_name`].
pub fn key_from_job_name(name: &str) -> Option<&str> {
    let key = name.strip_prefix("flyte-")?.rsplit('-').next()?;
    (key.len() == 16 && key.bytes().all(|b| b.is_ascii_hexdigit())).then_some(key)
}

/// The key inside a comment written by [`comment`].
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
            key_from_comment(&comment(key, Some("nightly run"))),
            Some(key)
        );
        assert_eq!(key_from_comment(&comment(key, None)), Some(key));
        assert_eq!(key_from_comment("nightly"), None);
    }
}
