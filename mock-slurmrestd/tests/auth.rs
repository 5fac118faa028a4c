//! Token handling like the real slurmrestd + slurmctld.

mod common;

use common::*;
use serde_json::json;

const STATE: &str = "/slurm/v0.0.42/jobs/state/";

async fn status(m: &Mock, headers: &[(&str, &str)]) -> u16 {
    m.call_as("GET", STATE, None, headers).await.status
}

#[tokio::test]
async fn accepted_tokens() {
    let m = start().await;
    let noiat = token_with(json!({"sun": "flyte", "exp": now() + 60}), KEY);
    assert_eq!(
        status(&m, &[("X-SLURM-USER-TOKEN", &noiat)]).await,
        200,
        "no X-SLURM-USER-NAME, no iat"
    );
    assert_eq!(
        status(
            &m,
            &[
                ("X-SLURM-USER-NAME", "flyte"),
                ("X-SLURM-USER-TOKEN", &noiat)
            ]
        )
        .await,
        200
    );
    let bearer = format!("Bearer {noiat}");
    assert_eq!(status(&m, &[("Authorization", &bearer)]).await, 200);
}

#[tokio::test]
async fn rejected_tokens() {
    let m = start().await;
    let t = |c| token_with(c, KEY);
    let expired = t(json!({"sun": "flyte", "exp": now() - 1}));
    let noexp = t(json!({"sun": "flyte", "iat": now()}));
    let nosun = t(json!({"exp": now() + 60}));
    let badsig = token_with(
        json!({"sun": "flyte", "exp": now() + 60}),
        b"wrong key wrong key wrong key",
    );
    for (what, tok) in [
        ("expired", expired.as_str()),
        ("no exp", &noexp),
        ("no sun", &nosun),
        ("bad signature", &badsig),
        ("garbage", "abc.def.ghi"),
    ] {
        let r = m
            .call_as(
                "GET",
                STATE,
                None,
                &[("X-SLURM-USER-NAME", "flyte"), ("X-SLURM-USER-TOKEN", tok)],
            )
            .await;
        assert_eq!(r.status, 511, "{what}");
        assert_eq!(
            r.json()["errors"][0]["error"],
            "Protocol authentication error",
            "{what}"
        );
        assert!(
            r.json()["jobs"].is_null(),
            "{what}: jobs/state dumps jobs:null on auth failure"
        );
    }
    let r = m
        .call_as("GET", STATE, None, &[("X-SLURM-USER-NAME", "flyte")])
        .await;
    assert_eq!(
        (r.status, r.text.as_str(), r.content_type.as_str()),
        (401, "Authentication failure", "text/plain")
    );
}

#[tokio::test]
async fn proxying_users() {
    let m = start().await;
    // A plain user may not act for another.
    assert_eq!(
        status(
            &m,
            &[
                ("X-SLURM-USER-NAME", "root"),
                ("X-SLURM-USER-TOKEN", &m.token)
            ]
        )
        .await,
        511
    );
    // SlurmUser and root may; the job then belongs to the named user.
    for sun in ["slurm", "root"] {
        let tok = token_with(json!({"sun": sun, "exp": now() + 60}), KEY);
        let r = m
            .call_as(
                "POST",
                "/slurm/v0.0.42/job/submit",
                Some(&json!({"job": m.job("true")})),
                &[("X-SLURM-USER-NAME", "flyte"), ("X-SLURM-USER-TOKEN", &tok)],
            )
            .await;
        assert_eq!(r.status, 200, "{sun}: {}", r.text);
        let id = r.json()["job_id"].as_u64().unwrap() as u32;
        assert_eq!(m.record(id).await["user_name"], "flyte");
        // Without the header the job is the token user's own.
        let r = m
            .call_as(
                "POST",
                "/slurm/v0.0.42/job/submit",
                Some(&json!({"job": m.job("true")})),
                &[("X-SLURM-USER-TOKEN", &tok)],
            )
            .await;
        let id = r.json()["job_id"].as_u64().unwrap() as u32;
        assert_eq!(m.record(id).await["user_name"], sun);
    }
}

#[tokio::test]
async fn minted_token_from_handle_and_key_not_in_debug() {
    let m = start().await;
    let tok = m.h.mint_token("bob", std::time::Duration::from_secs(30));
    assert_eq!(status(&m, &[("X-SLURM-USER-TOKEN", &tok)]).await, 200);
    let dbg = format!("{:?}", m.h.config());
    assert!(
        !dbg.contains(std::str::from_utf8(KEY).unwrap()),
        "the key must not appear in Debug output"
    );
}
