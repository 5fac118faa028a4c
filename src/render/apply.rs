//! Effective sbatch options → job-description fields, with sbatch's semantics (Slurm 24.11
//! `slurm_opt.c` / `sbatch/opt.c` and `slurm_opt_create_job_desc`): a loop over the option
//! items (`options::defs`), each writing its own fields, then what sbatch derives from several.

use crate::slurmrestd::ApiVersion;
use crate::slurmrestd::job_description::{JobDescription, JobFlag};

use super::error::RenderError;
pub use super::options::{Applied, Clock};
use super::options::{RawOption, Support, Target, require};

/// Applies the effective options (one per slot, see `merge`) to `job`, for the job description
/// of `version`: an option, or a value of one, that `version` cannot express is refused with the
/// versions that can.
pub fn apply(
    options: &[RawOption],
    job: &mut JobDescription,
    clock: Clock,
    version: ApiVersion,
) -> Result<Applied, RenderError> {
    let mut t = Target {
        job,
        applied: Applied::default(),
        clock,
        version,
        given: options,
        gres_per_node: Vec::new(),
        gpus_per_node: Vec::new(),
        per_task: Vec::new(),
    };
    for o in options {
        match &o.spec.support {
            Support::Mapped(m) => {
                for feature in m.needs {
                    require(version, o, None, *feature)?;
                }
                (m.set)(o, &mut t)?;
            }
            // `merge` keeps only mapped options; anything else reaching here is a bug there,
            // refused rather than dropped.
            _ => {
                return Err(RenderError::UnsupportedOption {
                    origin: o.origin.clone(),
                    option: o.spec.long.to_string(),
                    reason: "not mapped to a job-description field".into(),
                    supported: super::options::supported_list(version),
                });
            }
        }
    }
    let Target {
        job,
        applied,
        mut gres_per_node,
        mut gpus_per_node,
        mut per_task,
        ..
    } = t;
    // sbatch (24.11) also records --cpus-per-task as a per-task TRES and flags the CPU count as
    // explicit (JOB_CPUS_SET); without both the job record differs (differential test).
    if let Some(cpt) = job.cpus_per_task {
        per_task.insert(0, format!("cpu={cpt}"));
        job.flags.push(JobFlag::ExactCpuCountRequested);
    }
    // sbatch: the --gres entries first, then --gpus-per-node appended.
    gres_per_node.append(&mut gpus_per_node);
    if !gres_per_node.is_empty() {
        job.tres_per_node = Some(gres_per_node.join(","));
    }
    if !per_task.is_empty() {
        job.tres_per_task = Some(per_task.join(","));
    }
    job.flags.sort();
    job.flags.dedup();
    // sbatch: --hold submits with priority 0, whatever --priority says.
    if job.hold == Some(true) {
        job.priority = None;
    }
    if options.iter().any(|o| o.spec.long == "extra-node-info") {
        super::derive::tasks_from_extra_node_info(job);
    }
    super::derive::sbatch_derivations(job);
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::Origin;
    use crate::render::options::{OPTIONS, OptSpec};

    const CLOCK: Clock = Clock {
        now: crate::render::options::CASE_NOW,
        utc_offset: 0,
    };

    fn one(
        spec: &'static OptSpec,
        value: Option<&str>,
        v: ApiVersion,
    ) -> Result<(JobDescription, Applied), RenderError> {
        let raw = RawOption {
            spec,
            value: value.map(str::to_string),
            origin: Origin::SbatchOptions,
        };
        let mut job = JobDescription::default();
        let applied = apply(std::slice::from_ref(&raw), &mut job, CLOCK, v)?;
        Ok((job, applied))
    }

    /// Every mapped item's own case, on every version: accepted and right where the item says
    /// the version can express it, refused naming the version and the ones that can elsewhere.
    #[test]
    fn every_option_passes_its_case_on_every_version() {
        let mut checked = 0;
        for spec in OPTIONS {
            let Support::Mapped(m) = &spec.support else {
                continue;
            };
            for v in ApiVersion::ALL {
                let got = one(spec, m.case.given, v);
                if spec.versions().contains(v) {
                    let (job, applied) =
                        got.unwrap_or_else(|e| panic!("--{} on {v}: {e}", spec.long));
                    assert!(
                        (m.case.check)(&job, &applied),
                        "--{} {:?} on {v}: {job:#?} {applied:?}",
                        spec.long,
                        m.case.given
                    );
                    checked += 1;
                } else {
                    let e = got
                        .expect_err(&format!("--{} must be refused on {v}", spec.long))
                        .to_string();
                    let have = m
                        .needs
                        .iter()
                        .map(|f| f.versions.to_string())
                        .collect::<Vec<_>>();
                    assert!(
                        e.contains(&format!("`--{}`", spec.long))
                            && e.contains(&format!("that {v} lacks"))
                            && have.iter().all(|h| e.contains(h.as_str())),
                        "--{} on {v}: {e}",
                        spec.long
                    );
                }
            }
            // Values that need more: refused where the version lacks it, accepted where it has it.
            for vn in m.values_need {
                for v in ApiVersion::ALL
                    .into_iter()
                    .filter(|v| spec.versions().contains(*v))
                {
                    let got = one(spec, Some(vn.example), v);
                    if vn.needs.versions.contains(v) {
                        got.unwrap_or_else(|e| {
                            panic!("--{}={} on {v}: {e}", spec.long, vn.example)
                        });
                    } else {
                        let e = got
                            .expect_err(&format!(
                                "--{}={} must be refused on {v}",
                                spec.long, vn.example
                            ))
                            .to_string();
                        assert!(
                            e.contains(&format!("that {v} lacks"))
                                && e.contains(&vn.needs.versions.to_string())
                                && e.contains(vn.example),
                            "--{}={} on {v}: {e}",
                            spec.long,
                            vn.example
                        );
                    }
                }
            }
        }
        // Most options work on every version; the table has ~87 mapped ones.
        let mapped = OPTIONS.iter().filter(|s| s.mapped().is_some()).count();
        assert!(
            mapped > 80 && checked > mapped * (ApiVersion::ALL.len() - 1),
            "{mapped} {checked}"
        );
    }

    #[test]
    fn cores_per_socket_where_the_version_has_it() {
        let spec = crate::render::options::lookup_long("cores-per-socket").unwrap();
        for v in [ApiVersion::V0040, ApiVersion::V0045, ApiVersion::V0046] {
            assert_eq!(
                one(spec, Some("4"), v).unwrap().0.cores_per_socket,
                Some(4),
                "{v}"
            );
        }
        let e = one(spec, Some("4"), ApiVersion::V0042)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "`sbatch_options`: `--cores-per-socket` needs a job description field that v0.0.42 lacks \
             (`cores_per_socket`); v0.0.40 and v0.0.45+ have it. Remove it, or pin api_version to one \
             of those if the cluster serves it"
        );
    }
}
