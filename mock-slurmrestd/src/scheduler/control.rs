//! What a user or admin does to a job once it exists: `scancel` (`DELETE job/{id}`), `scontrol
//! requeue` and `scontrol update` (`POST job/{id}`: hold, release, comment, ...).

use super::*;

impl Scheduler {
    /// `DELETE job/{id}[?signal=]`: SIGKILL/SIGTERM (default) cancel; other signals are only
    /// delivered. An array's id cancels all its tasks; `element` only that one of them.
    pub fn cancel(&self, id: u32, element: Option<u32>, signal: i32, user: &str) -> CancelResult {
        let mut c = self.lock();
        let t = now();
        let ids: Vec<u32> = c
            .jobs
            .values()
            .filter(|j| match (element, &j.array) {
                (Some(i), Some(a)) => a.array_job_id == id && a.task_id == i,
                (Some(_), None) => false,
                (None, a) => j.id == id || a.as_ref().is_some_and(|a| a.array_job_id == id),
            })
            .map(|j| j.id)
            .collect();
        if ids.is_empty() {
            return CancelResult::Unknown;
        }
        let cancel = signal == libc::SIGKILL || signal == libc::SIGTERM;
        let mut any = false;
        for jid in ids {
            let job = c.jobs.get_mut(&jid).expect("listed above");
            if element.is_some() && cancel && job.state == Base::Pending {
                // Like slurmctld: one pending element cancelled by `<id>_<index>` leaves no
                // trace, neither in slurmctld nor in slurmdbd (recorded on 24.11 and 26.05,
                // `*_coalesce-array-held-delete-element`).
                c.jobs.remove(&jid);
                c.counters.canceled += 1;
                any = true;
                continue;
            }
            match job.state {
                Base::Pending if cancel => {
                    // Like slurmctld: a job cancelled while pending "starts" and ends now.
                    job.state = Base::Cancelled;
                    job.start_time = t;
                    job.end_time = t;
                    job.ended_at = Some(Instant::now());
                    job.kill_request_user = user.to_string();
                    c.counters.canceled += 1;
                    any = true;
                }
                Base::Running => {
                    if cancel {
                        job.state = Base::Cancelled;
                        job.completing = true;
                        job.end_time = t;
                        job.kill_request_user = user.to_string();
                    }
                    if let Some(tx) = &job.control {
                        let _ = tx.send(Control::Signal { signal, cancel });
                    }
                    any = true;
                }
                // Pending + a non-terminating signal: nothing to deliver yet.
                Base::Pending => any = true,
                _ => {}
            }
        }
        if any {
            c.last_update = t;
            drop(c);
            self.wake();
            CancelResult::Signalled
        } else {
            CancelResult::AlreadyDone
        }
    }

    /// `GET job/{id}/requeue` (v0.0.45+): a running or finished job goes back to PENDING with
    /// `restart_cnt + 1`, not eligible for two `minute`s (the real one: BeginTime = now + 120 s,
    /// recorded on 26.05); a running one's processes are killed first. `hold` also holds it.
    /// Unknown -> 2017, pending -> 2024 (recorded). An array's id requeues all its tasks.
    pub fn requeue(&self, id: u32, hold: bool) -> Result<(), Rejection> {
        let mut c = self.lock();
        let t = now();
        let ids: Vec<u32> = c
            .jobs
            .values()
            .filter(|j| j.id == id || j.array.as_ref().is_some_and(|a| a.array_job_id == id))
            .map(|j| j.id)
            .collect();
        if ids.is_empty() {
            return Err(Rejection {
                number: 2017,
                message: "Invalid job id specified",
            });
        }
        if ids.iter().all(|j| c.jobs[j].state == Base::Pending) {
            return Err(Rejection {
                number: 2024,
                message: "Job is pending execution",
            });
        }
        let delay = 2 * self.cfg.minute;
        for jid in ids {
            let job = c.jobs.get_mut(&jid).expect("listed above");
            match job.state {
                Base::Pending => continue,
                Base::Running => {
                    job.requeued = true;
                    if let Some(tx) = &job.control {
                        let _ = tx.send(Control::Signal {
                            signal: libc::SIGKILL,
                            cancel: true,
                        });
                    }
                }
                _ => {}
            }
            let begin = t + delay.as_secs() as i64;
            job.state = Base::Pending;
            job.completing = false;
            job.reason = "BeginTime".into();
            job.restart_cnt += 1;
            job.begin_at = Some(Instant::now() + delay);
            job.eligible_time = begin;
            job.start_time = begin;
            job.end_time = 0;
            job.exit = Exit::Code(0);
            job.node_names.clear();
            job.kill_request_user.clear();
            job.ended_at = None;
            if hold {
                let mut spec = (*job.spec).clone();
                spec.hold = true;
                job.spec = Arc::new(spec);
            }
        }
        c.last_update = t;
        drop(c);
        self.wake();
        Ok(())
    }

    /// `POST job/{id}` (update): `hold`, `priority`, `time_limit` change pending jobs; `comment`
    /// and `name` any job slurmctld still knows. An array's id updates all its tasks.
    pub fn update(&self, id: u32, upd: &JobUpdate) -> Result<Vec<u32>, Rejection> {
        let mut c = self.lock();
        let ids: Vec<u32> = c
            .jobs
            .values()
            .filter(|j| j.id == id || j.array.as_ref().is_some_and(|a| a.array_job_id == id))
            .map(|j| j.id)
            .collect();
        if ids.is_empty() {
            return Err(Rejection {
                number: 2017,
                message: "Invalid job id specified",
            });
        }
        for jid in &ids {
            let job = c.jobs.get_mut(jid).expect("listed above");
            if job.state.is_finished() {
                // Recorded on 24.11, 26.05 and 26.11: "Job has already finished".
                return Err(Rejection {
                    number: 2084,
                    message: "Job has already finished",
                });
            }
            let mut spec = (*job.spec).clone();
            if let Some(cm) = &upd.comment {
                spec.comment = cm.clone();
            }
            if let Some(n) = &upd.name {
                spec.name = n.clone();
            }
            if job.state == Base::Pending {
                if let Some(h) = upd.hold {
                    spec.hold = h;
                }
                if let Some(p) = upd.priority {
                    spec.priority = Some(p);
                }
                if let Some(t) = upd.time_limit {
                    spec.time_limit = t;
                }
            }
            job.spec = Arc::new(spec);
        }
        c.last_update = now();
        drop(c);
        self.wake();
        Ok(ids)
    }
}
