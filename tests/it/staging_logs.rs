//! Tails of large files, GetTaskLogs text, failure tails, retention and exit markers, through
//! both backends.

use crate::common;
use common::staging as support;

use std::io::Write;
use std::time::{Duration, SystemTime};

use slurm_connector::staging::exit_marker;
use slurm_connector::staging::logs::{self, Cursor, LogStream, PageRequest};
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

        // GetTaskLogs' first page: each stream's tail, named; a missing one says so; a path
        // outside the roots says why it cannot be read.
        let streams = [
            stream("stdout", "/cluster/shared/w/j1.out"),
            stream("stderr", "/cluster/shared/w/j1.err"),
            stream("missing", "/cluster/shared/w/j8.out"),
            stream("outside", "/etc/passwd"),
        ];
        let p = logs::page(s.as_ref(), request("7", &streams, None, 500)).await;
        let of = |name: &str| -> Vec<&str> {
            p.lines
                .iter()
                .filter(|l| l.stream == name)
                .map(|l| l.text.as_str())
                .collect()
        };
        assert_eq!(of("stdout"), ["hello", "world"], "{name}");
        assert_eq!(of("stderr").len(), 100, "{name}");
        assert_eq!(
            of("missing"),
            ["/cluster/shared/w/j8.out has not been written yet"],
            "{name}"
        );
        assert!(
            of("outside")[0].contains("/etc/passwd cannot be read")
                && of("outside")[0].contains("refused"),
            "{name}: {:?}",
            p.lines
        );
        assert_eq!(
            p.cursor.offsets,
            [12, err.len() as u64, 0, 0],
            "{name}: each stream's end is where the next page starts"
        );
        assert_eq!(
            logs::Cursor::parse(&p.cursor.token(), "7", 4).unwrap(),
            p.cursor
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

fn stream(name: &str, path: &str) -> LogStream {
    LogStream {
        name: name.into(),
        path: path.into(),
    }
}

fn request<'a>(
    scope: &'a str,
    streams: &'a [LogStream],
    cursor: Option<Cursor>,
    max_lines: usize,
) -> PageRequest<'a> {
    PageRequest {
        scope,
        streams,
        cursor,
        max_lines,
        ranks: false,
        ended: false,
    }
}

fn append(fx: &Fixture, cluster: &str, text: &str) {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(fx.local(cluster))
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// A live log followed page by page: the first page is the tail, every later one exactly what
/// was written since (a line waits for its newline while the job runs), nothing read twice; a
/// log that starts again (requeue) is said and read from its start; once the job ended a last
/// line without a newline comes too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_growing_log_is_followed_without_reading_anything_twice() {
    let fx = Fixture::new("follow");
    for (name, s) in fx.backends().await {
        let out = format!("/cluster/shared/{name}/j.out");
        let err = format!("/cluster/shared/{name}/j.err");
        let before: String = (0..1000).map(|i| format!("old {i}\n")).collect();
        fx.write(&out, &before);
        let streams = [stream("stdout", &out), stream("stderr", &err)];
        let texts = |p: &logs::Page, stream: &str| -> Vec<String> {
            p.lines
                .iter()
                .filter(|l| l.stream == stream)
                .map(|l| l.text.clone())
                .collect()
        };
        let p = logs::page(s.as_ref(), request("9", &streams, None, 3)).await;
        assert_eq!(
            texts(&p, "stdout"),
            ["old 997", "old 998", "old 999"],
            "{name}"
        );
        assert_eq!(p.cursor.offsets, [before.len() as u64, 0], "{name}");
        let mut cursor = p.cursor;
        let mut read_after_first = 0;
        // Nothing new: nothing returned, nothing read.
        let p = logs::page(
            s.as_ref(),
            request("9", &streams, Some(cursor.clone()), 500),
        )
        .await;
        assert!(p.lines.is_empty(), "{name}: {:?}", p.lines);
        assert_eq!(p.bytes_read, 0, "{name}");
        cursor = p.cursor;
        // Two lines and half of a third; stderr appears.
        append(&fx, &out, "new 1\nnew 2\nhal");
        fx.write(&err, "e1\n");
        let p = logs::page(
            s.as_ref(),
            request("9", &streams, Some(cursor.clone()), 500),
        )
        .await;
        read_after_first += p.bytes_read;
        assert_eq!(texts(&p, "stdout"), ["new 1", "new 2"], "{name}");
        assert_eq!(texts(&p, "stderr"), ["e1"], "{name}");
        cursor = p.cursor;
        append(&fx, &out, "f\n");
        let p = logs::page(
            s.as_ref(),
            request("9", &streams, Some(cursor.clone()), 500),
        )
        .await;
        read_after_first += p.bytes_read;
        assert_eq!(texts(&p, "stdout"), ["half"], "{name}");
        cursor = p.cursor;
        // `lines` bounds a page; the rest comes on the next.
        append(&fx, &out, "a\nb\nc\n");
        let p = logs::page(s.as_ref(), request("9", &streams, Some(cursor.clone()), 2)).await;
        read_after_first += p.bytes_read;
        assert_eq!(texts(&p, "stdout"), ["a", "b"], "{name}");
        let p = logs::page(s.as_ref(), request("9", &streams, Some(p.cursor), 2)).await;
        read_after_first += p.bytes_read;
        assert_eq!(texts(&p, "stdout"), ["c"], "{name}");
        cursor = p.cursor;
        // What was read since the first page is what was appended, and twice only a half line
        // (read again once its newline came) and the line a `lines`-bounded page left.
        let appended = "new 1\nnew 2\nhal".len() + "e1\n".len() + "f\n".len() + "a\nb\nc\n".len();
        assert_eq!(
            read_after_first as usize,
            appended + "hal".len() + "c\n".len(),
            "{name}"
        );
        // A last line without a newline: held while running, shown once ended.
        append(&fx, &out, "done");
        let p = logs::page(
            s.as_ref(),
            request("9", &streams, Some(cursor.clone()), 500),
        )
        .await;
        assert!(texts(&p, "stdout").is_empty(), "{name}");
        assert!(!p.drained, "{name}");
        let mut ended = request("9", &streams, Some(p.cursor), 500);
        ended.ended = true;
        let p = logs::page(s.as_ref(), ended).await;
        assert_eq!(texts(&p, "stdout"), ["done"], "{name}");
        assert!(p.drained, "{name}: everything read");
        // The job was requeued and its log starts again.
        fx.write(&out, "again\n");
        let q = logs::page(s.as_ref(), request("9", &streams, Some(p.cursor), 500)).await;
        assert!(
            q.lines
                .iter()
                .any(|l| l.system && l.text.contains("starts again")),
            "{name}: {:?}",
            q.lines
        );
        let q = logs::page(s.as_ref(), request("9", &streams, Some(q.cursor), 500)).await;
        assert_eq!(texts(&q, "stdout"), ["again"], "{name}");
    }
}

