//! Values every layer above shares and none owns: Slurm's own value syntaxes (`units`: sbatch's
//! durations, sizes and points in time), what a site decides for every task (`site`) and a
//! task's [`Phase`]. Here so
//! that `config`, which parses them from a deployment, and `render`, which applies them to a
//! job, both import them downwards; it imports nothing above `slurmrestd` (whose job-description
//! `Limit` a duration becomes).

pub mod phase;
pub mod site;
pub mod units;

pub use phase::Phase;
