//! Flyte's clustered tasks (`flyte.clustered.ClusteredTaskEnvironment`, task type
//! `clustered-task`): `TaskTemplate.custom` is a `flyteidl2.plugins.ClusteredTaskSpec` as JSON
//! (the SDK writes it with protobuf's `MessageToDict`: camelCase names, enums as names, zero
//! values left out), which this module turns into the Slurm config of a native task spanning
//! `replicas` nodes with `nproc_per_node` tasks each, plus the site's defaults for clustered work.
//!
//! Nothing Kubernetes-specific is kept: the SDK's `clustered` launcher (which derives the
//! rendezvous from JobSet variables and execs torchrun) is replaced by `a0`, Flyte's plain
//! entrypoint, started once per rank by `srun` with the rendezvous environment derived from Slurm
//! (see ranks.rs for why srun rather than torchrun).

use serde_json::{Map, Value, json};

use super::error::RenderError;

/// `flyteidl2.plugins.ClusteredTaskSpec`, the fields this connector acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusteredSpec {
    /// Nodes (JobSet pods).
    pub replicas: u32,
    /// Ranks per node.
    pub nproc_per_node: u32,
    /// `failure_policy.max_restarts`: how often the whole gang may start over.
    pub max_restarts: u32,
}

pub use crate::domain::site::ClusteredSite;

fn get<'a>(m: &'a Map<String, Value>, camel: &str, snake: &str) -> Option<&'a Value> {
    m.get(camel)
        .or_else(|| m.get(snake))
        .filter(|v| !v.is_null())
}

fn whole(v: Option<&Value>, field: &str) -> Result<u32, RenderError> {
    match v {
        None => Ok(0),
        // A proto3 JSON integer may come as a number or (64-bit types) a string.
        Some(Value::Number(n)) => n
            .as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= u32::MAX as f64)
            .map(|f| f as u32)
            .ok_or_else(|| RenderError::config(field, format!("`{n}` is not a whole number"))),
        Some(Value::String(s)) => s
            .parse()
            .map_err(|_| RenderError::config(field, format!("`{s}` is not a whole number"))),
        Some(_) => Err(RenderError::config(field, "must be a whole number")),
    }
}

/// Parses `custom` of a `clustered-task`.
pub fn parse(custom: &Value) -> Result<ClusteredSpec, RenderError> {
    let m = match custom {
        Value::Object(m) => m,
        _ => {
            return Err(RenderError::config(
                "custom",
                "a clustered-task carries a ClusteredTaskSpec (replicas, nprocPerNode, ...); this one has none",
            ));
        }
    };
    const KNOWN: &[&str] = &[
        "replicas",
        "nprocPerNode",
        "nproc_per_node",
        "runtime",
        "interconnect",
        "failurePolicy",
        "failure_policy",
        "ttlSecondsAfterFinished",
        "ttl_seconds_after_finished",
    ];
    if let Some(k) = m.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(RenderError::UnknownKey {
            key: k.clone(),
            known: "replicas, nprocPerNode, runtime, interconnect, failurePolicy, ttlSecondsAfterFinished"
                .into(),
        });
    }
    let replicas = whole(get(m, "replicas", "replicas"), "replicas")?;
    let nproc_per_node = whole(get(m, "nprocPerNode", "nproc_per_node"), "nprocPerNode")?;
    if replicas == 0 {
        return Err(RenderError::config(
            "replicas",
            "must be at least 1 (the number of nodes)",
        ));
    }
    if nproc_per_node == 0 {
        return Err(RenderError::config(
            "nprocPerNode",
            "must be at least 1 (ranks per node)",
        ));
    }
    if let Some(rt) = get(m, "runtime", "runtime") {
        let torch = rt.get("torchrun").filter(|v| !v.is_null());
        if let Some(t) = torch {
            let restarts = whole(
                t.get("maxRestarts")
                    .or_else(|| t.get("max_restarts"))
                    .filter(|v| !v.is_null()),
                "runtime.torchrun.maxRestarts",
            )?;
            if restarts > 0 {
                return Err(RenderError::config(
                    "runtime.torchrun.maxRestarts",
                    format!(
                        "{restarts}: in-job torchrun restarts are not available on Slurm (srun starts \
                         every rank itself, no torchrun agent runs); set TorchRun(max_restarts=0) and \
                         use the task's retries"
                    ),
                ));
            }
        }
    }
    match get(m, "interconnect", "interconnect").and_then(|v| v.as_str()) {
        None | Some("TCP") | Some("INFINIBAND") | Some("ROCE") => {}
        Some(other) => {
            return Err(RenderError::config(
                "interconnect",
                format!(
                    "`{other}` is not a fabric a Slurm cluster offers to a job by name; use \"tcp\" (the \
                     site's MPI/NCCL settings pick the fabric)"
                ),
            ));
        }
    }
    let max_restarts = match get(m, "failurePolicy", "failure_policy") {
        Some(fp) => whole(
            fp.get("maxRestarts")
                .or_else(|| fp.get("max_restarts"))
                .filter(|v| !v.is_null()),
            "failurePolicy.maxRestarts",
        )?,
        None => 0,
    };
    Ok(ClusteredSpec {
        replicas,
        nproc_per_node,
        max_restarts,
    })
}

