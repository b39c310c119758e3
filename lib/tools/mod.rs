//! One `run` per tool, and the `main` every binary calls: read the environment once, parse the command
//! line, run, render any error through the one renderer, and turn the result into an exit code.

pub mod config;
pub mod env;
pub mod estimate;
pub mod launch;
pub mod merge;
pub mod test;

use std::io::Write;
use std::process::ExitCode;

use crate::env_vars::Environment;
use crate::error::{render, Error, Result};
use crate::exit_status::ExitStatus;

/// The whole of a binary's `main`.
pub fn main<C: clap::Parser>(
    tool: &'static str,
    run: fn(C, &Environment) -> Result<ExitStatus>,
) -> ExitCode {
    main_with::<C>(tool, |_| String::new(), run)
}

/// [`main`], with more lines for `--version` from the binary (accel-test: the torch it found and what
/// its libtorch part can check), computed only when `--version` is asked.
pub fn main_with<C: clap::Parser>(
    tool: &'static str,
    version_lines: impl FnOnce(&Environment) -> String,
    run: fn(C, &Environment) -> Result<ExitStatus>,
) -> ExitCode {
    let env = Environment::capture();
    init_logging(tool, &env);
    let mut command = C::command();
    if std::env::args_os().any(|a| a == "--version") {
        // Once per process, and only for --version.
        let text = crate::provenance::long_version(version_lines(&env));
        command = command.long_version(&*Box::leak(text.into_boxed_str()));
    }
    let parsed = command
        .try_get_matches()
        .and_then(|m| C::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitStatus::Usage.into()
            } else {
                ExitStatus::Success.into()
            };
        }
    };
    match run(cli, &env) {
        Ok(status) => status.into(),
        Err(err) => render(tool, &err, &env).into(),
    }
}

/// Debug logging to stderr, off unless `ACCEL_LOG` asks for it (`debug`, `trace`, or env_logger filters
/// such as `accel::launch=trace`).
pub fn init_logging(tool: &'static str, env: &Environment) {
    let Some(filter) = env.non_empty(crate::env_vars::ACCEL_LOG) else {
        return;
    };
    let _ = env_logger::Builder::new()
        .parse_filters(filter)
        .format(move |buf, record| {
            writeln!(
                buf,
                "{tool}: {}: {}",
                record.level().as_str().to_lowercase(),
                record.args()
            )
        })
        .target(env_logger::Target::Stderr)
        .try_init();
}

/// Writes data to stdout. A closed pipe (`accel-env | head -1`) ends the tool quietly, as in ripgrep.
pub fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Error::msg(
            ExitStatus::Output,
            format!("cannot write to stdout: {e}"),
        )),
    }
}
