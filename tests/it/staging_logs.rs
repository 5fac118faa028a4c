//! Tails of large files, GetTaskLogs text, failure tails, retention and exit markers, through
//! both backends.

use crate::common;
use common::staging as support;

use std::io::Write;
use std::time::{Duration, SystemTime};

use slurm_connector::staging::exit_marker;
use slurm_connector::staging::logs::{self, DEFAULT_LOG_LINES};
use slurm_connector::staging::retention::{FinishedJob, sweep};
use support::Fixture;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_of_a_large_file_is_exact() {
    let fx = Fixture::new("tail");
    let path = fx.local("/cluster/shared/big.log");
    {
        let mut w = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        for i in 0..2_000_000 {
            writeln!(w, "line {i} {}", "x".repeat(i % 40)).unwrap();
        }
    }
    fx.write("/cluster/shared/nonl.log", "a\nb\nc");
    fx.write("/cluster/shared/short.log", "only\n");
    fx.write("/cluster/shared/empty.log", "");
    fx.write(
        "/cluster/shared/long-lines.log",
        format!("{}\nend\n", "L".repeat(10 << 20)),
    );
    for (name, s) in fx.backends().await {
        let t = s
            .tail("/cluster/shared/big.log", 500)
            .await
            .unwrap()
            .unwrap();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 500, "{name}");
        assert_eq!(
            lines[0],
            format!("line 1999500 {}", "x".repeat(1999500 % 40))
        );
        assert_eq!(
            lines[499],
            format!("line 1999999 {}", "x".repeat(1999999 % 40))
        );
        assert_eq!(
            s.tail("/cluster/shared/nonl.log", 2)
                .await
                .unwrap()
                .unwrap(),
            "b\nc"
        );
        assert_eq!(
            s.tail("/cluster/shared/short.log", 30)
                .await
                .unwrap()
                .unwrap(),
            "only"
        );
        assert_eq!(
            s.tail("/cluster/shared/empty.log", 30)
                .await
                .unwrap()
                .unwrap(),
            ""
        );
        // A line longer than the read cap is cut, not buffered whole.
        let t = s
            .tail("/cluster/shared/long-lines.log", 2)
            .await
            .unwrap()
            .unwrap();
        assert!(
            t.ends_with("\nend") && t.len() <= 4 << 20,
            "{name}: {}",
            t.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_retention_and_exit_markers() {
    let fx = Fixture::new("logs");
    let err: String = (1..=100).map(|i| format!("err {i}\n")).collect();
    fx.write("/cluster/shared/w/j1.out", "hello\nworld\n");
    fx.write("/cluster/shared/w/j1.err", &err);
    fx.write("/cluster/shared/w/j1.exit", "137\n");
    fx.write("/cluster/shared/w/bad.exit", "oops\n");
    for (name, s) in fx.backends().await {
        let tail = logs::failure_tail(s.as_ref(), "/cluster/shared/w/j1.err")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(tail.lines().count(), 30, "{name}");
        assert!(
            tail.starts_with("err 71\n") && tail.ends_with("err 100"),
            "{name}: {tail}"
        );
        assert_eq!(
            logs::failure_tail(s.as_ref(), "/cluster/shared/w/none.err")
                .await
                .unwrap(),
            None
        );

        let l = logs::task_logs(
            s.as_ref(),
            "7",
            "/cluster/shared/w/j1.out",
            "/cluster/shared/w/j1.err",
            DEFAULT_LOG_LINES,
        )
        .await;
        assert_eq!(
            l[0],
            "==> stdout (/cluster/shared/w/j1.out, last 500 lines) <=="
        );
        assert_eq!(&l[1..3], ["hello", "world"]);
        assert_eq!(
            l[3],
            "==> stderr (/cluster/shared/w/j1.err, last 500 lines) <=="
        );
        assert_eq!(l.len(), 104, "{name}");
        let l = logs::task_logs(
            s.as_ref(),
            "8",
            "/cluster/shared/w/j8.out",
            "/cluster/shared/w/j8.err",
            500,
        )
        .await;
        assert_eq!(l, vec!["No output yet from Slurm job 8: /cluster/shared/w/j8.out and /cluster/shared/w/j8.err are empty or not written yet.".to_string()]);
        let l = logs::task_logs(
            s.as_ref(),
            "9",
            "/etc/passwd",
            "/cluster/shared/w/j8.err",
            500,
        )
        .await;
        assert!(
            l[0].contains("stdout (/etc/passwd) cannot be read") && l[0].contains("refused"),
            "{name}: {l:?}"
        );

        assert_eq!(
            exit_marker::read_exit_marker(s.as_ref(), "/cluster/shared/w", "j1")
                .await
                .unwrap(),
            Some(exit_marker::ExitMarker::code(137))
        );
        assert_eq!(
            exit_marker::read_exit_marker(s.as_ref(), "/cluster/shared/w/", "j2")
                .await
                .unwrap(),
            None
        );
        let e = exit_marker::read_exit_marker(s.as_ref(), "/cluster/shared/w", "bad")
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains("/cluster/shared/w/bad.exit"),
            "{name}: {e}"
        );
    }

    // Retention: due jobs lose their files; recent ones keep them.
    let now = SystemTime::now();
    let week = Duration::from_secs(7 * 86_400);
    for (name, s) in fx.backends().await {
        let old = format!("/cluster/shared/r-{name}/old");
        let new = format!("/cluster/shared/r-{name}/new");
        for j in [&old, &new] {
            fx.write(&format!("{j}.sh"), "#!/bin/bash");
            fx.write(&format!("{j}.out"), "o");
            fx.write(&format!("{j}.outputs/model"), "m");
        }
        let job = |id: &str, p: &str, ended_at| FinishedJob {
            job_id: id.into(),
            ended_at,
            paths: vec![
                format!("{p}.sh"),
                format!("{p}.out"),
                format!("{p}.err"),
                format!("{p}.outputs"),
            ],
        };
        let jobs = vec![
            job("1", &old, now - week - Duration::from_secs(1)),
            job("2", &new, now - Duration::from_secs(3600)),
            FinishedJob {
                job_id: "3".into(),
                ended_at: now - week * 2,
                paths: vec!["/etc/passwd".into()],
            },
        ];
        let report = sweep(s.as_ref(), &jobs, week, now).await;
        assert_eq!(report.removed_jobs, vec!["1".to_string()], "{name}");
        assert_eq!(report.kept, 1);
        assert_eq!(report.failures.len(), 1);
        assert!(
            report.failures[0].1.contains("refused"),
            "{name}: {:?}",
            report.failures
        );
        assert!(
            !fx.local(&format!("{old}.sh")).exists()
                && !fx.local(&format!("{old}.outputs")).exists()
        );
        assert!(
            fx.local(&format!("{new}.sh")).exists()
                && fx.local(&format!("{new}.outputs/model")).exists()
        );
    }
}
