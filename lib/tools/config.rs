//! `accel-config`: the questionnaire, `default`, `update`, `show`, `get`, `set` and `validate`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::cli::config::{ConfigCli, ConfigCommand, DefaultArgs, MixedPrecisionArg, ShowArgs};
use crate::config::{self, file, schema, ConfigError, Document, Format, Origin, Resolved};
use crate::devices;
use crate::env_vars::Environment;
use crate::error::{warn, Error, Result};
use crate::exit_status::ExitStatus;

const TOOL: &str = "accel-config";

pub fn run(cli: ConfigCli, env: &Environment) -> Result<ExitStatus> {
    let explicit = cli.config_file.clone();
    match cli.command {
        None => {
            if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
                return Err(Error::msg_hint(
                    ExitStatus::Usage,
                    "the questionnaire needs a terminal, and stdin is not one",
                    "in scripts use `accel-config default`, `accel-config set KEY VALUE`, `get`, `show` or `validate`",
                ));
            }
            let path = target_path(explicit.as_deref(), env);
            crate::questionnaire::run(&path, env)
        }
        Some(ConfigCommand::Default(args)) => {
            default(&target_path(explicit.as_deref(), env), &args, env)
        }
        Some(ConfigCommand::Update) => update(&target_path(explicit.as_deref(), env), env),
        Some(ConfigCommand::Show(args)) => show(explicit.as_deref(), &args, env),
        Some(ConfigCommand::Get(args)) => get(explicit.as_deref(), &args.key, args.json, env),
        Some(ConfigCommand::Set(args)) => set(
            &target_path(explicit.as_deref(), env),
            &args.key,
            &args.value,
            env,
        ),
        Some(ConfigCommand::Validate(args)) => {
            let path = args
                .file
                .or(explicit)
                .unwrap_or_else(|| target_path(None, env));
            validate(&path, env)
        }
    }
}

/// The file a writing command works on: --config_file, ACCEL_CONFIG_FILE, or the default path.
fn target_path(explicit: Option<&Path>, env: &Environment) -> PathBuf {
    match config::choose_file(explicit, env) {
        Some((p, _)) => p,
        None => config::default_config_path(env),
    }
}

fn print_warnings(warnings: &[config::Warning], env: &Environment) {
    for w in warnings {
        warn(TOOL, &w.0, env);
    }
}

/// The mapping `accelerate config default` writes for this machine (reference §3.7).
pub fn default_map(mixed_precision: &str, env: &Environment) -> Map<String, Value> {
    let gpus = devices::detect_gpus(env).gpus.len();
    let mut m = Map::new();
    m.insert("compute_environment".into(), "LOCAL_MACHINE".into());
    m.insert("debug".into(), false.into());
    m.insert(
        "distributed_type".into(),
        if gpus > 1 { "MULTI_GPU" } else { "NO" }.into(),
    );
    m.insert("downcast_bf16".into(), false.into());
    m.insert("enable_cpu_affinity".into(), false.into());
    m.insert("machine_rank".into(), 0.into());
    m.insert("main_training_function".into(), "main".into());
    m.insert("mixed_precision".into(), mixed_precision.into());
    m.insert("num_machines".into(), 1.into());
    m.insert("num_processes".into(), gpus.max(1).into());
    m.insert("rdzv_backend".into(), "static".into());
    m.insert("same_network".into(), false.into());
    m.insert("tpu_use_cluster".into(), false.into());
    m.insert("tpu_use_sudo".into(), false.into());
    m.insert("use_cpu".into(), (gpus == 0).into());
    m
}

fn write_map(path: &Path, map: &Map<String, Value>) -> Result<()> {
    let text = file::render(map, Format::from_path(path)).map_err(|e| {
        Error::msg(
            ExitStatus::Output,
            format!("cannot serialise config for `{}`: {e}", path.display()),
        )
    })?;
    write_text(path, &text)?;
    Ok(())
}