/// The Slurm config (as a `slurm` task's `custom`) of a clustered task on this site.
pub fn slurm_custom(
    spec: &ClusteredSpec,
    site: &ClusteredSite,
    gpus_per_node: Option<u32>,
) -> Result<Value, RenderError> {
    if !site.enabled {
        return Err(RenderError::config(
            "task type",
            "this connector does not serve clustered-task: set FLYTE_SLURM_CLUSTERED_TASKS=true on it \
             (docs/native-tasks.md, \"Multi-node work\")",
        ));
    }
    if let Some(g) = gpus_per_node
        && g < spec.nproc_per_node
    {
        return Err(RenderError::config(
            "resources.gpu",
            format!(
                "{g} GPUs per node for {} ranks per node: give each rank a GPU (gpu >= nproc_per_node)",
                spec.nproc_per_node
            ),
        ));
    }
    // ntasks too: sbatch derives it from nodes × ntasks-per-node on the client side, slurmrestd
    // does not (the job then gets one task per node).
    let mut sbatch = json!({
        "nodes": spec.replicas,
        "ntasks": spec.replicas.saturating_mul(spec.nproc_per_node),
    });
    if let Some(p) = &site.partition {
        sbatch["partition"] = json!(p);
    }
    if let Some(g) = gpus_per_node.filter(|g| *g > 0) {
        sbatch["gpus_per_node"] = json!(g);
    }
    if let Some(t) = &site.time_limit {
        sbatch["time_limit"] = json!(t);
    }
    let mut opts = json!({ "ntasks-per-node": spec.nproc_per_node });
    if site.exclusive {
        opts["exclusive"] = json!(true);
    }
    if let Some(s) = &site.switches {
        opts["switches"] = json!(s);
    }
    Ok(json!({
        "sbatch": sbatch,
        "sbatch_options": opts,
        "container": { "runtime": site.runtime, "mounts": site.mounts },
    }))
}

