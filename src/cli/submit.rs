//! `slurm-connector submit`: drive a running connector the way Flyte's backend does — CreateTask,
//! GetTask until a terminal phase, then the logs and the outputs — without a Flyte deployment.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tonic::transport::Channel;

use super::request::{self, ScriptTask};
use crate::proto::connector::async_connector_service_client::AsyncConnectorServiceClient;
use crate::proto::connector::{
    DeleteTaskRequest, GetTaskLogsRequest, GetTaskRequest, TaskCategory, get_task_logs_response,
};
use crate::proto::core::task_execution::Phase;
use crate::proto::flyte1::service::async_agent_service_client::AsyncAgentServiceClient;

#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    /// A batch script to run as a `slurm_script` task (its `#SBATCH` lines are honoured).
    #[arg(conflicts_with = "request", required_unless_present_any = ["request", "cancel"])]
    pub script: Option<PathBuf>,
    /// A CreateTaskRequest to send as is (binary `.pb` or protobuf `.json`).
    #[arg(long)]
    pub request: Option<PathBuf>,
    /// The connector's gRPC address.
    #[arg(
        long,
        default_value = "http://127.0.0.1:8000",
        env = "FLYTE_SLURM_CONNECTOR_URL"
    )]
    pub connector: String,
    /// An input, `NAME=VALUE` (integers, floats, true/false, URIs become File inputs, else strings).
    #[arg(long = "input", value_name = "NAME=VALUE")]
    pub inputs: Vec<String>,
    /// A declared output, `NAME=file` or `NAME=dir` (written by the script to $FLYTE_OUTPUT_<NAME>).
    #[arg(long = "output", value_name = "NAME=file|dir")]
    pub outputs: Vec<String>,
    #[arg(long)]
    pub partition: Option<String>,
    /// An extra sbatch option, `NAME=VALUE` (e.g. `--sbatch time=5`).
    #[arg(long = "sbatch", value_name = "NAME=VALUE")]
    pub sbatch: Vec<String>,
    /// Where outputs go (default: the embedded default's local object store, a `file://` folder
    /// under the data directory). With --request: replaces the request's output_prefix.
    #[arg(long)]
    pub output_prefix: Option<String>,
    /// Print the resource_meta after CreateTask and stop (the job keeps running).
    #[arg(long)]
    pub detach: bool,
    /// Cancel a task started with `--detach`: its resource_meta as printed (`{"v":1,...}`), or
    /// `@FILE` holding it. Sends DeleteTask and exits.
    #[arg(long, value_name = "RESOURCE_META", conflicts_with_all = ["script", "request"])]
    pub cancel: Option<String>,
    /// Cancel the task (DeleteTask) after this many seconds: exercises abort end to end.
    #[arg(long, value_name = "SECONDS")]
    pub cancel_after: Option<u64>,
    /// GetTask cadence, seconds (the backend uses ~30 s; shorter is friendlier here).
    #[arg(long, default_value_t = 2)]
    pub poll: u64,
    /// Log lines to fetch at the end.
    #[arg(long, default_value_t = 50)]
    pub log_lines: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error(transparent)]
    Request(#[from] request::RequestError),
    #[error("cannot read the script {path}: {source}")]
    Script {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot reach the connector at {url}: {detail} (is `slurm-connector serve` running?)")]
    Connect { url: String, detail: String },
    #[error("{rpc} failed: {status}")]
    Rpc {
        rpc: &'static str,
        status: tonic::Status,
    },
    #[error("--sbatch {0}: expected NAME=VALUE")]
    SbatchSyntax(String),
    #[error(transparent)]
    NativeInputs(#[from] super::native_inputs::NativeInputsError),
}

fn rpc(name: &'static str) -> impl Fn(tonic::Status) -> SubmitError {
    move |status| SubmitError::Rpc { rpc: name, status }
}

fn build_request(args: &SubmitArgs) -> Result<request::Loaded, SubmitError> {
    if let Some(path) = &args.request {
        let mut loaded = request::load_any(path)?;
        if let Some(p) = &args.output_prefix {
            match &mut loaded {
                request::Loaded::Flyte2(r) => r.output_prefix = p.clone(),
                request::Loaded::Flyte1(r) => r.output_prefix = p.clone(),
            }
        }
        return Ok(loaded);
    }
    let path = args.script.as_ref().expect("clap: script or --request");
    let script = std::fs::read_to_string(path).map_err(|source| SubmitError::Script {
        path: path.display().to_string(),
        source,
    })?;
    let run_name = format!("r{:08x}", rand::random::<u32>());
    // By default into the embedded default's local object store (where `serve` put it).
    let output_prefix = args.output_prefix.clone().unwrap_or_else(|| {
        super::embedded::EmbeddedLayout::new(&super::embedded::default_data_dir())
            .output_prefix(&run_name)
    });
    let sbatch_options = args
        .sbatch
        .iter()
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| SubmitError::SbatchSyntax(kv.clone()))
        })
        .collect::<Result<_, _>>()?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "script".into());
    Ok(request::Loaded::Flyte2(request::script_request(
        &ScriptTask {
            script,
            name,
            inputs: args.inputs.clone(),
            outputs: args.outputs.clone(),
            partition: args.partition.clone(),
            sbatch_options,
            output_prefix,
            project: "cli".into(),
            domain: "development".into(),
            run_name,
        },
    )?))
}

