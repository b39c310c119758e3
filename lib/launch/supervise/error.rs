//! What can keep a run from starting, as the launcher reports it: a program that cannot be run (told
//! apart by what the kernel's ENOENT means: the program, its `#!` interpreter or its loader), log files
//! that would collide or overwrite, and the launcher's own failures; each with its hints and exit status.

use std::ffi::OsString;
use std::io::Read;
use std::path::Path;

use crate::error::Diagnostic;
use crate::exit_status::ExitStatus;

#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    #[error("cannot run `{program}`: not found")]
    NotFound { program: String },
    /// The script exists, but the kernel cannot find what runs it (`execve` says ENOENT for both).
    #[error("cannot run `{program}`: its interpreter {interpreter:?} (its #! line) is not found")]
    InterpreterNotFound {
        program: String,
        interpreter: String,
    },
    #[error("cannot run `{program}`: the file exists, but its program loader is not found")]
    LoaderNotFound { program: String },
    #[error("cannot run `{program}`")]
    CannotExecute {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("--log_template `{template}` gives {first} and {second} the same file {path}")]
    LogCollision {
        template: String,
        path: String,
        first: String,
        second: String,
        missing: &'static str,
    },
    #[error("{path} is left from an earlier run: accel-launch does not overwrite logs")]
    LogExists { path: String },
    #[error(
        "log file {path} would be written through the symbolic link {link}, which leaves --log_dir"
    )]
    LogThroughLink { path: String, link: String },
    #[error("cannot {what}")]
    Launcher {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl Diagnostic for SuperviseError {
    fn hints(&self) -> Vec<String> {
        match self {
            SuperviseError::NotFound { program } => {
                let path = Path::new(program);
                let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
                if !program.contains('/') && path.is_file() {
                    // execvp looks a bare name up on PATH only, never in the current directory.
                    vec![format!("`{program}` is in the current directory, but a name without a `/` is looked up on PATH: run it as ./{program}")]
                } else if name.starts_with("python") {
                    vec!["set ACCEL_PYTHON to the interpreter of your training environment".into()]
                } else {
                    vec!["check the program's path (with --no_python the script itself is run)".into()]
                }
            }
            SuperviseError::InterpreterNotFound { program, interpreter } => {
                if interpreter.ends_with('\r') {
                    vec![format!("`{program}` has Windows (CRLF) line endings, so its #! line names `{}\\r`: convert it (`sed -i 's/\\r$//' {program}` or dos2unix)", interpreter.trim_end_matches('\r'))]
                } else {
                    vec![format!("install {interpreter} or change the first line of `{program}`")]
                }
            }
            SuperviseError::LoaderNotFound { .. } => vec![
                "a binary built for another system (its dynamic loader, e.g. /lib64/ld-linux-x86-64.so.2, is missing): rebuild it here".into(),
            ],
            SuperviseError::LogCollision { missing, .. } => {
                vec![format!("add {missing} to the template")]
            }
            SuperviseError::LogThroughLink { .. } => vec![
                "every log file stays inside --log_dir: remove the link, or give --log_dir the directory it points to".into(),
            ],
            SuperviseError::LogExists { .. } => vec![
                "give each run its own --log_dir (e.g. --log_dir logs/$(date +%Y%m%d-%H%M%S)), or move the old logs away".into(),
            ],
            _ => Vec::new(),
        }
    }
    fn exit_status(&self) -> ExitStatus {
        match self {
            SuperviseError::NotFound { .. }
            | SuperviseError::InterpreterNotFound { .. }
            | SuperviseError::LoaderNotFound { .. } => ExitStatus::NotFound,
            SuperviseError::CannotExecute { .. } => ExitStatus::CannotExecute,
            SuperviseError::LogCollision { .. } => ExitStatus::Usage,
            SuperviseError::LogExists { .. } => ExitStatus::Output,
            SuperviseError::LogThroughLink { .. } => ExitStatus::Output,
            SuperviseError::Launcher { .. } => ExitStatus::LauncherFailed,
        }
    }
}

/// What the kernel's refusal to run a rank's program means.
pub(super) fn spawn_error(program: &OsString, e: std::io::Error) -> SuperviseError {
    let program = program.to_string_lossy().into_owned();
    match e.kind() {
        std::io::ErrorKind::NotFound if program.contains('/') && Path::new(&program).is_file() => {
            match shebang_interpreter(Path::new(&program)) {
                Some(interpreter) => SuperviseError::InterpreterNotFound {
                    program,
                    interpreter,
                },
                None => SuperviseError::LoaderNotFound { program },
            }
        }
        std::io::ErrorKind::NotFound => SuperviseError::NotFound { program },
        _ => SuperviseError::CannotExecute { program, source: e },
    }
}

/// The interpreter a script's `#!` line names (its first word, a trailing `\r` kept), if it has one.
fn shebang_interpreter(path: &Path) -> Option<String> {
    let mut head = [0u8; 256];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let text = String::from_utf8_lossy(line);
    text.split([' ', '\t'])
        .find(|w| !w.is_empty())
        .map(str::to_string)
}
