//! The command-line front end: one module per subcommand that needs more than a call (`serve`
//! with the embedded default, `render`, `check`, `submit`); `main.rs` only parses the arguments,
//! runs one, and prints its [`Failure`].

pub mod check;
pub mod connector_check;
mod embedded;
pub mod logging;
mod native_inputs;
pub mod render;
mod request;
pub mod serve;
pub mod submit;

use std::fmt::Display;

/// How a subcommand failed: the message `main` prints after the command's name, and the exit
/// code — 2 when it could not start (bad configuration or arguments), 1 when it ran and failed.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    /// Could not start: exit code 2.
    pub fn setup(e: impl Display) -> Failure {
        Failure {
            code: 2,
            message: e.to_string(),
        }
    }

    /// Ran and failed: exit code 1.
    pub fn failed(e: impl Display) -> Failure {
        Failure {
            code: 1,
            message: e.to_string(),
        }
    }
}
