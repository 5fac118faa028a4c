//! Interruptible tasks: the site's preemptible partition and QOS, requeueable, a warning signal
//! scoped to where the task's processes run, and the task's own choices winning; in the submit
//! body of every API version.

use crate::render_support;

use render_support::*;
use serde_json::{Value, json};
use slurm_connector::domain::site::InterruptibleSite;
use slurm_connector::render::{RenderConfig, Rendered, TaskSpec, render_at};
use slurm_connector::slurmrestd::ApiVersion;
use slurm_connector::slurmrestd::convert::submit_body_json;
use slurm_connector::slurmrestd::job_description::{KillWarning, WarnFlag};

fn site() -> InterruptibleSite {
    InterruptibleSite {
        partition: Some("preemptible".into()),
        qos: Some("scavenger".into()),
        warning: Some(("USR1".into(), 90)),
    }
}

fn render(spec: &TaskSpec, v: ApiVersion) -> Rendered {
    let cfg = RenderConfig {
        api_version: v,
        default_partition: Some("batch".into()),
        interruptible: site(),
        ..config()
    };
    render_at(spec, &cfg, NOW).unwrap()
}

fn script(body: &str, interruptible: bool) -> TaskSpec {
    let mut spec = task_spec(&load_request("script_no_io.json"));
    spec.custom =
        render_support::slurm_config(json!({ "script": format!("#!/bin/bash\n{body}echo hi\n") }))
            .unwrap();
    spec.interruptible = interruptible;
    spec
}

fn env<'a>(r: &'a Rendered, name: &str) -> Option<&'a str> {
    r.job
        .environment
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn an_interruptible_script_task_goes_where_the_site_says_and_is_warned() {
    let r = render(&script("", true), ApiVersion::V0042);
    assert_eq!(r.job.partition.as_deref(), Some("preemptible"));
    assert_eq!(r.job.qos.as_deref(), Some("scavenger"));
    assert_eq!(r.job.requeue, Some(true));
    // The batch shell: the marker wrapper passes USR1 on to the task's script.
    assert_eq!(
        r.job.kill_warning,
        Some(KillWarning {
            signal: "USR1".into(),
            delay_seconds: 90,
            flags: vec![WarnFlag::BatchJob],
        })
    );
    assert_eq!(env(&r, "FLYTE_SLURM_INTERRUPTIBLE"), Some("1"));
    assert_eq!(env(&r, "FLYTE_SLURM_WARNING_SIGNAL"), Some("USR1"));
    assert_eq!(env(&r, "FLYTE_SLURM_WARNING_SECONDS"), Some("90"));
}

#[test]
fn a_task_that_is_not_interruptible_is_untouched() {
    let r = render(&script("", false), ApiVersion::V0042);
    assert_eq!(r.job.partition.as_deref(), Some("batch"));
    assert_eq!((r.job.qos.as_deref(), r.job.requeue), (None, None));
    assert_eq!(r.job.kill_warning, None);
    assert_eq!(env(&r, "FLYTE_SLURM_INTERRUPTIBLE"), None);
}

#[test]
fn the_tasks_own_choices_win() {
    let r = render(
        &script(
            "#SBATCH --partition=gpu\n#SBATCH --qos=high\n#SBATCH --no-requeue\n#SBATCH --signal=B:TERM@30\n",
            true,
        ),
        ApiVersion::V0042,
    );
    assert_eq!(r.job.partition.as_deref(), Some("gpu"));
    assert_eq!(r.job.qos.as_deref(), Some("high"));
    assert_eq!(r.job.requeue, Some(false));
    assert_eq!(r.job.kill_warning.as_ref().unwrap().signal, "TERM");
    assert_eq!(env(&r, "FLYTE_SLURM_WARNING_SIGNAL"), Some("TERM"));
    assert_eq!(env(&r, "FLYTE_SLURM_WARNING_SECONDS"), Some("30"));
}

#[test]
fn a_native_tasks_steps_are_warned_and_no_warning_is_a_choice() {
    let mut spec = task_spec(&load_request("native_pyxis_gpu.json"));
    spec.interruptible = true;
    let r = render(&spec, ApiVersion::V0042);
    // The entrypoint runs in an srun step: the steps get the signal, not the batch shell.
    assert_eq!(r.job.kill_warning.as_ref().unwrap().flags, []);
    let cfg = RenderConfig {
        interruptible: InterruptibleSite {
            warning: None,
            ..site()
        },
        ..config()
    };
    let r = render_at(&script("", true), &cfg, NOW).unwrap();
    assert_eq!(r.job.kill_warning, None);
    assert_eq!(r.job.requeue, Some(true));
    assert_eq!(env(&r, "FLYTE_SLURM_WARNING_SIGNAL"), None);
}

#[test]
fn every_api_version_carries_the_warning_and_the_requeue() {
    for v in ApiVersion::ALL {
        let r = render(&script("", true), v);
        let body: Value = submit_body_json(v, &r.job).unwrap();
        let job = body.get("job").unwrap_or(&body);
        assert_eq!(job["kill_warning_signal"], "USR1", "{v:?}: {job}");
        assert_eq!(
            job["kill_warning_delay"]["number"]
                .as_u64()
                .or(job["kill_warning_delay"].as_u64()),
            Some(90),
            "{v:?}: {job}"
        );
        assert_eq!(job["requeue"], true, "{v:?}");
        assert_eq!(job["qos"], "scavenger", "{v:?}");
        assert_eq!(job["partition"], "preemptible", "{v:?}");
    }
}
