//! The command-line front end: one module per subcommand that needs more than a call.

pub mod request;
pub mod submit;
