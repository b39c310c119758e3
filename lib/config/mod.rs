//! The config core every tool resolves through. A config file written by accelerate 1.15 loads here with
//! the same values, and files written here load in accelerate. Resolution is layered — command line >
//! environment (`ACCEL_CONFIG_*`) > file > defaults — and every resolved value remembers where it came from.
//!
//! Differences from accelerate, on purpose: unknown keys are warnings (with the closest valid key) instead
//! of a refusal, section keys are validated too, and config scalars accelerate silently ignores
//! (`rdzv_backend`, `same_network`, `enable_cpu_affinity`, `downcast_bf16`, `tpu_use_sudo`) are honoured.

mod cluster;
pub mod compat;
pub mod edit;
pub mod file;
pub mod fsdp2;
pub mod merge;
mod paths;
pub mod schema;
mod value;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

pub use cluster::*;
pub use file::{Document, Format};
pub use paths::{default_config_path, expand_user, hf_cache_dir};
pub use value::{coerce, Mismatch};

use crate::env_vars::{self, Environment};
use crate::error::Diagnostic;
use crate::exit_status::ExitStatus;
use schema::{KeySpec, Kind};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file `{}` does not exist", path.display())]
    NotFound { path: PathBuf },
    #[error("cannot read config file `{}`", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write config file `{}`", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}{}: invalid {format}: {message}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    Parse {
        path: PathBuf,
        line: Option<usize>,
        format: &'static str,
        message: String,
    },
    #[error("config file `{}` is empty", path.display())]
    Empty { path: PathBuf },
    #[error("{}: a `distributed_type` must be specified in the config file", path.display())]
    MissingDistributedType { path: PathBuf },
    #[error("{}: Amazon SageMaker configs are not supported by accel", path.display())]
    SageMaker { path: PathBuf },
    #[error("{0}")]
    Invalid(Problem),
    #[error("{} has {} problems:\n{}", path.display(), problems.len(), problems.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
    InvalidMany {
        path: PathBuf,
        problems: Vec<Problem>,
    },
    #[error("unknown config key `{key}`")]
    UnknownKey {
        key: String,
        suggestion: Option<String>,
    },
    #[error("config file `{}` already exists", path.display())]
    Exists { path: PathBuf },
}

impl Diagnostic for ConfigError {
    fn hints(&self) -> Vec<String> {
        match self {
            ConfigError::NotFound { .. } => vec![
                "pass an existing file with --config_file, or create one with `accel-config` or `accel-config default`".into(),
            ],
            ConfigError::SageMaker { .. } => vec![
                "launch SageMaker jobs with `accelerate launch`; accel runs local and cluster (SLURM/MPI) jobs".into(),
            ],
            ConfigError::UnknownKey { suggestion: Some(s), .. } => vec![format!("did you mean `{s}`?")],
            ConfigError::UnknownKey { .. } => vec!["`accel-config show` lists the keys of a config".into()],
            ConfigError::Exists { .. } => vec!["pass --force to overwrite it, or --config_file to write elsewhere".into()],
            ConfigError::Invalid(p) => p.hint.iter().cloned().collect(),
            ConfigError::Empty { .. } => vec!["write one with `accel-config default`".into()],
            _ => Vec::new(),
        }
    }
    fn exit_status(&self) -> ExitStatus {
        match self {
            ConfigError::Write { .. } | ConfigError::Exists { .. } => ExitStatus::Output,
            _ => ExitStatus::Usage,
        }
    }
}

/// One invalid value: where it is, which key, what it was and what is allowed.
#[derive(Debug, Clone)]
pub struct Problem {
    pub location: String,
    pub key: String,
    pub message: String,
    pub hint: Option<String>,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: `{}`: {}", self.location, self.key, self.message)
    }
}

/// Where a resolved value came from.
#[derive(Debug, Clone, PartialEq)]
pub enum Origin {
    Default,
    /// Filled in by a rule (e.g. `num_processes: 1` when `distributed_type` is NO).
    Derived(&'static str),
    File {
        path: PathBuf,
        line: Option<usize>,
    },
    Env(String),
    Cli(String),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Default => write!(f, "default"),
            Origin::Derived(why) => write!(f, "default ({why})"),
            Origin::File {
                path,
                line: Some(l),
            } => write!(f, "{}:{l}", path.display()),
            Origin::File { path, line: None } => write!(f, "{}", path.display()),
            Origin::Env(var) => write!(f, "env {var}"),
            Origin::Cli(flag) => write!(f, "{flag}"),
        }
    }
}

