//! From what the user names — a `.safetensors` file, a model directory (shards with an index, a
//! `pytorch_model.bin` index with its config, or a config alone), a `config.json`, or a Hub id — to
//! one tensor list. With a config of a known family the formula is used, because that is the model
//! accelerate sizes; otherwise, or with `--from weights`, the safetensors headers are.

use std::path::{Path, PathBuf};

use super::arch::{self, Config, Dims};
use super::error::EstimateError;
use super::hub::{self, Hub};
use super::safetensors;
use super::tensors::{NoSplit, Tensor};
use crate::env_vars::Environment;
use crate::error::{IoError, Result};

/// Which description of the model to size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum From {
    /// The config formula when the family is known, else the safetensors headers.
    Auto,
    /// Always the config formula (accelerate's AutoModel).
    Config,
    /// Always the safetensors headers (the checkpoint as stored, task head included).
    Weights,
}

/// Where the tensor list came from.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    Config { model_type: String },
    Safetensors { files: Vec<String> },
}

/// A model, sized by accelerate's rules.
pub struct Model {
    pub tensors: Vec<Tensor>,
    /// Trained tensors the table's model lacks: the untied LM head of the causal LM that is
    /// actually trained, when the table sizes the base model as accelerate does.
    pub head: Vec<Tensor>,
    /// Names of tensors the table counts that the trained and served model shares with another
    /// (T5's per-stack `embed_tokens`, which are `shared`): counted once there.
    pub tied: Vec<String>,
    /// The config, when there is one (quantization, model type).
    pub config_model_type: Option<String>,
    /// The config's `quantization_config`, when the tensors come from the formula (headers already
    /// store the quantized tensors).
    pub quantization: Option<serde_json::Map<String, serde_json::Value>>,
    /// Why there are no dims, for the message when --context or --seq-len needs them.
    pub no_dims_reason: Option<String>,
    pub no_split: NoSplit,
    pub dims: Option<Dims>,
    pub source: Source,
    /// For a Hub model: requests made and body bytes received.
    pub hub_traffic: Option<(u64, u64)>,
}

impl Model {
    /// The tensors of the model that is trained or served: the table's, less those it ties to
    /// another, plus the untied LM head.
    pub fn trained_model(&self) -> impl Iterator<Item = &Tensor> {
        self.tensors
            .iter()
            .filter(|t| !self.tied.contains(&t.name))
            .chain(&self.head)
    }
}

/// Resolves `name` to a model.
pub fn load(name: &str, from: From, revision: &str, env: &Environment) -> Result<Model> {
    let path = Path::new(name);
    if path.is_dir() {
        return load_dir(path, from);
    }
    if path.is_file() {
        return load_file(path, from);
    }
    if hub::is_repo_id(name) && !name.ends_with(".json") && !name.ends_with(".safetensors") {
        return load_hub(name, from, revision, env);
    }
    Err(EstimateError::NoInput { path: name.into() }.into())
}

fn read_text(path: &Path) -> Result<String> {
    Ok(std::fs::read_to_string(path).map_err(|e| IoError::new("read", path, e))?)
}

fn read_config(path: &Path) -> Result<Config> {
    Ok(Config::parse(
        &read_text(path)?,
        &path.display().to_string(),
    )?)
}

fn from_config(config: &Config) -> Result<Model> {
    let built = arch::build(config)?;
    log::debug!(
        "{} by formula: {} tensors",
        config.model_type,
        built.tensors.len()
    );
    let head = if config.auto_model_for() == Some("AutoModelForCausalLM") {
        Vec::new()
    } else {
        built.head
    };
    Ok(Model {
        tensors: built.tensors,
        head,
        tied: built.tied,
        config_model_type: Some(config.model_type.clone()),
        quantization: config.quantization().cloned(),
        no_dims_reason: None,
        no_split: built.no_split,
        dims: Some(built.dims),
        source: Source::Config {
            model_type: config.model_type.clone(),
        },
        hub_traffic: None,
    })
}

fn from_headers(tensors: Vec<Tensor>, files: Vec<String>, config: Option<&Config>) -> Model {
    let model_type = config.map(|c| c.model_type.as_str());
    let no_split = arch::no_split_for(model_type, &tensors);
    let (dims, no_dims_reason) = match config.map(dims_of) {
        Some(Ok(dims)) => (Some(dims), None),
        None => (None, Some("has no config.json".to_string())),
        Some(Err(reason)) => {
            let c = config.map(Config::family_name).unwrap_or_default();
            (
                None,
                Some(format!(
                    "has a config.json (model_type `{c}`) that {reason}{}",
                    if config.is_some_and(|c| c.text().is_some()) {
                        " (at the top level or under text_config)"
                    } else {
                        ""
                    }
                )),
            )
        }
    };
    Model {
        tensors,
        head: Vec::new(),
        tied: Vec::new(),
        config_model_type: config.map(|c| c.model_type.clone()),
        quantization: None,
        no_dims_reason,
        no_split,
        dims,
        source: Source::Safetensors { files },
        hub_traffic: None,
    }
}