fn phase_name(p: i32) -> &'static str {
    Phase::try_from(p)
        .map(|p| p.as_str_name())
        .unwrap_or("UNKNOWN")
}

/// Run the command; the exit code is 0 only when the task SUCCEEDED (or was detached).
async fn connect(url: &str) -> Result<AsyncConnectorServiceClient<Channel>, SubmitError> {
    Ok(AsyncConnectorServiceClient::new(client_channel(url).await?))
}

async fn client_channel(url: &str) -> Result<Channel, SubmitError> {
    let connect_err = |e: &dyn std::fmt::Display| SubmitError::Connect {
        url: url.to_string(),
        detail: e.to_string(),
    };
    Channel::from_shared(url.to_string())
        .map_err(|e| connect_err(&e))?
        .connect()
        .await
        .map_err(|e| connect_err(&e))
}

/// `--cancel META`: DeleteTask for a detached task. The task type is not in our resource_meta,
/// and the connector does not need it to cancel.
async fn cancel(args: &SubmitArgs, meta: &str) -> Result<u8, SubmitError> {
    let meta = match meta.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|source| SubmitError::Script {
                path: path.to_string(),
                source,
            })?
            .trim()
            .to_string(),
        None => meta.to_string(),
    };
    let mut client = connect(&args.connector).await?;
    client
        .delete_task(DeleteTaskRequest {
            resource_meta: meta.into_bytes(),
            ..Default::default()
        })
        .await
        .map_err(rpc("DeleteTask"))?;
    println!("cancelled");
    Ok(0)
}