/// Creates the parent directory if needed, then replaces the file atomically.
fn write_text(path: &Path, text: &str) -> Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| ConfigError::Write {
            path: path.to_path_buf(),
            source,
        })?;
    }
    file::write_atomic(path, text)?;
    Ok(())
}

fn default(path: &Path, args: &DefaultArgs, env: &Environment) -> Result<ExitStatus> {
    if path.exists() && !args.force {
        return Err(ConfigError::Exists {
            path: path.to_path_buf(),
        }
        .into());
    }
    let mp = match args.mixed_precision {
        MixedPrecisionArg::No => "no",
        MixedPrecisionArg::Fp16 => "fp16",
        MixedPrecisionArg::Bf16 => "bf16",
        MixedPrecisionArg::Fp8 => "fp8",
    };
    write_map(path, &default_map(mp, env))?;
    eprintln!("{TOOL}: configuration saved at {}", path.display());
    Ok(ExitStatus::Success)
}

fn update(path: &Path, env: &Environment) -> Result<ExitStatus> {
    let loaded = config::load(path)?;
    let mut warnings = loaded.warnings.clone();
    // Unknown keys that are not removed ones are kept: never drop what a user wrote.
    let mut map = Resolved::resolve(Some(&loaded), &Environment::default(), &[])?.to_map();
    for (key, value) in &loaded.doc.map {
        if schema::top(key).is_none() && !schema::LEGACY_TOP.contains(&key.as_str()) {
            map.insert(key.clone(), value.clone());
            warnings.push(config::Warning(format!(
                "kept unknown key `{key}`: accelerate refuses files with unknown keys until it is fixed or removed"
            )));
        }
    }
    if let Some(Value::Object(mpirun)) = map.get_mut("mpirun_config") {
        mpirun.remove("mpirun_ccl");
    }
    for w in &warnings {
        warn(TOOL, &w.0, env);
    }
    write_map(path, &map)?;
    eprintln!("{TOOL}: updated {}", path.display());
    Ok(ExitStatus::Success)
}

fn resolve(explicit: Option<&Path>, env: &Environment) -> Result<Resolved> {
    let resolved = config::resolve(explicit, env, &[])?;
    print_warnings(&resolved.warnings, env);
    Ok(resolved)
}

