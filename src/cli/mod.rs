//! The command-line front end: one module per subcommand that needs more than a call.

pub mod check;
pub mod embedded;
pub mod native_inputs;
pub mod render;
pub mod request;
pub mod submit;