/// The SDK's container args start with its `clustered` launcher, which needs JobSet variables
/// and torchrun; every rank runs `a0` instead, with the same arguments.
pub fn worker_command(command: Vec<String>) -> Vec<String> {
    match command.split_first() {
        Some((first, rest)) if first == "clustered" => std::iter::once("a0".to_string())
            .chain(rest.iter().cloned())
            .collect(),
        _ => command,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sdk_shape_parses() {
        // What flyte 2.12.1's `to_custom_dict()` writes (MessageToDict: camelCase, enums by name).
        let s = parse(&json!({
            "replicas": 2, "nprocPerNode": 2,
            "runtime": {"torchrun": {}}, "failurePolicy": {"maxRestarts": 1},
        }))
        .unwrap();
        assert_eq!(
            s,
            ClusteredSpec {
                replicas: 2,
                nproc_per_node: 2,
                max_restarts: 1
            }
        );
    }

    #[test]
    fn refusals_name_the_field() {
        for (custom, field) in [
            (json!({"replicas": 0, "nprocPerNode": 1}), "replicas"),
            (json!({"replicas": 2}), "nprocPerNode"),
            (json!({"replicas": 2.5, "nprocPerNode": 1}), "replicas"),
            (
                json!({"replicas": 2, "nprocPerNode": 1, "runtime": {"torchrun": {"maxRestarts": 3}}}),
                "runtime.torchrun.maxRestarts",
            ),
            (
                json!({"replicas": 2, "nprocPerNode": 1, "interconnect": "EFA"}),
                "interconnect",
            ),
            (
                json!({"replicas": 2, "nprocPerNode": 1, "podTemplate": {}}),
                "podTemplate",
            ),
        ] {
            let e = parse(&custom).unwrap_err().to_string();
            assert!(e.contains(field), "{custom}: {e}");
        }
    }

    #[test]
    fn site_defaults_shape_the_job() {
        let spec = ClusteredSpec {
            replicas: 4,
            nproc_per_node: 8,
            max_restarts: 0,
        };
        let site = ClusteredSite {
            enabled: true,
            runtime: "apptainer".into(),
            partition: Some("gpu".into()),
            switches: Some("1@10:00".into()),
            ..Default::default()
        };
        let c = slurm_custom(&spec, &site, Some(8)).unwrap();
        assert_eq!(c["sbatch"]["nodes"], 4);
        assert_eq!(c["sbatch"]["ntasks"], 32);
        assert_eq!(c["sbatch"]["partition"], "gpu");
        assert_eq!(c["sbatch"]["gpus_per_node"], 8);
        assert_eq!(c["sbatch_options"]["ntasks-per-node"], 8);
        assert_eq!(c["sbatch_options"]["exclusive"], true);
        assert_eq!(c["sbatch_options"]["switches"], "1@10:00");
        let e = slurm_custom(&spec, &site, Some(4)).unwrap_err().to_string();
        assert!(e.contains("resources.gpu"), "{e}");
        let off = ClusteredSite::default();
        let e = slurm_custom(&spec, &off, None).unwrap_err().to_string();
        assert!(e.contains("FLYTE_SLURM_CLUSTERED_TASKS"), "{e}");
        let shared = ClusteredSite {
            exclusive: false,
            ..site
        };
        assert!(
            slurm_custom(&spec, &shared, None).unwrap()["sbatch_options"]
                .get("exclusive")
                .is_none()
        );
    }

    /// The whole job of the SDK's 2 × 2 task on a site with a GPU partition and one switch.
    #[test]
    fn a_clustered_task_renders_one_gang_job() {
        use crate::render::{ContainerSpec, ExecutionIdentity, RenderConfig, TaskSpec, TaskType};
        let args = [
            "clustered",
            "--inputs",
            "file:///w/in.pb",
            "--outputs-path",
            "file:///w/out",
        ];
        let spec = TaskSpec {
            task_type: TaskType::Clustered,
            task_name: "mn.rank_sum".into(),
            custom: crate::render::TaskConfig::parse(
                TaskType::Clustered,
                &json!({"replicas": 2.0, "nprocPerNode": 2.0, "runtime": {"torchrun": {}}, "failurePolicy": {"maxRestarts": 2.0}}),
            )
            .unwrap(),
            container: Some(ContainerSpec {
                image: "/images/t.sif".into(),
                args: args.iter().map(|a| a.to_string()).collect(),
                gpus: Some(2),
                ..Default::default()
            }),
            inputs: vec![],
            outputs: vec![],
            output_prefix: "file:///w/out".into(),
            exec: ExecutionIdentity {
                org: "o".into(),
                project: "p".into(),
                domain: "d".into(),
                run_name: "r".into(),
                action_name: "a0".into(),
                attempt: 0,
            },
            env_vars: Default::default(),
            script_args: Vec::new(),
            shell_template: None,
            interruptible: false,
        };
        let cfg = RenderConfig {
            working_dir: Some("/w".into()),
            clustered: ClusteredSite {
                enabled: true,
                runtime: "apptainer".into(),
                mounts: vec!["/w".into()],
                partition: Some("gpu".into()),
                switches: Some("1@10:00".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let r = crate::render::render_at(&spec, &cfg, 0).unwrap();
        let j = &r.job;
        assert_eq!(j.nodes.as_deref(), Some("2"));
        assert_eq!((j.tasks, j.tasks_per_node), (Some(4), Some(2)));
        assert_eq!(j.partition.as_deref(), Some("gpu"));
        assert_eq!(
            (j.required_switches, j.wait_for_switch),
            (Some(1), Some(600))
        );
        // --exclusive: the job shares its nodes with nobody.
        assert_eq!(
            j.shared,
            Some(crate::slurmrestd::job_description::Shared::None)
        );
        assert_eq!(j.tres_per_node.as_deref(), Some("gres/gpu:2"));
        assert!(r.ranks);
        assert_eq!(r.max_restarts, Some(2));
        let script = j.script.as_str();
        assert!(
            script.contains("export TORCHELASTIC_RUN_ID=\"slurm-$SLURM_JOB_ID\""),
            "{script}"
        );
        assert!(
            script.contains("srun '--kill-on-bad-exit=1' --label apptainer -q exec --nv --bind /w /images/t.sif bash -c"),
            "{script}"
        );
        assert!(
            script.contains(" -- a0 --inputs file:///w/in.pb"),
            "{script}"
        );
        assert!(!script.contains("clustered"), "{script}");
    }

    #[test]
    fn the_launcher_becomes_a0() {
        let c = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            worker_command(c(&["clustered", "--inputs", "x"])),
            c(&["a0", "--inputs", "x"])
        );
        assert_eq!(
            worker_command(c(&["a0", "--inputs"])),
            c(&["a0", "--inputs"])
        );
    }
}