pub async fn run(args: SubmitArgs) -> Result<u8, SubmitError> {
    if let Some(meta) = &args.cancel {
        return cancel(&args, meta).await;
    }
    let loaded = build_request(&args)?;
    let (task_type, output_prefix) = match &loaded {
        request::Loaded::Flyte2(r) => (r.template.as_ref().map(|t| &t.r#type), &r.output_prefix),
        request::Loaded::Flyte1(r) => (r.template.as_ref().map(|t| &t.r#type), &r.output_prefix),
    };
    let (task_type, output_prefix) = (
        task_type.cloned().unwrap_or_default(),
        output_prefix.clone(),
    );
    let mut client = connect(&args.connector).await?;
    let started = Instant::now();
    let meta = match loaded {
        request::Loaded::Flyte2(mut req) => {
            // A native task: what the backend does before CreateTask (templates, inputs.pb).
            let mounts = match std::env::var(crate::staging::confine::SHARED_MOUNTS_VAR) {
                Ok(spec) if !spec.trim().is_empty() => {
                    Some(crate::staging::Roots::parse(&spec).map_err(|e| {
                        super::native_inputs::NativeInputsError::Mounts(e.to_string())
                    })?)
                }
                _ => None,
            };
            if let Some(at) = super::native_inputs::prepare(&mut req, mounts.as_ref()).await? {
                println!("inputs.pb written to {at}");
            }
            client
                .create_task(req)
                .await
                .map_err(rpc("CreateTask"))?
                .into_inner()
                .resource_meta
        }
        // Flyte 1's CreateTask goes to its own service (the request as propeller renders it);
        // the task it answers with is the same service's, so GetTask, the logs and DeleteTask
        // below go through the Flyte 2 one.
        request::Loaded::Flyte1(req) => {
            AsyncAgentServiceClient::new(client_channel(&args.connector).await?)
                .create_task(req)
                .await
                .map_err(rpc("CreateTask"))?
                .into_inner()
                .resource_meta
        }
    };
    let shown = String::from_utf8_lossy(&meta).into_owned();
    println!("created: {shown}");
    if args.detach {
        return Ok(0);
    }
    let category = Some(TaskCategory {
        name: task_type,
        version: 0,
    });
    let mut last = String::new();
    let mut cancelled = false;
    let resource = loop {
        if let Some(after) = args.cancel_after
            && !cancelled
            && started.elapsed() >= Duration::from_secs(after)
        {
            client
                .delete_task(DeleteTaskRequest {
                    resource_meta: meta.clone(),
                    task_category: category.clone(),
                    ..Default::default()
                })
                .await
                .map_err(rpc("DeleteTask"))?;
            println!(
                "[{:>5.1}s] cancel requested",
                started.elapsed().as_secs_f64()
            );
            cancelled = true;
        }
        let resp = client
            .get_task(GetTaskRequest {
                resource_meta: meta.clone(),
                task_category: category.clone(),
                output_prefix: output_prefix.clone(),
                ..Default::default()
            })
            .await;
        let resource = match resp {
            Ok(r) => r.into_inner().resource.unwrap_or_default(),
            Err(status) => {
                // The backend tolerates a few failed polls; so do we, loudly.
                eprintln!(
                    "[{:>5.1}s] GetTask failed: {status}",
                    started.elapsed().as_secs_f64()
                );
                tokio::time::sleep(Duration::from_secs(args.poll)).await;
                continue;
            }
        };
        let line = format!(
            "{} — {}",
            phase_name(resource.phase),
            resource.message.lines().next().unwrap_or("")
        );
        if line != last {
            println!("[{:>5.1}s] {line}", started.elapsed().as_secs_f64());
            std::io::stdout().flush().ok();
            last = line;
        }
        if Phase::of(resource.phase).is_terminal() {
            break resource;
        }
        tokio::time::sleep(Duration::from_secs(args.poll)).await;
    };
    if resource.message.lines().count() > 1 {
        println!("\n{}", resource.message);
    }
    print_logs(&mut client, &meta, category, args.log_lines).await;
    if let Some(outputs) = &resource.outputs {
        for lit in &outputs.literals {
            println!(
                "output {} = {}",
                lit.name,
                describe_literal(lit.value.as_ref())
            );
        }
    }
    for link in &resource.log_links {
        println!("log link {}: {}", link.name, link.uri);
    }
    Ok(if resource.phase == Phase::Succeeded as i32 {
        0
    } else {
        1
    })
}

async fn print_logs(
    client: &mut AsyncConnectorServiceClient<Channel>,
    meta: &[u8],
    category: Option<TaskCategory>,
    lines: u64,
) {
    let req = GetTaskLogsRequest {
        resource_meta: meta.to_vec(),
        lines,
        task_category: category,
        ..Default::default()
    };
    let mut stream = match client.get_task_logs(req).await {
        Ok(s) => s.into_inner(),
        Err(status) => {
            eprintln!("logs: {}", status.message());
            return;
        }
    };
    println!("\n--- logs (last {lines} lines) ---");
    while let Ok(Some(msg)) = stream.message().await {
        if let Some(get_task_logs_response::Part::Body(body)) = msg.part {
            for line in body.lines {
                println!("[{}] {}", line.short_pod_name, line.message);
            }
        }
    }
}

fn describe_literal(lit: Option<&crate::proto::core::Literal>) -> String {
    use crate::proto::core::{literal, scalar};
    match lit.and_then(|l| l.value.as_ref()) {
        Some(literal::Value::Scalar(s)) => match &s.value {
            Some(scalar::Value::Blob(b)) => b.uri.clone(),
            Some(scalar::Value::Primitive(p)) => format!("{:?}", p.value),
            other => format!("{other:?}"),
        },
        other => format!("{other:?}"),
    }
}
