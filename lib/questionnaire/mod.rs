//! The interactive `accel-config` questionnaire: the questions `accelerate config` asks for "This
//! machine", with the same answers giving the same config file, written in the format of its extension.
//!
//! [`flow`] holds the questions, [`fields`] accelerate's answer conversions, [`prompt`] the terminal.
//! The file is checked by the config core before it is written, and written atomically.

mod fields;
mod flow;
mod prompt;

use std::path::{Path, PathBuf};

use crate::config::{self, file, ConfigError, Document, Format};
use crate::env_vars::{self, Environment};
use crate::error::{Diagnostic, Result};
use crate::exit_status::ExitStatus;

const TOOL: &str = "accel-config";

#[derive(Debug, thiserror::Error)]
pub enum QuestionnaireError {
    #[error("Amazon SageMaker is not supported by accel; nothing was written")]
    SageMaker,
    #[error("{0}; nothing was written")]
    Unsupported(&'static str),
    #[error("cannot write `{}`: its directory `{}` does not exist", path.display(), dir.display())]
    MissingDirectory { path: PathBuf, dir: PathBuf },
    #[error("the questionnaire could not read from the terminal; nothing was written")]
    Terminal(#[from] std::io::Error),
    #[error("the answers do not make a valid config (a bug in accel-config)")]
    Invalid(#[source] ConfigError),
}

impl Diagnostic for QuestionnaireError {
    fn hints(&self) -> Vec<String> {
        match self {
            QuestionnaireError::SageMaker => vec![
                "write SageMaker configs with `accelerate config` and launch them with `accelerate launch`; accel runs jobs on this machine and on clusters".into(),
            ],
            QuestionnaireError::MissingDirectory { .. } => vec![
                "create the directory first, or pass another --config_file".into(),
            ],
            _ => Vec::new(),
        }
    }
    fn exit_status(&self) -> ExitStatus {
        match self {
            QuestionnaireError::SageMaker | QuestionnaireError::Unsupported(_) => ExitStatus::Usage,
            QuestionnaireError::MissingDirectory { .. } => ExitStatus::Output,
            QuestionnaireError::Terminal(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                ExitStatus::Interrupted
            }
            QuestionnaireError::Terminal(_) | QuestionnaireError::Invalid(_) => ExitStatus::Failure,
        }
    }
}

/// Asks the questions on the terminal and writes the answers to `path`.
pub fn run(path: &Path, env: &Environment) -> Result<ExitStatus> {
    // accelerate creates the default directory and nothing else; a missing directory for an explicit
    // path is reported before the questions rather than after them.
    let is_default = path == config::default_config_path(env);
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map(Path::to_path_buf);
    if let Some(dir) = &dir {
        if !is_default && !dir.is_dir() {
            return Err(QuestionnaireError::MissingDirectory {
                path: path.to_path_buf(),
                dir: dir.clone(),
            }
            .into());
        }
    }

    if path.exists() {
        // accelerate replaces it without a word; saying so lets the user keep it with Ctrl-C.
        eprintln!(
            "{TOOL}: `{}` exists and is replaced once the questions are answered (Ctrl-C keeps it)",
            path.display()
        );
    }
    let mut terminal = prompt::Terminal::new(crate::error::stderr_color(env));
    let ctx = flow::Context {
        home: env.non_empty(env_vars::HOME).map(str::to_string),
        cwd: std::env::current_dir().ok(),
    };
    let map = flow::ask(&mut fields::Fields { io: &mut terminal }, &ctx)?;

    let text = file::render(&map, Format::from_path(path)).map_err(|e| {
        crate::error::Error::msg(
            ExitStatus::Output,
            format!("cannot serialise config for `{}`: {e}", path.display()),
        )
    })?;
    let loaded = Document::parse(path, text.clone())
        .and_then(config::normalize)
        .map_err(QuestionnaireError::Invalid)?;
    for w in &loaded.warnings {
        crate::error::warn(TOOL, &w.0, env);
    }
    if let (true, Some(dir)) = (is_default, &dir) {
        std::fs::create_dir_all(dir).map_err(|source| ConfigError::Write {
            path: path.to_path_buf(),
            source,
        })?;
    }
    file::write_atomic(path, &text)?;
    eprintln!("{TOOL}: configuration saved at {}", path.display());
    Ok(ExitStatus::Success)
}
