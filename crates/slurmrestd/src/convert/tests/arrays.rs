use super::*;

/// Job arrays on 24.11 (`arrays-*`, recorded with MinJobAge 5): `jobs/state?job_id=<array>`
/// answers each element as `<own id>_<index>`; the pending remainder stays under the array's id
/// and the last element to start keeps it; an element that finished leaves slurmctld on its
/// own while the others run. Records of every element name the array and their index.
#[test]
fn array_elements_are_read_with_their_own_ids_and_indices() {
    // Each element as `index:id:STATE`, sorted by index.
    let elements = |file: &str| -> String {
        let s = all_states(&recording(file));
        assert!(s.jobs.is_empty(), "{file}: an array has no plain entry");
        let mut e: Vec<_> = s
            .elements
            .into_iter()
            .map(|e| (e.index, e.id.0, e.state.to_string()))
            .collect();
        e.sort();
        let e: Vec<_> = e
            .iter()
            .map(|(i, id, st)| format!("{i}:{id}:{st}"))
            .collect();
        e.join(" ")
    };
    for (file, want) in [
        (
            "24.11_v0.0.42_arrays-state-0",
            "0:2205:PENDING 1:2205:PENDING 2:2205:PENDING 3:2205:PENDING 4:2205:PENDING 5:2205:PENDING",
        ),
        (
            "24.11_v0.0.42_arrays-state-10",
            "0:2206:COMPLETED 1:2207:COMPLETED 2:2208:COMPLETED 3:2209:FAILED 4:2205:PENDING 5:2205:PENDING",
        ),
        // Elements 0 and 1 finished more than MinJobAge ago: gone, while 4 and 5 run.
        (
            "24.11_v0.0.42_arrays-state-14",
            "2:2208:COMPLETED 3:2209:FAILED 4:2210:RUNNING 5:2205:RUNNING",
        ),
    ] {
        assert_eq!(elements(file), want, "{file}");
    }
    assert!(elements("24.11_v0.0.42_arrays-state-30").is_empty());
    // The same array shape (`--array=0-4%3`, element 3 exits 3) a few seconds after its end,
    // asked in two versions of one 24.11: v0.0.41 names element 3 by its own id (7638), v0.0.40
    // by the array's (7634): only the record's `job_id` is the element's own there.
    assert_eq!(
        elements("24.11_v0.0.41_arrays-state-ended"),
        "3:7638:FAILED 4:7634:COMPLETED"
    );
    assert_eq!(
        elements("24.11_v0.0.40_arrays-state-ended"),
        "3:7634:FAILED 4:7634:COMPLETED"
    );

    // job/{array id}: one record per element that started, and the array's own record for the
    // pending remainder (no task id).
    let recs = job_infos(&recording("24.11_v0.0.42_arrays-job-get-2"));
    let mut got: Vec<_> = recs
        .iter()
        .map(|j| (j.job_id.0, j.array.map(|a| (a.array_job_id.0, a.task_id))))
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            (2205, Some((2205, None))),
            (2206, Some((2205, Some(0)))),
            (2207, Some((2205, Some(1))))
        ]
    );
    let failed = job_infos(&recording("24.11_v0.0.42_arrays-job-get-14"))
        .into_iter()
        .find(|j| j.array.and_then(|a| a.task_id) == Some(3))
        .unwrap();
    assert_eq!(failed.job_id, JobId(2209));
    assert_eq!(failed.exit_code.unwrap().return_code, Some(3));
    // %A_%a in the paths: the array's id and the element's index.
    assert_eq!(
        failed.standard_error.as_deref(),
        Some("/shared/flyte/arr-probe-2205_3.err")
    );

    // slurmdbd, after they all left slurmctld: `jobs?step=<array id>` (what the tracker asks
    // for jobs gone from slurmctld) lists every element under its own id.
    let db = accounting(&recording("24.11_v0.0.42_arrays-slurmdb-jobs-step-30"));
    let mut got: Vec<_> = db
        .iter()
        .map(|j| {
            (
                j.array.unwrap().task_id.unwrap(),
                j.job_id.0,
                j.state.to_string(),
                j.array.unwrap().array_job_id.0,
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            (0, 2206, "COMPLETED".to_string(), 2205),
            (1, 2207, "COMPLETED".into(), 2205),
            (2, 2208, "COMPLETED".into(), 2205),
            (3, 2209, "FAILED".into(), 2205),
            (4, 2210, "COMPLETED".into(), 2205),
            (5, 2205, "COMPLETED".into(), 2205)
        ]
    );
    // A plain job's record is no array's.
    for r in case("job-get-one") {
        assert!(
            job_infos(&r).iter().all(|j| j.array.is_none()),
            "{}",
            r.file
        );
    }
    for r in case("slurmdb-job-get") {
        assert!(
            accounting(&r).iter().all(|j| j.array.is_none()),
            "{}",
            r.file
        );
    }
}

/// A held array (the duplicate check's submit) is released, and cancelled, through the
/// array's id: every element at once (`arrays-released-*`, `arrays-cancelled-*`).
#[test]
fn an_array_is_released_and_cancelled_through_its_id() {
    let states = |file: &str| -> Vec<String> {
        let mut v: Vec<String> = all_states(&recording(file))
            .elements
            .iter()
            .map(|e| format!("{}_{} {}", e.id, e.index, e.state))
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        states("24.11_v0.0.42_arrays-held-state"),
        [
            "2212_0 PENDING",
            "2212_1 PENDING",
            "2212_2 PENDING",
            "2212_3 PENDING"
        ]
    );
    assert_eq!(
        states("24.11_v0.0.42_arrays-released-state"),
        [
            "2212_2 PENDING",
            "2212_3 PENDING",
            "2213_0 RUNNING",
            "2214_1 RUNNING"
        ]
    );
    assert_eq!(
        states("24.11_v0.0.42_arrays-cancelled-state"),
        [
            "2212_2 CANCELLED",
            "2212_3 CANCELLED",
            "2213_0 CANCELLED",
            "2214_1 CANCELLED"
        ]
    );
    // Released with the comment update of the same request: every element's comment lost
    // the mark.
    for j in job_infos(&recording("24.11_v0.0.42_arrays-released-job-get")) {
        assert_eq!(j.comment.as_deref(), Some("flyte-key=0123456789abcdef"));
    }
}

/// A requeued element (`scontrol requeue 2260`, as Slurm does after a node failure) stays under
/// its own id, pending again, with its restart count and the requeue's BeginTime
/// (`arrays-requeue*`).
#[test]
fn a_requeued_array_element_keeps_its_own_id() {
    let states = |file: &str| -> Vec<String> {
        let mut v: Vec<String> = all_states(&recording(file))
            .elements
            .iter()
            .map(|e| format!("{}_{} {}", e.id, e.index, e.state))
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        states("24.11_v0.0.42_arrays-requeue-state-running"),
        ["2259_1 RUNNING", "2260_0 RUNNING"]
    );
    assert_eq!(
        states("24.11_v0.0.42_arrays-requeued-state"),
        ["2259_1 RUNNING", "2260_0 PENDING"]
    );
    let j = &job_infos(&recording("24.11_v0.0.42_arrays-requeued-job-get"))[0];
    assert_eq!(j.job_id, JobId(2260));
    assert_eq!(j.restart_count, Some(1));
    assert_eq!(j.reason.as_deref(), Some("BeginTime"));
    assert_eq!(
        j.array.map(|a| (a.array_job_id, a.task_id)),
        Some((JobId(2259), Some(0)))
    );
}
