//! What one HTTP exchange with slurmrestd says about the cluster, for metrics and alerts: which
//! Slurm daemon the request was for, and how it ended. An outage of slurmdbd, of slurmctld, of
//! slurmrestd (or the network to it), and slurmctld throttling the connector each need a
//! different operator, so the classification is made here, where the request and its error are
//! at hand, and the alerts select on it rather than on lists of operation names.

use crate::ApiVersion;

/// The daemon behind an endpoint: slurmrestd serves slurmdbd's data under `/slurmdb/<version>/`
/// and slurmctld's under `/slurm/<version>/`. A 5xx on the one is not an outage of the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Daemon {
    Slurmctld,
    Slurmdbd,
}

impl Daemon {
    /// The daemon a request path is for. Read from the URL the request really went to, so a
    /// new operation is classified without anyone listing it.
    pub fn of_path(path: &str) -> Daemon {
        if path.split('/').any(|segment| segment == "slurmdb") {
            Daemon::Slurmdbd
        } else {
            Daemon::Slurmctld
        }
    }

    /// The `daemon` label value (`deploy/validate_chart.py` reads these literals: an alert
    /// matching another value fails the chart's checks).
    pub fn as_str(self) -> &'static str {
        match self {
            Daemon::Slurmctld => "slurmctld",
            Daemon::Slurmdbd => "slurmdbd",
        }
    }
}

/// How an exchange ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    /// An HTTP status came back (whatever its body).
    Status(u16),
    /// No connection was made: refused, the name did not resolve, the TLS handshake failed, or
    /// the connect timeout passed (a firewall dropping packets). slurmrestd, its host or the path
    /// to it is down; never slurmctld's load, which slurmrestd can only answer late.
    Unreachable,
    /// Connected and sent, but no answer within the request timeout: slurmrestd, or slurmctld
    /// behind it, is slow. slurmctld's rate limiting looks like this.
    Late,
    /// Connected and sent, then the connection ended without an answer (reset or closed).
    Closed,
}

impl Reply {
    /// The `status` label value: the HTTP status, or what happened instead
    /// (`deploy/validate_chart.py` reads these literals, as for [`Daemon::as_str`]).
    pub fn label(self) -> String {
        match self {
            Reply::Status(s) => s.to_string(),
            Reply::Unreachable => "unreachable".to_string(),
            Reply::Late => "timeout".to_string(),
            Reply::Closed => "closed".to_string(),
        }
    }
}

/// One request to slurmrestd as the [`crate::RequestObserver`] sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exchange {
    /// The facade's name of the call (`submit`, `jobs_state`, `accounting_usages`, ...).
    pub operation: &'static str,
    /// The data_parser version of the request.
    pub version: ApiVersion,
    pub daemon: Daemon,
    pub reply: Reply,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemon_is_read_from_the_path() {
        for (path, want) in [
            ("/slurmdb/v0.0.42/jobs/", Daemon::Slurmdbd),
            ("/slurmdb/v0.0.46/job/12", Daemon::Slurmdbd),
            ("/slurmdb/v0.0.45/user/flyte", Daemon::Slurmdbd),
            // Behind a proxy that prefixes the path.
            ("/hpc/slurmdb/v0.0.42/jobs/", Daemon::Slurmdbd),
            ("/slurm/v0.0.42/jobs/state/", Daemon::Slurmctld),
            ("/slurm/v0.0.45/job/submit", Daemon::Slurmctld),
            ("/slurm/v0.0.40/ping/", Daemon::Slurmctld),
            // A job named like the prefix is not the prefix.
            ("/slurm/v0.0.42/job/slurmdbx", Daemon::Slurmctld),
        ] {
            assert_eq!(Daemon::of_path(path), want, "{path}");
        }
    }

    #[test]
    fn labels() {
        assert_eq!(Reply::Status(502).label(), "502");
        assert_eq!(Reply::Unreachable.label(), "unreachable");
        assert_eq!(Reply::Late.label(), "timeout");
        assert_eq!(Reply::Closed.label(), "closed");
        assert_eq!(Daemon::Slurmdbd.as_str(), "slurmdbd");
    }
}