/// A non-fatal finding while loading (unknown key, migrated legacy key).
#[derive(Debug, Clone, PartialEq)]
pub struct Warning(pub String);

/// A config file after accelerate's normalisation and accel's validation.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub doc: Document,
    /// Known keys only, values coerced to their kinds, legacy keys migrated.
    pub map: Map<String, Value>,
    pub warnings: Vec<Warning>,
}

impl Loaded {
    pub fn path(&self) -> &Path {
        &self.doc.path
    }
}

/// Loads, normalises and validates a config file. Every invalid value is reported, not just the first.
pub fn load(path: &Path) -> Result<Loaded, ConfigError> {
    let doc = Document::read(path)?;
    normalize(doc)
}

/// accelerate's `process_config` followed by validation of every key.
pub fn normalize(doc: Document) -> Result<Loaded, ConfigError> {
    let path = doc.path.clone();
    let mut raw = doc.map.clone();
    let mut warnings = Vec::new();

    if doc.bom_refused_by_accelerate() {
        warnings.push(Warning(format!(
            "{}: starts with a UTF-8 byte-order mark: accel reads past it, but accelerate refuses this JSON file (`Unexpected UTF-8 BOM`); save it as UTF-8 without a BOM",
            doc.path.display()
        )));
    }
    if raw.get("compute_environment").and_then(Value::as_str) == Some("AMAZON_SAGEMAKER") {
        return Err(ConfigError::SageMaker { path });
    }
    raw.entry("compute_environment")
        .or_insert_with(|| Value::from("LOCAL_MACHINE"));
    match raw.get("distributed_type") {
        None | Some(Value::Null) => return Err(ConfigError::MissingDistributedType { path }),
        // PyYAML-era files may hold a YAML-1.1 boolean for an unquoted NO.
        Some(Value::Bool(false)) => {
            raw.insert("distributed_type".into(), Value::from("NO"));
        }
        _ => {}
    }
    if let Some(fp16) = raw.remove("fp16") {
        let on = value::coerce(&Kind::Bool, &fp16)
            .ok()
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        if !raw.contains_key("mixed_precision") && on {
            raw.insert("mixed_precision".into(), Value::from("fp16"));
        }
        warnings.push(Warning(format!(
            "{}: legacy key `fp16` read as `mixed_precision`; `accel-config update` rewrites it",
            doc.location("fp16")
        )));
    }
    if let Some(backend) = raw.remove("dynamo_backend") {
        let mut section = Map::new();
        if !backend
            .as_str()
            .is_some_and(|b| b.eq_ignore_ascii_case("NO"))
        {
            section.insert("dynamo_backend".into(), backend);
        }
        raw.insert("dynamo_config".into(), Value::Object(section));
        warnings.push(Warning(format!(
            "{}: legacy key `dynamo_backend` read as `dynamo_config.dynamo_backend`; `accel-config update` rewrites it",
            doc.location("dynamo_backend")
        )));
    }
    if raw
        .get("distributed_type")
        .and_then(Value::as_str)
        .is_some_and(|d| d.eq_ignore_ascii_case("NO"))
        && !raw.contains_key("num_processes")
    {
        raw.insert("num_processes".into(), Value::from(1));
    }

    let mut map = Map::new();
    let mut problems = Vec::new();
    for (key, value) in raw {
        let Some(spec) = schema::top(&key) else {
            let message = if key == "ipex_config" {
                format!(
                    "{}: `ipex_config` was removed in accelerate 1.13 (which refuses this file); ignored — `accel-config update` removes it",
                    doc.location(&key)
                )
            } else {
                unknown_key_message(
                    &doc.location(&key),
                    &key,
                    schema::closest(&key, schema::TOP.iter().map(|k| k.name)),
                )
            };
            warnings.push(Warning(message));
            continue;
        };
        if value.is_null() {
            continue;
        }
        match spec.kind {
            Kind::Section(section) => {
                let Value::Object(inner) = value else {
                    problems.push(problem(&doc, &key, spec, &value));
                    continue;
                };
                let mut out = Map::new();
                for (ikey, ivalue) in inner {
                    let dotted = format!("{key}.{ikey}");
                    if ivalue.is_null() {
                        // accelerate keeps inner None values; so do we, so the file round-trips.
                        out.insert(ikey, Value::Null);
                        continue;
                    }
                    match section.key(&ikey) {
                        Some(ispec) => match value::coerce(&ispec.kind, &ivalue) {
                            Ok(v) => {
                                out.insert(ikey, v);
                            }
                            Err(value::Mismatch) => {
                                problems.push(problem(&doc, &dotted, ispec, &ivalue))
                            }
                        },
                        None => {
                            if key == "mpirun_config" && ikey == "mpirun_ccl" {
                                warnings.push(Warning(format!(
                                    "{}: `mpirun_config.mpirun_ccl` was removed in accelerate 1.13 and has no effect",
                                    doc.location(&dotted)
                                )));
                            } else {
                                let names = section.keys.iter().map(|k| k.name);
                                warnings.push(Warning(unknown_key_message(
                                    &doc.location(&dotted),
                                    &dotted,
                                    schema::closest(&ikey, names)
                                        .map(|c| format!("{key}.{c}"))
                                        .as_deref(),
                                )));
                            }
                            out.insert(ikey, ivalue);
                        }
                    }
                }
                map.insert(key, Value::Object(out));
            }
            _ => match value::coerce(&spec.kind, &value) {
                Ok(v) => {
                    map.insert(key, v);
                }
                Err(value::Mismatch) => problems.push(problem(&doc, &key, spec, &value)),
            },
        }
    }
    match problems.len() {
        0 => Ok(Loaded { doc, map, warnings }),
        1 => Err(ConfigError::Invalid(problems.remove(0))),
        _ => Err(ConfigError::InvalidMany { path, problems }),
    }
}

