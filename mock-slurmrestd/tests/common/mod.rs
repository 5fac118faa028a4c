//! Shared test helpers: start a mock, talk to it, compare JSON shapes with recorded samples.
#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use mock_slurmrestd::{MockConfig, MockHandle, MockServer, SlurmVersion};
use serde_json::{Value, json};

pub const KEY: &[u8] = b"test-jwt-key-0123456789abcdef0123456789";

pub struct Mock {
    pub h: MockHandle,
    pub http: reqwest::Client,
    pub token: String,
    pub dir: tempfile::TempDir,
    /// The API version the helpers below (`submit`, `record`, `wait_state`) talk.
    pub api: &'static str,
}

pub fn config() -> MockConfig {
    MockConfig {
        jwt_key: KEY.to_vec(),
        kill_wait: Duration::from_millis(300),
        minute: Duration::from_millis(400),
        ..MockConfig::default()
    }
}

pub async fn start_with(cfg: MockConfig) -> Mock {
    let h = MockServer::start(cfg, "127.0.0.1:0".parse().unwrap())
        .await
        .expect("mock starts");
    let token = h.mint_token("flyte", Duration::from_secs(600));
    Mock {
        h,
        http: reqwest::Client::new(),
        token,
        dir: tempfile::tempdir().unwrap(),
        api: "v0.0.42",
    }
}

pub async fn start() -> Mock {
    start_with(config()).await
}

pub async fn start_version(v: SlurmVersion) -> Mock {
    start_with(MockConfig {
        slurm_version: v,
        ..config()
    })
    .await
}

/// A token signed with KEY and arbitrary claims.
pub fn token_with(claims: Value, key: &[u8]) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(key).unwrap(),
    )
    .unwrap()
}

pub fn now() -> i64 {
    chrono_now()
}

fn chrono_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

pub struct Resp {
    pub status: u16,
    pub content_type: String,
    pub text: String,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
}

