//! What can go wrong while sizing a model: unreadable or malformed inputs, unknown architectures, and
//! Hub access. Every error names the file or repository and says what to do instead.

use crate::error::Diagnostic;
use crate::exit_status::ExitStatus;

#[derive(Debug, thiserror::Error)]
pub enum EstimateError {
    #[error("`{path}` is not a safetensors file: {reason}")]
    NotSafetensors { path: String, reason: String },
    #[error("`{path}`: truncated safetensors header: it declares {need} bytes of header, {have} present")]
    TruncatedHeader { path: String, need: u64, have: u64 },
    #[error("`{path}`: truncated safetensors file: its header declares {need} bytes, the file has {have}")]
    TruncatedData { path: String, need: u64, have: u64 },
    #[error("`{path}`: invalid safetensors header: {reason}")]
    BadHeader { path: String, reason: String },
    #[error("`{path}`: invalid index: {reason}")]
    BadIndex { path: String, reason: String },
    #[error("`{index}` names shard `{shard}`, which does not exist")]
    MissingShard { index: String, shard: String },
    #[error(
        "`{dir}` holds {have} of the {total} shards {pattern} and no index: a partial download"
    )]
    PartialDownload {
        dir: String,
        pattern: String,
        have: u64,
        total: u64,
    },
    #[error("`{path}`: invalid model config: {reason}")]
    BadConfig { path: String, reason: String },
    #[error("unknown architecture `{model_type}`: no formula for it")]
    UnknownArchitecture {
        model_type: String,
        /// The architectures that have formulas, for the hint.
        known: &'static [&'static str],
    },
    #[error("`{path}` is neither a file, a model directory nor a Hub repository id")]
    NoInput { path: String },
    #[error("`{dir}` holds no config.json, model.safetensors(.index.json) or *.safetensors")]
    EmptyDir { dir: String },
    #[error("`{dir}` has a PyTorch .bin index but no config.json to size it by")]
    BinWithoutConfig { dir: String },
    #[error("{what} needs the model's dimensions, and `{source_name}` {reason}")]
    NeedsConfig {
        what: String,
        source_name: String,
        reason: String,
    },
    #[error("cannot fetch `{repo}` from the Hub: HF_HUB_OFFLINE is set")]
    HubOffline { repo: String },
    #[error("`{repo}` on the Hub is gated or private (HTTP {status} for {file})")]
    HubGated {
        repo: String,
        file: String,
        status: u16,
        token: bool,
    },
    #[error("`{repo}` has no `{file}` on the Hub (HTTP 404)")]
    HubNotFound { repo: String, file: String },
    #[error("cannot reach the Hub at {endpoint} for `{repo}`")]
    HubUnreachable {
        repo: String,
        endpoint: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("the Hub answered HTTP {status} for {url}")]
    HubHttp { url: String, status: u16 },
    #[error("{0}")]
    Usage(String),
}

impl Diagnostic for EstimateError {
    fn exit_status(&self) -> ExitStatus {
        match self {
            EstimateError::Usage(_) => ExitStatus::Usage,
            _ => ExitStatus::Input,
        }
    }

    fn hints(&self) -> Vec<String> {
        let local = "download the repository (config.json and the *.safetensors files, or just config.json) and pass its local path";
        match self {
            EstimateError::UnknownArchitecture { known, .. } => vec![
                format!(
                    "architectures with formulas: {}",
                    known.join(", ")
                ),
                "pass the model's .safetensors file, or a directory of shards with model.safetensors.index.json: their headers give every tensor".into(),
            ],
            EstimateError::NotSafetensors { .. } => vec![
                "accel-estimate-memory reads .safetensors files, model directories and config.json; for pytorch_model.bin checkpoints pass the directory with its config.json".into(),
            ],
            EstimateError::TruncatedHeader { .. } | EstimateError::TruncatedData { .. } => {
                vec!["the file looks cut short: download it again".into()]
            }
            EstimateError::PartialDownload { .. } => vec![
                "download the remaining shards (and model.safetensors.index.json), or pass config.json alone".into(),
            ],
            EstimateError::MissingShard { .. } => {
                vec!["download every shard named in the index, or pass config.json alone".into()]
            }
            EstimateError::NoInput { .. } => vec![
                "give a path to a .safetensors file, a model directory or a config.json, or a Hub id like `org/name`".into(),
            ],
            // Only a missing config.json is mended by adding one.
            EstimateError::NeedsConfig { reason, .. } if reason == "has no config.json" => vec![
                "put the model's config.json next to the weights, or pass the config.json".into(),
            ],
            EstimateError::HubOffline { .. } | EstimateError::HubUnreachable { .. } => vec![
                local.into(),
                "a repository in huggingface_hub's cache (HF_HUB_CACHE) is used when offline; it is not there".into(),
            ],
            EstimateError::HubGated { token, .. } => {
                let mut hints = Vec::new();
                if *token {
                    hints.push("the token (HF_TOKEN, else the `hf auth login` file $HF_HOME/token) does not grant access: accept the model's licence on the Hub, or check the token".into());
                } else {
                    hints.push("run `hf auth login`, or set HF_TOKEN, with a token that has access to the repository".into());
                }
                hints.push(local.into());
                hints
            }
            EstimateError::HubNotFound { .. } => vec![
                "check the repository id (and HF_ENDPOINT), or pass a local path".into(),
            ],
            _ => Vec::new(),
        }
    }
}