fn unknown_key_message(location: &str, key: &str, suggestion: Option<&str>) -> String {
    match suggestion {
        Some(s) => format!("{location}: unknown key `{key}` (ignored); did you mean `{s}`?"),
        None => format!("{location}: unknown key `{key}` (ignored)"),
    }
}

fn problem(doc: &Document, dotted: &str, spec: &KeySpec, value: &Value) -> Problem {
    Problem {
        location: doc.location(dotted),
        key: dotted.to_string(),
        message: format!(
            "invalid value {} (expected {})",
            show(value),
            spec.kind.describe()
        ),
        hint: None,
    }
}

fn show(value: &Value) -> String {
    match value {
        Value::String(s) => format!("`{s}`"),
        other => format!("`{other}`"),
    }
}

/// A value given on the command line for a config key.
#[derive(Debug, Clone)]
pub struct CliValue {
    /// Dotted key (`num_processes`, `fsdp_config.fsdp_version`).
    pub key: String,
    pub value: Value,
    /// The flag as the user wrote it, for provenance (`--num_processes`).
    pub flag: String,
}

/// A resolved config as plain data, for rules that read many of its values ([`Resolved::view`]).
#[derive(Debug, Clone)]
pub struct View {
    /// accelerate's `ClusterConfig`, typed.
    pub config: ClusterConfig,
    /// The config as accelerate's YAML holds it: top-level keys, sections as objects.
    pub map: Map<String, Value>,
    /// Every key a file, the environment or the command line gave (dotted), with where it came from;
    /// a key defaulted or derived by a rule is absent.
    pub given: BTreeMap<String, Origin>,
}

/// The resolved config: one value per key with its origin, in schema order.
#[derive(Debug, Clone, Default)]
pub struct Resolved {
    entries: BTreeMap<String, (Value, Origin)>,
    /// The file the values came from, if any.
    pub file: Option<PathBuf>,
    pub warnings: Vec<Warning>,
}

