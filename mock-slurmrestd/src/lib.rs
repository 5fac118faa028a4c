//! mock-slurmrestd: a stateful slurmrestd v0.0.42 stand-in (see its issue).