/// The token is ours and the task's: another job's, a wrong stream count or a foreign string is
/// refused with what to send instead.
#[test]
fn a_token_is_checked_against_its_task() {
    let c = Cursor {
        scope: "12_3".into(),
        next: 1,
        offsets: vec![5, 0],
    };
    let t = c.token();
    assert_eq!(Cursor::parse(&t, "12_3", 2).unwrap(), c);
    for (token, scope, n, says) in [
        (t.as_str(), "12_4", 2, "it is for Slurm job 12_3, not 12_4"),
        (t.as_str(), "12_3", 3, "it has 2 offsets"),
        ("page-2", "12_3", 2, "not a token this connector wrote"),
        (
            "slurm-logs-v1:12_3:0:x,1",
            "12_3",
            2,
            "an offset is not a number",
        ),
    ] {
        let e = Cursor::parse(token, scope, n).unwrap_err();
        assert!(e.contains(says) && e.contains("`token`"), "{e}");
    }
}

/// A multi-rank task's lines, labelled `N: ` by srun, are each rank's stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_rank_of_a_multi_rank_task_is_its_own_stream() {
    let fx = Fixture::new("ranks");
    fx.write(
        "/cluster/shared/r.out",
        "0: from zero\n1: from one\n 12: twelve\nplain\n",
    );
    let s = fx.local_backend();
    let streams = [stream("stdout", "/cluster/shared/r.out")];
    let mut req = request("5", &streams, None, 500);
    req.ranks = true;
    let p = logs::page(s.as_ref(), req).await;
    let got: Vec<(&str, &str)> = p
        .lines
        .iter()
        .map(|l| (l.stream.as_str(), l.text.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("stdout rank 0", "from zero"),
            ("stdout rank 1", "from one"),
            ("stdout rank 12", "twelve"),
            ("stdout", "plain"),
        ]
    );
}

/// A growing 100 MiB log followed over 1000 pages: every byte read once (the bytes read equal
/// the bytes written after the first page), every line returned once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_mib_log_over_a_thousand_polls_is_read_once() {
    let fx = Fixture::new("follow-big");
    for (name, s) in fx.backends().await {
        let out = format!("/cluster/shared/{name}/big.out");
        fx.write(&out, "");
        let streams = [stream("stdout", &out)];
        let p = logs::page(s.as_ref(), request("1", &streams, None, 10_000)).await;
        let mut cursor = p.cursor;
        let (mut written, mut read, mut lines) = (0u64, 0u64, 0u64);
        // 105 kB a poll: 1000 lines of 105 bytes (their number first); 105 MB > 100 MiB in all.
        for poll in 0..1000u64 {
            let chunk: String = (0..1000u64)
                .map(|k| format!("{:<104}\n", poll * 1000 + k))
                .collect();
            append(&fx, &out, &chunk);
            written += chunk.len() as u64;
            let p = logs::page(s.as_ref(), request("1", &streams, Some(cursor), 10_000)).await;
            read += p.bytes_read;
            for l in &p.lines {
                assert_eq!(l.text.trim_end().parse::<u64>().unwrap(), lines, "{name}");
                lines += 1;
            }
            cursor = p.cursor;
        }
        assert_eq!(written, 105_000_000, "{name}");
        assert_eq!(
            read, written,
            "{name}: bytes read == bytes written: none twice"
        );
        assert_eq!(lines, 1_000_000, "{name}");
        println!("staging_logs: {name}: 1000 polls, {written} bytes written, {read} read");
    }
}