impl Resolved {
    /// Resolves defaults < file < `ACCEL_CONFIG_*` environment < command line.
    pub fn resolve(
        file: Option<&Loaded>,
        env: &Environment,
        cli: &[CliValue],
    ) -> Result<Resolved, ConfigError> {
        let mut r = Resolved::default();
        for spec in schema::TOP {
            if let Some(v) = spec.default.to_value() {
                r.entries
                    .insert(spec.name.to_string(), (v, Origin::Default));
            }
        }
        r.entries.insert(
            "distributed_type".into(),
            (Value::from("NO"), Origin::Default),
        );
        if let Some(loaded) = file {
            r.file = Some(loaded.path().to_path_buf());
            r.warnings.extend(loaded.warnings.iter().cloned());
            for (key, value) in &loaded.map {
                match value {
                    Value::Object(inner) => {
                        for (ikey, ivalue) in inner {
                            let dotted = format!("{key}.{ikey}");
                            let line = loaded.doc.line_of(&dotted);
                            r.entries.insert(
                                dotted,
                                (
                                    ivalue.clone(),
                                    Origin::File {
                                        path: loaded.path().into(),
                                        line,
                                    },
                                ),
                            );
                        }
                    }
                    _ => {
                        let line = loaded.doc.line_of(key);
                        r.entries.insert(
                            key.clone(),
                            (
                                value.clone(),
                                Origin::File {
                                    path: loaded.path().into(),
                                    line,
                                },
                            ),
                        );
                    }
                }
            }
        }
        let mut problems = Vec::new();
        for (var, raw) in env.with_prefix(env_vars::ACCEL_CONFIG_OVERRIDE_PREFIX) {
            if var == env_vars::ACCEL_CONFIG_FILE {
                continue;
            }
            let key = var[env_vars::ACCEL_CONFIG_OVERRIDE_PREFIX.len()..]
                .to_ascii_lowercase()
                .replacen("__", ".", 1);
            match r.set_checked(&key, &Value::from(raw), Origin::Env(var.to_string())) {
                Ok(()) => {}
                Err(ConfigError::UnknownKey { key, suggestion }) => r.warnings.push(Warning(match suggestion {
                    Some(s) => format!("environment variable {var}: unknown config key `{key}` (ignored); did you mean `{s}`?"),
                    None => format!("environment variable {var}: unknown config key `{key}` (ignored)"),
                })),
                Err(ConfigError::Invalid(p)) => problems.push(p),
                Err(other) => return Err(other),
            }
        }
        for cv in cli {
            match r.set_checked(&cv.key, &cv.value, Origin::Cli(cv.flag.clone())) {
                Ok(()) => {}
                Err(ConfigError::Invalid(p)) => problems.push(p),
                Err(other) => return Err(other),
            }
        }
        if !problems.is_empty() {
            return Err(if problems.len() == 1 {
                ConfigError::Invalid(problems.remove(0))
            } else {
                ConfigError::InvalidMany {
                    path: PathBuf::from("the resolved config"),
                    problems,
                }
            });
        }
        // accelerate: num_processes defaults to 1 when distributed_type is NO (a -1 elsewhere means
        // "must be given").
        let np_is_default = matches!(
            r.entries.get("num_processes"),
            Some((_, Origin::Default)) | None
        );
        if np_is_default && r.get("distributed_type").and_then(Value::as_str) == Some("NO") {
            r.entries.insert(
                "num_processes".into(),
                (Value::from(1), Origin::Derived("distributed_type is NO")),
            );
        }
        Ok(r)
    }

    /// Records a value a rule derived (the launch's embedded default, a scheduler's placement), with why.
    pub fn set_derived(&mut self, key: &str, value: Value, why: &'static str) {
        self.entries
            .insert(key.to_string(), (value, Origin::Derived(why)));
    }

    /// Sets a dotted key after validating it against the schema.
    pub fn set_checked(
        &mut self,
        key: &str,
        value: &Value,
        origin: Origin,
    ) -> Result<(), ConfigError> {
        let (key, spec) = schema::canonical(key).map_err(|suggestion| ConfigError::UnknownKey {
            key: key.to_string(),
            suggestion,
        })?;
        if matches!(spec.kind, Kind::Section(_)) {
            return Err(ConfigError::Invalid(Problem {
                location: origin.to_string(),
                key: key.clone(),
                message: "is a section; set one of its keys, e.g. `fsdp_config.fsdp_version`"
                    .into(),
                hint: None,
            }));
        }
        let coerced = value::coerce(&spec.kind, &value::parse_scalar(value)).map_err(|_| {
            ConfigError::Invalid(Problem {
                location: origin.to_string(),
                key: key.clone(),
                message: format!(
                    "invalid value {} (expected {})",
                    show(value),
                    spec.kind.describe()
                ),
                hint: None,
            })
        })?;
        self.entries.insert(key, (coerced, origin));
        Ok(())
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries
            .get(key)
            .map(|(v, _)| v)
            .filter(|v| !v.is_null())
    }

    pub fn origin(&self, key: &str) -> Option<&Origin> {
        self.entries.get(key).map(|(_, o)| o)
    }