/// Dimensions from the formula when the family is known, else from the usual config keys; else
/// why there are none.
fn dims_of(config: &Config) -> Result<Dims, String> {
    if let Ok(built) = arch::build(config) {
        return Ok(built.dims);
    }
    let text = config.text();
    let text = text.as_ref().unwrap_or(config);
    match arch::build(text) {
        Ok(b) => Ok(b.dims),
        // A family with a formula whose config is wrong: its error says what.
        Err(EstimateError::BadConfig { reason, .. }) if text.is_known() => {
            Err(format!("is invalid: {reason}"))
        }
        Err(_) => arch::generic_dims(text),
    }
}

fn load_file(path: &Path, from: From) -> Result<Model> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if file_name.ends_with(".json") {
        if file_name.ends_with(".index.json") {
            return load_index_dir(dir, path, from);
        }
        let config = read_config(path)?;
        if from == From::Weights {
            return Err(EstimateError::Usage(format!(
                "--from weights needs safetensors files; `{}` is a config",
                path.display()
            ))
            .into());
        }
        return from_config(&config);
    }
    let header = safetensors::read_file(path)?;
    let config_path = dir.join("config.json");
    let config = if config_path.is_file() {
        read_config(&config_path).ok()
    } else {
        None
    };
    Ok(from_headers(
        header.tensors,
        vec![path.display().to_string()],
        config.as_ref(),
    ))
}

fn shards_of_index(dir: &Path, index: &Path) -> Result<Vec<PathBuf>> {
    let shards = safetensors::parse_index(&read_text(index)?, &index.display().to_string())?;
    let mut paths = Vec::with_capacity(shards.len());
    for shard in shards {
        let p = dir.join(&shard);
        if !p.is_file() {
            return Err(EstimateError::MissingShard {
                index: index.display().to_string(),
                shard,
            }
            .into());
        }
        paths.push(p);
    }
    Ok(paths)
}

fn load_index_dir(dir: &Path, index: &Path, from: From) -> Result<Model> {
    let config_path = dir.join("config.json");
    let config = if config_path.is_file() {
        Some(read_config(&config_path)?)
    } else {
        None
    };
    let is_bin = index
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("pytorch_model"));
    if is_bin {
        return match config {
            Some(c) if from != From::Weights => from_config(&c),
            Some(_) => Err(EstimateError::Usage(
                "--from weights needs safetensors files; this is a pytorch_model.bin checkpoint"
                    .into(),
            )
            .into()),
            None => Err(EstimateError::BinWithoutConfig {
                dir: dir.display().to_string(),
            }
            .into()),
        };
    }
    if let Some(c) = &config {
        if from == From::Config || (from == From::Auto && c.is_known()) {
            return from_config(c);
        }
    }
    let shards = shards_of_index(dir, index)?;
    headers_of(&shards, config.as_ref())
}

fn headers_of(files: &[PathBuf], config: Option<&Config>) -> Result<Model> {
    // Shard headers are independent; reading them on all cores matters for MoE checkpoints with
    // a hundred shards and tens of thousands of tensors.
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8);
    let chunk = files.len().div_ceil(threads).max(1);
    let results: Vec<Result<Vec<Tensor>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = files
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || -> Result<Vec<Tensor>> {
                    let mut tensors = Vec::new();
                    for file in part {
                        tensors.extend(safetensors::read_file(file)?.tensors);
                    }
                    Ok(tensors)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(crate::error::Error::msg(
                        crate::exit_status::ExitStatus::Failure,
                        "a header-reading thread panicked",
                    ))
                })
            })
            .collect()
    });
    let mut tensors = Vec::new();
    for r in results {
        tensors.extend(r?);
    }
    Ok(from_headers(
        tensors,
        files.iter().map(|f| f.display().to_string()).collect(),
        config,
    ))
}

