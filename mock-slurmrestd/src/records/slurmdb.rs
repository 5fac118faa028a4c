//! slurmdbd's job records (`GET /slurmdb/<version>/job/{id}`, `jobs/`), built like slurmctld's
//! (`mod.rs`) from each version's real record.

use super::*;

/// The slurmdbd record (`GET /slurmdb/<version>/job/{id}`), from that version's real record.
pub fn slurmdb_job(job: &Job, cfg: &MockConfig, sv: Served) -> Value {
    let mut v = template(sv.api, Template::SlurmdbJob);
    let spec = &job.spec;
    let started = !job.node_names.is_empty();
    let cpus = job.cpus() as i64;
    let nnodes = job.node_names.len() as i64;
    let elapsed = if started {
        let end = if job.end_time > 0 {
            job.end_time
        } else {
            chrono::Utc::now().timestamp()
        };
        (end - job.start_time).max(0)
    } else {
        0
    };
    let user = job.user.as_str();
    let account = spec.account.clone().unwrap_or_else(|| "default".into());
    v["account"] = json!(account);
    // Without `AccountingStoreFlags=job_comment` (Slurm's default) slurmdbd stores no comment.
    v["comment"]["job"] = json!(if cfg.job_comment {
        spec.comment.as_str()
    } else {
        ""
    });
    v["allocation_nodes"] = json!(nnodes.max(if started { 1 } else { 0 }));
    v["array"]["job_id"] = json!(job.array.as_ref().map(|a| a.array_job_id).unwrap_or(0));
    v["array"]["limits"]["max"]["running"]["tasks"] =
        json!(job.array.as_ref().and_then(|a| a.max_running).unwrap_or(0));
    v["array"]["task_id"] = job
        .array
        .as_ref()
        .map(|a| nv(a.task_id as i64))
        .unwrap_or_else(nv_unset);
    v["association"]["account"] = json!(account);
    v["association"]["cluster"] = json!(cfg.cluster_name);
    v["association"]["user"] = json!(user);
    v["cluster"] = json!(cfg.cluster_name);
    v["derived_exit_code"] = exit_json(Exit::Code(0));
    // Recorded: a cancelled job's job-level exit code stays SUCCESS; its batch step has the signal.
    let job_exit = if job.state == Base::Cancelled {
        Exit::Code(0)
    } else {
        job.exit
    };
    v["exit_code"] = exit_json(job_exit);
    let t = &mut v["time"];
    t["elapsed"] = json!(elapsed);
    t["eligible"] = json!(job.eligible_time);
    t["end"] = json!(job.end_time);
    put(
        t,
        "planned",
        nv(if started {
            (job.start_time - job.eligible_time).max(0)
        } else {
            0
        }),
    );
    t["start"] = json!(job.start_time);
    t["submission"] = json!(job.submit_time);
    t["limit"] = time_limit_json(job);
    v["flags"] = if started {
        json!(["STARTED_ON_SCHEDULE", "START_RECEIVED"])
    } else {
        json!([])
    };
    v["group"] = json!(user);
    v["job_id"] = json!(job.id);
    put(&mut v, "restart_cnt", json!(job.restart_cnt));
    v["name"] = json!(if spec.name.is_empty() {
        "allocation"
    } else {
        spec.name.as_str()
    });
    v["nodes"] = json!(if nnodes > 0 {
        job.node_list()
    } else {
        "None assigned".to_string()
    });
    v["partition"] = json!(
        spec.partition
            .clone()
            .unwrap_or_else(|| cfg.partition.clone())
    );
    v["hold"] = json!(spec.hold && job.state == Base::Pending);
    v["priority"] = nv(spec.priority.unwrap_or(1) as i64);
    v["qos"] = json!(spec.qos.clone().unwrap_or_else(|| "normal".into()));
    v["required"]["CPUs"] = json!(cpus);
    v["required"]["memory_per_cpu"] = spec
        .memory_per_cpu
        .map(|m| nv(m as i64))
        .unwrap_or_else(nv_unset);
    v["required"]["memory_per_node"] = match spec.memory_per_cpu {
        Some(_) => nv_unset(),
        None => nv(spec.memory_per_node.unwrap_or(0) as i64),
    };
    v["kill_request_user"] = json!(job.kill_request_user);
    let default_out = "slurm-%j.out";
    let out_pattern = spec
        .standard_output
        .clone()
        .unwrap_or_else(|| default_out.to_string());
    // 24.11 stores the pattern made absolute against the cwd; 26.05 stores it as given.
    let stored = |p: &str| -> String {
        if sv.release.is_24_11() && !p.starts_with('/') && !spec.cwd.is_empty() {
            format!("{}/{}", spec.cwd.trim_end_matches('/'), p)
        } else {
            p.to_string()
        }
    };
    put(&mut v, "stdout", json!(stored(&out_pattern)));
    put(&mut v, "stdout_expanded", json!(job.stdout));
    put(
        &mut v,
        "stderr",
        json!(
            spec.standard_error
                .as_deref()
                .map(stored)
                .unwrap_or_default()
        ),
    );
    put(
        &mut v,
        "stderr_expanded",
        json!(if spec.standard_error.is_some() {
            job.stderr.as_str()
        } else {
            ""
        }),
    );
    put(
        &mut v,
        "stdin",
        json!(
            spec.standard_input
                .as_deref()
                .map(stored)
                .unwrap_or_default()
        ),
    );
    put(
        &mut v,
        "stdin_expanded",
        json!(if spec.standard_input.is_some() {
            job.stdin.as_str()
        } else {
            ""
        }),
    );
    // v0.0.45+: the Slurm-unique id, the same as the job record's step_id.sluid.
    put(&mut v, "sluid", json!(sluid(job.id)));
    put(&mut v, "original_sluid", json!(sluid(job.id)));
    v["state"] = json!({"current": [job.state.as_str()], "reason": job.reason});
    let mem = mem_mb(job) as i64;
    set_tres_counts(&mut v["tres"]["allocated"], cpus, mem, nnodes);
    set_tres_counts(
        &mut v["tres"]["requested"],
        cpus,
        mem,
        spec.min_nodes as i64,
    );
    if !started {
        v["tres"]["allocated"] = json!([]);
    }
    let step_template = v["steps"][0].clone();
    v["steps"] = if started {
        json!([batch_step(step_template, job, elapsed)])
    } else {
        json!([])
    };
    v["user"] = json!(user);
    v["working_directory"] = json!(spec.cwd);
    v
}

fn batch_step(mut s: Value, job: &Job, elapsed: i64) -> Value {
    s["time"]["elapsed"] = json!(elapsed);
    s["time"]["start"] = nv(job.start_time);
    s["time"]["end"] = if job.end_time > 0 {
        nv(job.end_time)
    } else {
        nv_unset()
    };
    s["exit_code"] = exit_json(job.exit);
    s["nodes"] =
        json!({"count": job.node_names.len(), "range": job.node_list(), "list": job.node_names});
    s["kill_request_user"] = json!(job.kill_request_user);
    s["state"] = json!([job.state.as_str()]);
    s["step"]["id"] = json!(format!("{}.batch", job.id));
    // v0.0.43+ `time.limit` of the batch step stays as recorded (UNLIMITED even when the job
    // has a limit: slurmdbd records no step limit for batch steps).
    let first_node_cpus = job.alloc.first().map(|a| a.1).unwrap_or_else(|| job.cpus()) as i64;
    set_tres_counts(&mut s["tres"]["allocated"], first_node_cpus, 0, 1);
    s
}