    /// Every resolved key with its value and origin, in accelerate's field order.
    pub fn entries(&self) -> Vec<(String, &Value, &Origin)> {
        let mut out = Vec::new();
        for spec in schema::TOP {
            match spec.kind {
                Kind::Section(section) => {
                    let prefix = format!("{}.", spec.name);
                    let mut keys: Vec<&String> = self
                        .entries
                        .keys()
                        .filter(|k| k.starts_with(&prefix))
                        .collect();
                    // Known keys in schema order, then the rest alphabetically.
                    keys.sort_by_key(|k| {
                        let inner = &k[prefix.len()..];
                        (
                            section
                                .keys
                                .iter()
                                .position(|s| s.name == inner)
                                .unwrap_or(usize::MAX),
                            (*k).clone(),
                        )
                    });
                    for k in keys {
                        let (v, o) = &self.entries[k];
                        out.push((k.clone(), v, o));
                    }
                }
                _ => {
                    if let Some((v, o)) = self.entries.get(spec.name) {
                        out.push((spec.name.to_string(), v, o));
                    }
                }
            }
        }
        out
    }

    /// The nested mapping (sections as objects), null values dropped — what a file would hold.
    pub fn to_map(&self) -> Map<String, Value> {
        let mut map = Map::new();
        for (key, value, _) in self.entries() {
            if value.is_null() {
                continue;
            }
            match key.split_once('.') {
                None => {
                    map.insert(key, value.clone());
                }
                Some((sec, inner)) => {
                    let entry = map
                        .entry(sec.to_string())
                        .or_insert_with(|| Value::Object(Map::new()));
                    if let Value::Object(m) = entry {
                        m.insert(inner.to_string(), value.clone());
                    }
                }
            }
        }
        map
    }

    /// The resolved config as the launch reads it, in one go: accelerate's typed `ClusterConfig`,
    /// the config as a map of sections, and the keys that were given rather than defaulted.
    pub fn view(&self) -> Result<View, ConfigError> {
        let given = self
            .entries
            .iter()
            .filter(|(_, (_, o))| !matches!(o, Origin::Default | Origin::Derived(_)))
            .map(|(k, (_, o))| (k.clone(), o.clone()))
            .collect();
        Ok(View {
            config: self.config()?,
            map: self.to_map(),
            given,
        })
    }

    /// The typed view.
    pub fn config(&self) -> Result<ClusterConfig, ConfigError> {
        serde_json::from_value(Value::Object(self.to_map())).map_err(|e| {
            ConfigError::Invalid(Problem {
                location: self
                    .file
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| "config".into()),
                key: "(config)".into(),
                message: e.to_string(),
                hint: None,
            })
        })
    }
}

/// Turns `fsdp_config.version` into `fsdp_config.fsdp_version` and rejects unknown keys.
pub fn canonical_key(key: &str) -> Result<String, ConfigError> {
    schema::canonical(key)
        .map(|(k, _)| k)
        .map_err(|suggestion| ConfigError::UnknownKey {
            key: key.to_string(),
            suggestion,
        })
}

/// Which file to read: `--config_file`, else `ACCEL_CONFIG_FILE`, else accelerate's default path when it
/// exists. Returns the path and whether it was asked for explicitly (an explicit path must exist).
pub fn choose_file(cli: Option<&Path>, env: &Environment) -> Option<(PathBuf, bool)> {
    if let Some(p) = cli {
        return Some((p.to_path_buf(), true));
    }
    if let Some(p) = env.non_empty(env_vars::ACCEL_CONFIG_FILE) {
        return Some((PathBuf::from(p), true));
    }
    let default = default_config_path(env);
    default.is_file().then_some((default, false))
}

