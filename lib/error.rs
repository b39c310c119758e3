//! Typed errors end here: every library module defines its own `thiserror` enum and implements
//! [`Diagnostic`] for it (hints, exit status); the binaries render whatever reaches them through
//! [`render`], so every tool prints the same shape:
//!
//! ```text
//! accel-config: error: invalid value `maybe` for `use_cpu` at /x/cfg.yaml:3
//!   caused by: …
//!   hint: …
//! ```

use std::fmt;
use std::io::{IsTerminal, Write};

use crate::exit_status::ExitStatus;

/// What a library error knows about itself beyond its message.
pub trait Diagnostic: std::error::Error + Send + Sync + 'static {
    /// Lines printed as `hint: …` after the error and its causes.
    fn hints(&self) -> Vec<String> {
        Vec::new()
    }
    /// The tool's exit status when this error ends it.
    fn exit_status(&self) -> ExitStatus {
        ExitStatus::Failure
    }
}

/// Any library error on its way to the renderer. Like `anyhow::Error` it converts from every
/// [`Diagnostic`] with `?`, but keeps the hints and the exit status.
pub struct Error(Box<dyn Diagnostic>);

impl Error {
    pub fn exit_status(&self) -> ExitStatus {
        self.0.exit_status()
    }
    pub fn hints(&self) -> Vec<String> {
        self.0.hints()
    }
    pub fn inner(&self) -> &dyn Diagnostic {
        &*self.0
    }
    /// A plain message with an exit status and optional hint, for errors with no natural home module.
    pub fn msg(status: ExitStatus, message: impl Into<String>) -> Self {
        Error(Box::new(Message {
            message: message.into(),
            hint: None,
            status,
        }))
    }
    pub fn msg_hint(
        status: ExitStatus,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> Self {
        Error(Box::new(Message {
            message: message.into(),
            hint: Some(hint.into()),
            status,
        }))
    }
}

impl<E: Diagnostic> From<E> for Error {
    fn from(err: E) -> Self {
        Error(Box::new(err))
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[error("{message}")]
struct Message {
    message: String,
    hint: Option<String>,
    status: ExitStatus,
}

impl Diagnostic for Message {
    fn hints(&self) -> Vec<String> {
        self.hint.iter().cloned().collect()
    }
    fn exit_status(&self) -> ExitStatus {
        self.status
    }
}

/// An I/O failure with the path and what was being done, for modules that need nothing richer.
#[derive(Debug, thiserror::Error)]
#[error("cannot {action} `{path}`")]
pub struct IoError {
    pub action: &'static str,
    pub path: String,
    #[source]
    pub source: std::io::Error,
    pub status: ExitStatus,
}

impl IoError {
    pub fn new(
        action: &'static str,
        path: impl AsRef<std::path::Path>,
        source: std::io::Error,
    ) -> Self {
        let status = if action.starts_with("write")
            || action.starts_with("create")
            || action.starts_with("rename")
        {
            ExitStatus::Output
        } else {
            ExitStatus::Input
        };
        IoError {
            action,
            path: path.as_ref().display().to_string(),
            source,
            status,
        }
    }
}

impl Diagnostic for IoError {
    fn exit_status(&self) -> ExitStatus {
        self.status
    }
    fn hints(&self) -> Vec<String> {
        match self.source.raw_os_error() {
            Some(libc::ENOSPC) => {
                vec!["the disk is full: free space or choose another output directory".into()]
            }
            Some(libc::EACCES) | Some(libc::EPERM) => {
                vec!["check the permissions of the path".into()]
            }
            _ => Vec::new(),
        }
    }
}

/// Whether diagnostics on stderr may use colour: a terminal, and `NO_COLOR` unset or empty.
pub fn stderr_color(env: &crate::env_vars::Environment) -> bool {
    std::io::stderr().is_terminal()
        && env
            .get(crate::env_vars::NO_COLOR)
            .is_none_or(|v| v.is_empty())
}

/// Renders `err` as `tool: error: …`, one `caused by:` per source and the hints. Pure, for tests.
pub fn format_error(tool: &str, err: &Error, color: bool) -> String {
    let (red, yellow, bold, reset) = if color {
        ("\x1b[31m", "\x1b[33m", "\x1b[1m", "\x1b[0m")
    } else {
        ("", "", "", "")
    };
    let mut out = format!("{bold}{tool}:{reset} {red}{bold}error:{reset} {err}\n");
    let mut source = err.inner().source();
    while let Some(cause) = source {
        out.push_str(&format!("  caused by: {cause}\n"));
        source = cause.source();
    }
    for hint in err.hints() {
        out.push_str(&format!("  {yellow}{bold}hint:{reset} {hint}\n"));
    }
    out
}

/// Prints the error to stderr and returns the exit status it asks for.
pub fn render(tool: &str, err: &Error, env: &crate::env_vars::Environment) -> ExitStatus {
    let text = format_error(tool, err, stderr_color(env));
    let _ = std::io::stderr().write_all(text.as_bytes());
    err.exit_status()
}

/// Prints a warning (`tool: warning: …`) to stderr.
pub fn warn(tool: &str, message: &str, env: &crate::env_vars::Environment) {
    let (yellow, bold, reset) = if stderr_color(env) {
        ("\x1b[33m", "\x1b[1m", "\x1b[0m")
    } else {
        ("", "", "")
    };
    let _ = writeln!(
        std::io::stderr(),
        "{bold}{tool}:{reset} {yellow}{bold}warning:{reset} {message}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_chain_and_hints() {
        let io = IoError::new(
            "read",
            "/nope",
            std::io::Error::from_raw_os_error(libc::ENOENT),
        );
        let err = Error::from(io);
        let text = format_error("accel-x", &err, false);
        assert!(
            text.starts_with("accel-x: error: cannot read `/nope`\n"),
            "{text}"
        );
        assert!(
            text.contains("  caused by: No such file or directory"),
            "{text}"
        );
        assert_eq!(err.exit_status(), ExitStatus::Input);
        let err = Error::msg_hint(ExitStatus::Usage, "bad", "do better");
        assert_eq!(
            format_error("t", &err, false),
            "t: error: bad\n  hint: do better\n"
        );
    }
}
