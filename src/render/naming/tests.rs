use super::*;
use crate::slurmrestd::{JobId, JobInfo, JobState};

fn rec(comment: Option<&str>, name: &str) -> JobInfo {
    let mut j = JobInfo::new(JobId(1), name, JobState::from_strings(["PENDING"]));
    j.comment = comment.map(str::to_string);
    j
}

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
    assert_eq!(record_keys(&rec(None, &name)), Some(keys.clone()));
    // slurmdbd without job_comment: the comment is gone, the task's own, or the check's mark.
    assert_eq!(
        record_keys(&rec(Some("the task's"), &name)),
        Some(keys.clone())
    );
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(
            key_of_record(&rec(None, &name), Some(i as u32)).as_ref(),
            Some(k)
        );
    }
    assert_eq!(key_of_record(&rec(None, &name), None), None);
    assert_eq!(key_from_job_name(&name), None);
    // A plain job's name is no array's.
    let plain = job_name("r", "t", &keys[0]);
    assert_eq!(record_keys(&rec(None, &plain)), None);
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
            key_of_record(&rec(Some(&c), "flyte-x-map"), Some(i as u32)).as_deref(),
            Some(k.as_str())
        );
    }
    assert_eq!(packed_key_at(&c, 90), None, "past the last element");
    assert_eq!(packed_keys_all(&c), Some(keys.clone()));
    // The array's own record (its pending remainder) is no one element.
    assert_eq!(key_of_record(&rec(Some(&c), "flyte-x-map"), None), None);
    // A single job: its name; an old connector's job: its comment.
    let name = job_name("r1", "t", &keys[0]);
    assert_eq!(
        key_of_record(&rec(Some("the task's comment"), &name), None).as_deref(),
        Some(keys[0].as_str())
    );
    assert_eq!(
        key_of_record(&rec(Some("flyte-key=0123456789abcdef x"), "other"), None).as_deref(),
        Some("0123456789abcdef")
    );
    assert_eq!(packed_keys_all("flyte-keys=abc"), None, "not whole keys");
}

#[test]
fn an_array_past_its_names_22_keys_carries_the_rest_in_its_log_file_names() {
    let keys: Vec<String> = (0..NAME_AND_LOGS_KEYS_MAX)
        .map(|i| idempotency_key(&id(&format!("r{i}"), 0)))
        .collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    assert_eq!((LOG_NAME_KEYS_MAX, NAME_AND_LOGS_KEYS_MAX), (21, 64));
    for n in [23, 43, 44, 64] {
        let (out, err) = array_log_names(&refs[NAME_KEYS_MAX..n]);
        for f in [&out, &err] {
            let longest = f.replace("%a", "4000000").replace("%A", "4294967295");
            assert!(
                longest.len() <= NAME_MAX,
                "{n}: {longest} is {} bytes",
                longest.len()
            );
            assert!(!f.contains('/'), "{f}");
        }
        let mut j = rec(Some("the task's"), &keys_name(&refs[..NAME_KEYS_MAX]));
        // As slurmctld and slurmdbd (`stdout_expanded`) give them: `%a` replaced.
        j.standard_output = Some(format!("/scratch/w/{}", out.replace("%a", "17")));
        j.standard_error = Some(format!(
            "/scratch/w/{}",
            err.replace("%A_%a", "9_17").replace("%a", "17")
        ));
        assert_eq!(record_keys(&j).as_deref(), Some(&keys[..n]), "{n}");
        for (i, k) in keys[..n].iter().enumerate() {
            assert_eq!(
                key_of_record(&j, Some(i as u32)).as_ref(),
                Some(k),
                "{n}: {i}"
            );
        }
        assert_eq!(
            key_of_record(&j, Some(n as u32)),
            None,
            "past the last element"
        );
        // Unexpanded (slurmdbd's `stdout`) too.
        j.standard_output = Some(format!("/scratch/w/{out}"));
        j.standard_error = Some(format!("/scratch/w/{err}"));
        assert_eq!(record_keys(&j).as_deref(), Some(&keys[..n]), "{n}");
    }
    // slurmdbd with `no_stdio` (or v0.0.40, which returns no paths): the name's 22 only.
    let mut j = rec(None, &keys_name(&refs[..NAME_KEYS_MAX]));
    assert_eq!(record_keys(&j).as_deref(), Some(&keys[..NAME_KEYS_MAX]));
    // An array of 22 in the name alone has logs named as any array's.
    j.standard_output = Some("/w/flyte-array_9_3.out".into());
    assert_eq!(record_keys(&j).as_deref(), Some(&keys[..NAME_KEYS_MAX]));
    // A name of fewer keys is never continued by its logs.
    let mut short = rec(None, &keys_name(&refs[..3]));
    short.standard_output = Some(format!("/w/{}", array_log_names(&refs[3..5]).0));
    assert_eq!(record_keys(&short).as_deref(), Some(&keys[..3]));
}