/// Loads the chosen file (if any) and resolves it with the environment and command-line values.
pub fn resolve(
    cli_file: Option<&Path>,
    env: &Environment,
    cli: &[CliValue],
) -> Result<Resolved, ConfigError> {
    let loaded = match choose_file(cli_file, env) {
        Some((path, _)) => Some(load(&path)?),
        None => {
            log::debug!("no config file: defaults, ACCEL_CONFIG_* and the command line only");
            None
        }
    };
    Resolved::resolve(loaded.as_ref(), env, cli)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(text: &str) -> Document {
        Document::parse(Path::new("/t/c.yaml"), text.into()).unwrap()
    }

    #[test]
    fn normalisation_rules() {
        let l = normalize(doc(
            "distributed_type: NO\nfp16: true\ndynamo_backend: INDUCTOR\n",
        ))
        .unwrap();
        assert_eq!(l.map["num_processes"], Value::from(1));
        assert_eq!(l.map["mixed_precision"], Value::from("fp16"));
        assert_eq!(
            l.map["dynamo_config"]["dynamo_backend"],
            Value::from("INDUCTOR")
        );
        assert_eq!(l.map["compute_environment"], Value::from("LOCAL_MACHINE"));
        let l = normalize(doc("distributed_type: MULTI_GPU\ndynamo_backend: 'NO'\n")).unwrap();
        assert!(!l.map.contains_key("num_processes"));
        assert_eq!(l.map["dynamo_config"], Value::Object(Map::new()));
        assert!(matches!(
            normalize(doc("debug: true\n")),
            Err(ConfigError::MissingDistributedType { .. })
        ));
        assert!(matches!(
            normalize(doc(
                "compute_environment: AMAZON_SAGEMAKER\ndistributed_type: 'NO'\n"
            )),
            Err(ConfigError::SageMaker { .. })
        ));
    }

    #[test]
    fn unknown_keys_warn_with_suggestion() {
        let l = normalize(doc(
            "distributed_type: NO\nnum_proceses: 2\nfsdp_config:\n  fsdp_verison: 2\n",
        ))
        .unwrap();
        let all: Vec<_> = l.warnings.iter().map(|w| w.0.clone()).collect();
        assert!(
            all[0].contains("/t/c.yaml:2: unknown key `num_proceses`")
                && all[0].contains("`num_processes`"),
            "{all:?}"
        );
        assert!(
            all[1].contains("/t/c.yaml:4") && all[1].contains("fsdp_config.fsdp_version"),
            "{all:?}"
        );
    }

    #[test]
    fn invalid_values_name_line_key_and_choices() {
        let err = normalize(doc("distributed_type: NO\nmixed_precision: fp17\n")).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("/t/c.yaml:2")
                && text.contains("mixed_precision")
                && text.contains("no, fp16, bf16, fp8"),
            "{text}"
        );
        let err = normalize(doc(
            "distributed_type: NO\nuse_cpu: maybe\nnum_machines: 0\n",
        ))
        .unwrap_err();
        assert!(
            matches!(err, ConfigError::InvalidMany { ref problems, .. } if problems.len() == 2),
            "{err}"
        );
    }

    #[test]
    fn precedence_and_provenance() {
        let l = normalize(doc(
            "distributed_type: MULTI_GPU\nnum_processes: 4\nmixed_precision: fp16\n",
        ))
        .unwrap();
        let env = Environment::from_pairs([
            ("ACCEL_CONFIG_MIXED_PRECISION", "bf16"),
            ("ACCEL_CONFIG_NUM_PROCESSES", "8"),
        ]);
        let cli = [CliValue {
            key: "num_processes".into(),
            value: Value::from("2"),
            flag: "--num_processes".into(),
        }];
        let r = Resolved::resolve(Some(&l), &env, &cli).unwrap();
        assert_eq!(r.get("num_processes"), Some(&Value::from(2)));
        assert_eq!(
            r.origin("num_processes"),
            Some(&Origin::Cli("--num_processes".into()))
        );
        assert_eq!(r.get("mixed_precision"), Some(&Value::from("bf16")));
        assert_eq!(
            r.origin("mixed_precision").unwrap().to_string(),
            "env ACCEL_CONFIG_MIXED_PRECISION"
        );
        assert_eq!(
            r.origin("distributed_type").unwrap().to_string(),
            "/t/c.yaml:1"
        );
        assert_eq!(r.origin("rdzv_backend"), Some(&Origin::Default));
        let c = r.config().unwrap();
        assert_eq!(c.distributed_type, DistributedType::MULTI_GPU);
        assert_eq!(c.mixed_precision, Some(MixedPrecision::Bf16));
    }

    #[test]
    fn no_file_defaults() {
        let r = Resolved::resolve(None, &Environment::default(), &[]).unwrap();
        let c = r.config().unwrap();
        assert_eq!(c.num_processes, 1);
        assert_eq!(c.distributed_type, DistributedType::NO);
        assert_eq!(
            r.origin("num_processes"),
            Some(&Origin::Derived("distributed_type is NO"))
        );
    }
}
