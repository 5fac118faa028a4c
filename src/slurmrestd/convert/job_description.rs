//! JobDescription → the v0.0.42 submit body. (Extended field by field by the rendering work.)

use crate::slurmrestd::JobDescription;
use crate::slurmrestd::generated::v0042::types as g;
use crate::slurmrestd::job_description::Limit;

fn u32_no_val(n: Limit) -> g::V0042Uint32NoValStruct {
    match n {
        Limit::Finite(n) => g::V0042Uint32NoValStruct {
            set: Some(true),
            infinite: Some(false),
            number: i32::try_from(n).ok(),
        },
        Limit::Infinite => g::V0042Uint32NoValStruct { set: Some(false), infinite: Some(true), number: None },
    }
}

/// The body of `POST job/submit` for one job.
pub fn submit_request(job: &JobDescription) -> g::V0042JobSubmitReq {
    let desc = g::V0042JobDescMsg {
        name: Some(job.name.clone()),
        script: Some(job.script.clone()),
        current_working_directory: Some(job.current_working_directory.clone()),
        environment: Some(g::V0042StringArray(
            job.environment.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        )),
        standard_output: job.standard_output.clone(),
        standard_error: job.standard_error.clone(),
        partition: job.partition.clone(),
        comment: job.comment.clone(),
        time_limit: job.time_limit.map(u32_no_val),
        cpus_per_task: job.cpus_per_task.and_then(|c| i32::try_from(c).ok()),
        ..Default::default()
    };
    g::V0042JobSubmitReq { job: Some(desc), jobs: None, script: None }
}