/// A value as a shell wants it: strings bare, everything else as JSON.
fn bare(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn show(explicit: Option<&Path>, args: &ShowArgs, env: &Environment) -> Result<ExitStatus> {
    let resolved = resolve(explicit, env)?;
    let out = if args.json {
        let json = if args.origin {
            let mut m = Map::new();
            for (key, value, origin) in resolved.entries() {
                let mut e = Map::new();
                e.insert("value".into(), value.clone());
                e.insert("origin".into(), origin_json(origin));
                m.insert(key, Value::Object(e));
            }
            Value::Object(m)
        } else {
            Value::Object(resolved.to_map())
        };
        serde_json::to_string_pretty(&json).unwrap_or_default() + "\n"
    } else {
        let rows: Vec<(String, String, String)> = resolved
            .entries()
            .into_iter()
            .map(|(k, v, o)| (k, bare(v), o.to_string()))
            .collect();
        let width = rows
            .iter()
            .map(|(k, v, _)| k.len() + v.len() + 2)
            .max()
            .unwrap_or(0);
        let mut s = String::new();
        for (k, v, o) in rows {
            if args.origin {
                let kv = format!("{k}: {v}");
                s.push_str(&format!("{kv:<width$}  # {o}\n"));
            } else {
                s.push_str(&format!("{k}: {v}\n"));
            }
        }
        s
    };
    super::print(&out)?;
    Ok(ExitStatus::Success)
}

fn origin_json(origin: &Origin) -> Value {
    let mut m = Map::new();
    match origin {
        Origin::Default => {
            m.insert("kind".into(), "default".into());
        }
        Origin::Derived(why) => {
            m.insert("kind".into(), "default".into());
            m.insert("rule".into(), (*why).into());
        }
        Origin::File { path, line } => {
            m.insert("kind".into(), "file".into());
            m.insert("path".into(), path.display().to_string().into());
            m.insert("line".into(), line.map(Value::from).unwrap_or(Value::Null));
        }
        Origin::Env(var) => {
            m.insert("kind".into(), "env".into());
            m.insert("var".into(), var.clone().into());
        }
        Origin::Cli(flag) => {
            m.insert("kind".into(), "cli".into());
            m.insert("flag".into(), flag.clone().into());
        }
    }
    Value::Object(m)
}

fn get(explicit: Option<&Path>, key: &str, json: bool, env: &Environment) -> Result<ExitStatus> {
    let resolved = resolve(explicit, env)?;
    let value = if schema::section(key).is_some() {
        resolved
            .to_map()
            .get(key)
            .cloned()
            .unwrap_or(Value::Object(Map::new()))
    } else {
        let key = config::canonical_key(key)?;
        match resolved.get(&key) {
            Some(v) => v.clone(),
            None => {
                return Err(Error::msg_hint(
                    ExitStatus::Failure,
                    format!("`{key}` is not set"),
                    "`accel-config show` lists the values that are set",
                ))
            }
        }
    };
    super::print(
        &(if json {
            value.to_string()
        } else {
            bare(&value)
        } + "\n"),
    )?;
    Ok(ExitStatus::Success)
}

fn set(path: &Path, key: &str, raw: &str, env: &Environment) -> Result<ExitStatus> {
    let key = config::canonical_key(key)?;
    let spec = schema::lookup(&key).ok_or_else(|| ConfigError::UnknownKey {
        key: key.clone(),
        suggestion: None,
    })?;
    let value = config::coerce(&spec.kind, &config::file::type_hint_parse(raw)).map_err(|_| {
        ConfigError::Invalid(config::Problem {
            location: "command line".into(),
            key: key.clone(),
            message: format!("invalid value `{raw}` (expected {})", spec.kind.describe()),
            hint: None,
        })
    })?;
    // Work on the document as written, so keys accel does not know survive the rewrite.
    let mut map = match Document::read(path) {
        Ok(doc) => doc.map,
        Err(ConfigError::NotFound { .. }) => default_map("no", env),
        Err(e) => return Err(e.into()),
    };
    match key.split_once('.') {
        None => {
            map.insert(key.clone(), value);
        }
        Some((section, inner)) => {
            let entry = map
                .entry(section.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            if !entry.is_object() {
                *entry = Value::Object(Map::new());
            }
            if let Value::Object(m) = entry {
                // Replace the key under whichever spelling (prefixed or not) the file already used.
                let existing = m
                    .keys()
                    .find(|k| {
                        config::canonical_key(&format!("{section}.{k}"))
                            .ok()
                            .as_deref()
                            == Some(&key)
                    })
                    .cloned();
                m.insert(existing.unwrap_or_else(|| inner.to_string()), value);
            }
        }
    }
    // The result must load before it replaces the old file.
    let text = file::render(&map, Format::from_path(path))
        .map_err(|e| Error::msg(ExitStatus::Output, format!("cannot serialise config: {e}")))?;
    let loaded = config::normalize(Document::parse(path, text.clone())?)?;
    print_warnings(&loaded.warnings, env);
    write_text(path, &text)?;
    Ok(ExitStatus::Success)
}

fn validate(path: &Path, env: &Environment) -> Result<ExitStatus> {
    match config::load(path) {
        Ok(loaded) => {
            print_warnings(&loaded.warnings, env);
            super::print(&format!("{}: valid\n", path.display()))?;
            Ok(ExitStatus::Success)
        }
        Err(e @ ConfigError::NotFound { .. }) => Err(e.into()),
        Err(e) => {
            crate::error::render(TOOL, &Error::from(e), env);
            Ok(ExitStatus::Failure)
        }
    }
}