impl Mock {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.h.url(), path)
    }

    pub fn cwd(&self) -> String {
        self.dir.path().to_string_lossy().into_owned()
    }

    /// A request as `flyte` with the default valid token.
    pub async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Resp {
        self.call_as(
            method,
            path,
            body,
            &[
                ("X-SLURM-USER-NAME", "flyte"),
                ("X-SLURM-USER-TOKEN", &self.token),
            ],
        )
        .await
    }

    pub async fn call_as(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Resp {
        let mut rb = self.http.request(method.parse().unwrap(), self.url(path));
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        if let Some(b) = body {
            rb = rb.json(b);
        }
        let r = rb.send().await.expect("request sent");
        let status = r.status().as_u16();
        let content_type = r
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        Resp {
            status,
            content_type,
            text: r.text().await.unwrap(),
        }
    }

    /// POST a body given as text (key order preserved, unlike a `Value`).
    pub async fn post_text(&self, path: &str, body: &str) -> Resp {
        let r = self
            .http
            .post(self.url(path))
            .header("X-SLURM-USER-NAME", "flyte")
            .header("X-SLURM-USER-TOKEN", &self.token)
            .header("Content-Type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("request sent");
        let status = r.status().as_u16();
        let content_type = r
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        Resp {
            status,
            content_type,
            text: r.text().await.unwrap(),
        }
    }

    /// Submit a job body (the `job` object); returns the job id.
    pub async fn submit(&self, job: Value) -> u32 {
        let r = self
            .call(
                "POST",
                &format!("/slurm/{}/job/submit", self.api),
                Some(&json!({"job": job})),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        r.json()["job_id"]
            .as_u64()
            .unwrap_or_else(|| panic!("no job_id: {}", r.text)) as u32
    }

    /// A simple job in the test's temp dir.
    pub fn job(&self, script: &str) -> Value {
        json!({"script": format!("#!/bin/bash\n{script}\n"), "environment": ["PATH=/bin:/usr/bin", "LANG=C"],
               "current_working_directory": self.cwd()})
    }

    pub async fn record(&self, id: u32) -> Value {
        let r = self
            .call("GET", &format!("/slurm/{}/job/{id}", self.api), None)
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        r.json()["jobs"][0].clone()
    }

    pub async fn state(&self, id: u32) -> String {
        self.record(id).await["job_state"][0]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Poll until the job's state is exactly `[want]` (no COMPLETING flag; 10 s at most).
    pub async fn wait_state(&self, id: u32, want: &str) -> Value {
        let t0 = Instant::now();
        loop {
            let rec = self.record(id).await;
            if rec["job_state"] == json!([want]) {
                return rec;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "job {id} never reached {want}: {}",
                rec["job_state"]
            );
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    }
}

impl Mock {
    /// Poll until the job's standard output starts with `want` (10 s at most). A job reported
    /// RUNNING has been spawned, not yet run its first line: a test that signals a script must
    /// wait for the script to say its traps are set, or a loaded machine delivers the signal
    /// to a bash that has not read `trap` yet.
    pub async fn wait_stdout(&self, id: u32, want: &str) {
        let t0 = Instant::now();
        loop {
            let rec = self.record(id).await;
            let out = rec["standard_output"]
                .as_str()
                .and_then(|p| std::fs::read_to_string(p).ok())
                .unwrap_or_default();
            if out.starts_with(want) {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "job {id} never wrote {want:?} to its standard output: {out:?}"
            );
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    }

    /// Poll until the job's `state_reason` is `want` (10 s at most).
    pub async fn wait_reason(&self, id: u32, want: &str) -> Value {
        let t0 = Instant::now();
        loop {
            let rec = self.record(id).await;
            if rec["state_reason"] == want {
                return rec;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "job {id} never got reason {want}: {}",
                rec["state_reason"]
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A recorded sample from tests/fixtures.
pub fn fixture(name: &str) -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(format!("{name}.json"));
    serde_json::from_str(
        &std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
    )
    .unwrap()
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// "Same shape": same keys at every level and the same JSON type for every value; arrays compare
/// each element of ours with the first element of the real one (when both are non-empty).
pub fn same_shape(real: &Value, ours: &Value, path: &str, problems: &mut Vec<String>) {
    match (real, ours) {
        (Value::Object(a), Value::Object(b)) => {
            for k in a.keys() {
                if !b.contains_key(k) {
                    problems.push(format!("{path}/{k}: missing in mock"));
                }
            }
            for k in b.keys() {
                if !a.contains_key(k) {
                    problems.push(format!("{path}/{k}: not in real"));
                }
            }
            for (k, v) in a {
                if let Some(w) = b.get(k) {
                    same_shape(v, w, &format!("{path}/{k}"), problems);
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            if let Some(first) = a.first() {
                for (i, w) in b.iter().enumerate() {
                    same_shape(first, w, &format!("{path}[{i}]"), problems);
                }
            }
        }
        (a, b) if type_name(a) != type_name(b) => {
            problems.push(format!(
                "{path}: real is {} ({a}), mock is {} ({b})",
                type_name(a),
                type_name(b)
            ));
        }
        _ => {}
    }
}

pub fn assert_same_shape(real: &Value, ours: &Value, what: &str) {
    let mut problems = Vec::new();
    same_shape(real, ours, "", &mut problems);
    assert!(
        problems.is_empty(),
        "{what}: shape differs from the real one:\n{}",
        problems.join("\n")
    );
}

#[test]
fn comparator_catches_differences() {
    let mut p = Vec::new();
    same_shape(
        &json!({"a": 1, "b": [{"c": "x"}]}),
        &json!({"a": "1", "b": [{"c": "y", "d": 1}]}),
        "",
        &mut p,
    );
    assert_eq!(p.len(), 2, "{p:?}");
    let mut p = Vec::new();
    same_shape(&json!({"a": {"set": true}}), &json!({"b": {}}), "", &mut p);
    assert_eq!(p.len(), 2, "{p:?}");
    let mut p = Vec::new();
    same_shape(
        &json!({"a": [1, 2], "b": null}),
        &json!({"a": [], "b": null}),
        "",
        &mut p,
    );
    assert!(p.is_empty());
}

/// Replace whole-number tokens (job ids) in a path/query.
pub fn map_ids(s: &str, ids: &[(u32, u32)]) -> String {
    let mut out = String::new();
    let mut digits = String::new();
    let flush = |digits: &mut String, out: &mut String| {
        if !digits.is_empty() {
            let n: u32 = digits.parse().unwrap_or(u32::MAX);
            match ids.iter().find(|(r, _)| *r == n) {
                Some((_, o)) => out.push_str(&o.to_string()),
                None => out.push_str(digits),
            }
            digits.clear();
        }
    };
    for c in s.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        } else {
            flush(&mut digits, &mut out);
            out.push(c);
        }
    }
    flush(&mut digits, &mut out);
    out
}

/// Send the sample's request (ids mapped, `/tmp` cwd moved to the test's folder) to the mock.
pub async fn replay(
    m: &Mock,
    sample: &Value,
    ids: &[(u32, u32)],
    headers: Option<&[(&str, &str)]>,
) -> Resp {
    let req = &sample["request"];
    let url = req["url"].as_str().unwrap();
    let after_scheme = &url[url.find("://").map_or(0, |i| i + 3)..];
    let path = &after_scheme[after_scheme.find('/').unwrap_or(after_scheme.len())..];
    // Keep the version ("v0.0.NN") out of the id mapping.
    let v = path.find("/v0.0.").map_or(0, |i| i + "/v0.0.".len());
    let v = v + path[v..].find('/').unwrap_or(path.len() - v);
    let (prefix, rest) = path.split_at(v);
    let path = format!("{prefix}{}", map_ids(rest, ids));
    let mut body = req.get("body").cloned().filter(|b| !b.is_null());
    if let Some(job) = body.as_mut().and_then(|b| b.get_mut("job"))
        && job.get("current_working_directory") == Some(&json!("/tmp"))
    {
        job["current_working_directory"] = json!(m.cwd());
    }
    let method = req["method"].as_str().unwrap();
    match headers {
        Some(h) => m.call_as(method, &path, body.as_ref(), h).await,
        None => m.call(method, &path, body.as_ref()).await,
    }
}

/// Status, content type and (JSON) shape or (text) body must match the sample.
pub fn check(sample: &Value, got: &Resp, name: &str) {
    let resp = &sample["response"];
    assert_eq!(
        got.status as u64,
        resp["status"].as_u64().unwrap(),
        "{name}: status; body {}",
        got.text
    );
    let ct = resp["headers"]["Content-Type"]
        .as_str()
        .unwrap_or("application/json");
    assert_eq!(got.content_type, ct, "{name}: content type");
    match &resp["body"] {
        Value::String(s) => assert_eq!(&got.text, s, "{name}: text body"),
        real => assert_same_shape(real, &got.json(), name),
    }
}

pub async fn contract(m: &Mock, name: &str, ids: &[(u32, u32)]) -> Value {
    let sample = fixture(name);
    let got = replay(m, &sample, ids, None).await;
    check(&sample, &got, name);
    if got.content_type == "application/json" {
        got.json()
    } else {
        Value::Null
    }
}
