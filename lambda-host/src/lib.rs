//! `awsmp-lambda-host`: the Lambdas run as Lambda runs them, on one machine. Each function is
//! its built binary in its own process, started with `AWS_LAMBDA_RUNTIME_API` pointing at a
//! Runtime API of its own on 127.0.0.1 and with only the environment given to it (rendered
//! from the templates: [`template`]); an invocation goes through that API exactly as Lambda
//! hands it to the `lambda_runtime` crate, and an init error the runtime reports is an error
//! of the host, named (docs/local-stack.md, "Lambdas as processes").

mod api;
mod function;
pub mod template;

pub use function::{Function, FunctionSpec, INIT_TIMEOUT};

/// What can go wrong running a function.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The runtime reported a failed init (`POST /runtime/init/error`).
    #[error("{function}: init failed: {error_type}: {error_message}")]
    Init {
        function: String,
        error_type: String,
        error_message: String,
    },
    /// The process exited before polling for an invocation, without reporting why.
    #[error("{function}: exited during init ({status}) without an init error; stderr:\n{stderr}")]
    InitExited {
        function: String,
        status: String,
        stderr: String,
    },
    /// The process neither polled nor failed within Lambda's init limit.
    #[error("{function}: init did not finish within {seconds} s")]
    InitTimeout { function: String, seconds: u64 },
    /// The handler answered with an error (`POST …/error`).
    #[error("{function}: {error_type}: {error_message}")]
    Function {
        function: String,
        error_type: String,
        error_message: String,
    },
    /// The process died during the invocation; the next invocation starts a new one.
    #[error("{function}: the process died during the invocation ({status}); stderr:\n{stderr}")]
    Crashed {
        function: String,
        status: String,
        stderr: String,
    },
    /// The invocation overran the function's timeout; the process was stopped.
    #[error("{function}: timed out after {seconds} s")]
    Timeout { function: String, seconds: u64 },
    /// Starting the process or serving its API failed.
    #[error("{function}: {source}")]
    Io {
        function: String,
        source: std::io::Error,
    },
    /// `infra/functions.json` could not be read or resolved.
    #[error("template: {0}")]
    Template(String),
}

impl Error {
    /// The `errorType` of an init or function error.
    pub fn error_type(&self) -> Option<&str> {
        match self {
            Self::Init { error_type, .. } | Self::Function { error_type, .. } => Some(error_type),
            _ => None,
        }
    }
}