fn load_dir(dir: &Path, from: From) -> Result<Model> {
    let config_path = dir.join("config.json");
    let config = if config_path.is_file() {
        Some(read_config(&config_path)?)
    } else {
        None
    };
    if let Some(c) = &config {
        if from == From::Config || (from == From::Auto && c.is_known()) {
            return from_config(c);
        }
    }
    for index in [
        "model.safetensors.index.json",
        "pytorch_model.bin.index.json",
    ] {
        let p = dir.join(index);
        if p.is_file() {
            return load_index_dir(dir, &p, from);
        }
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| IoError::new("read directory", dir, e))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    files.sort();
    if !files.is_empty() {
        check_complete(dir, &files)?;
        return headers_of(&files, config.as_ref());
    }
    match config {
        // Not a family with a formula (or no family named at all): build's error says which.
        Some(c) if from != From::Weights => from_config(&c),
        None if dir.join("pytorch_model.bin").is_file() => Err(EstimateError::BinWithoutConfig {
            dir: dir.display().to_string(),
        }
        .into()),
        _ => Err(EstimateError::EmptyDir {
            dir: dir.display().to_string(),
        }
        .into()),
    }
}

/// Shards named `…-00002-of-00009.safetensors` say how many there are; without an index, a
/// directory holding fewer is a partial download and would be sized as a smaller model.
fn check_complete(dir: &Path, files: &[PathBuf]) -> Result<(), EstimateError> {
    let mut sets: std::collections::BTreeMap<(String, u64), u64> = Default::default();
    for f in files {
        let Some(stem) = f
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".safetensors"))
        else {
            continue;
        };
        let mut parts = stem.rsplitn(4, '-');
        let (Some(total), Some("of"), Some(index), Some(prefix)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if let (Ok(total), Ok(_)) = (total.parse::<u64>(), index.parse::<u64>()) {
            *sets.entry((prefix.to_string(), total)).or_default() += 1;
        }
    }
    for ((prefix, total), have) in sets {
        if have < total {
            return Err(EstimateError::PartialDownload {
                dir: dir.display().to_string(),
                pattern: format!("{prefix}-NNNNN-of-{total:05}.safetensors"),
                have,
                total,
            });
        }
    }
    Ok(())
}

fn load_hub(repo: &str, from: From, revision: &str, env: &Environment) -> Result<Model> {
    // Offline, or the Hub out of reach: huggingface_hub's download cache stands in when it has the
    // repository, as it does for transformers.
    let from_cache = |err: EstimateError| -> Result<Model> {
        match hub::cached_snapshot(repo, revision, env) {
            Some(snapshot) => load_dir(&snapshot, from),
            None => Err(err.into()),
        }
    };
    let hub = match Hub::new(repo, revision, env) {
        Ok(hub) => hub,
        Err(e) => return from_cache(e),
    };
    log::debug!("{repo}: fetching from the Hub");
    let config = match hub.text("config.json") {
        Ok(Some(text)) => Some(Config::parse(&text, &format!("{repo}/config.json"))?),
        Ok(None) => None,
        Err(e @ EstimateError::HubUnreachable { .. }) => return from_cache(e),
        Err(e) => return Err(e.into()),
    };
    let mut model = load_hub_model(&hub, repo, from, config.as_ref())?;
    model.hub_traffic = Some(hub.traffic());
    Ok(model)
}

fn load_hub_model(hub: &Hub, repo: &str, from: From, config: Option<&Config>) -> Result<Model> {
    if let Some(c) = config {
        if from == From::Config || (from == From::Auto && c.is_known()) {
            return from_config(c);
        }
    }
    let files: Vec<String> = match hub.text("model.safetensors.index.json")? {
        Some(text) => {
            safetensors::parse_index(&text, &format!("{repo}/model.safetensors.index.json"))?
        }
        None => vec!["model.safetensors".into()],
    };
    let mut tensors = Vec::new();
    for (file, header) in files.iter().zip(hub.safetensors_headers(&files)?) {
        match header {
            Some(header) => tensors.extend(header.tensors),
            None if files.len() == 1 => {
                return Err(match config {
                    Some(c) if from != From::Weights => {
                        return from_config(c);
                    }
                    Some(_) => EstimateError::HubNotFound {
                        repo: repo.into(),
                        file: "model.safetensors".into(),
                    },
                    None => EstimateError::HubNotFound {
                        repo: repo.into(),
                        file: "config.json or model.safetensors".into(),
                    },
                }
                .into())
            }
            None => {
                return Err(EstimateError::MissingShard {
                    index: format!("{repo}/model.safetensors.index.json"),
                    shard: file.clone(),
                }
                .into())
            }
        }
    }
    Ok(from_headers(
        tensors,
        files.iter().map(|f| format!("{repo}/{f}")).collect(),
        config,
    ))
}
