//! `accel-config`: the questionnaire, `default`, `update`, `show`, `get`, `set` and `validate`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::cli::config::{ConfigCli, ConfigCommand, DefaultArgs, ShowArgs, ToFsdp2Args};
use crate::config::{
    self, compat, edit, file, fsdp2, schema, ConfigError, Document, Format, Origin, Resolved,
};
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
            validate(&path, args.accel_only, env)
        }
        Some(ConfigCommand::ToFsdp2(args)) => to_fsdp2(explicit.as_deref(), &args, env),
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

/// The mapping `accelerate config default` writes for this machine
/// (`accelerate/commands/config/default.py::write_basic_config`): every key the schema gives a default,
/// then the four that depend on the machine and the chosen precision. The GPUs are those this process
/// may use (`torch.cuda.device_count()` there, so CUDA_VISIBLE_DEVICES narrows them).
pub fn default_map(mixed_precision: &str, env: &Environment) -> Map<String, Value> {
    let gpus = devices::visible_gpus(env);
    let mut m: Map<String, Value> = schema::TOP
        .iter()
        .filter_map(|spec| Some((spec.name.to_string(), spec.default.to_value()?)))
        .collect();
    m.insert(
        "distributed_type".into(),
        if gpus > 1 { "MULTI_GPU" } else { "NO" }.into(),
    );
    m.insert("mixed_precision".into(), mixed_precision.into());
    m.insert("num_processes".into(), gpus.max(1).into());
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
    write_map(path, &default_map(&args.mixed_precision, env))?;
    eprintln!("{TOOL}: configuration saved at {}", path.display());
    Ok(ExitStatus::Success)
}

/// Rewrites the file with accelerate's migrations applied (legacy keys, removed keys, values in their
/// canonical spelling), changing only those lines and warning about each change.
fn update(path: &Path, env: &Environment) -> Result<ExitStatus> {
    let loaded = config::load(path)?;
    let raw = &loaded.doc.map;
    let mut map = Map::new();
    let mut kept = Vec::new();
    for (key, value) in raw {
        if let Some(v) = loaded.map.get(key) {
            map.insert(key.clone(), v.clone());
        } else if schema::top(key).is_some() {
            // A known key whose value is null stays as written.
            map.insert(key.clone(), value.clone());
        } else if !schema::LEGACY_TOP.contains(&key.as_str()) {
            // Never drop what a user wrote.
            map.insert(key.clone(), value.clone());
            kept.push(format!(
                "{}: kept unknown key `{key}`: accelerate refuses files with unknown keys until it is fixed or removed",
                loaded.doc.location(key)
            ));
        }
    }
    for (key, value) in &loaded.map {
        if !map.contains_key(key) {
            map.insert(key.clone(), value.clone());
        }
    }
    if let Some(Value::Object(mpirun)) = map.get_mut("mpirun_config") {
        mpirun.remove("mpirun_ccl");
    }
    for w in &kept {
        warn(TOOL, w, env);
    }
    let changes = edit::changes(raw, &map);
    if changes.is_empty() {
        eprintln!("{TOOL}: {} is up to date", path.display());
        return Ok(ExitStatus::Success);
    }
    for change in &changes {
        let location = match change.old {
            Some(_) => loaded.doc.location(&change.key),
            None => path.display().to_string(),
        };
        warn(TOOL, &format!("{location}: {change}"), env);
    }
    write_edited(&loaded.doc, &map, env)?;
    eprintln!("{TOOL}: updated {}", path.display());
    Ok(ExitStatus::Success)
}

/// Writes `map` over the file `doc` was read from, keeping its untouched lines, after checking the
/// result loads.
fn write_edited(doc: &Document, map: &Map<String, Value>, env: &Environment) -> Result<()> {
    let edited = edit::edit(doc, map).map_err(|e| {
        Error::msg(
            ExitStatus::Output,
            format!("cannot serialise config for `{}`: {e}", doc.path.display()),
        )
    })?;
    if !edited.layout_kept {
        warn(
            TOOL,
            &format!(
                "{}: its layout (flow style, anchors, …) cannot be edited line by line; rewritten whole in accel's layout, comments lost",
                doc.path.display()
            ),
            env,
        );
    }
    warn_merges_expanded(doc, &edited, env);
    let loaded = config::normalize(Document::parse(&doc.path, edited.text.clone())?)?;
    print_warnings(&loaded.warnings, env);
    write_text(&doc.path, &edited.text)
}

/// One warning per section the edit wrote with its merge keys expanded ([`edit::Edited`]).
fn warn_merges_expanded(doc: &Document, edited: &edit::Edited, env: &Environment) {
    for section in &edited.merges_expanded {
        warn(
            TOOL,
            &format!(
                "{}: `{section}` holds a merge key (`<<: *anchor`): rewritten whole with the merged values expanded (as accelerate reads them), its merge keys, aliases and comments gone",
                doc.location(section)
            ),
            env,
        );
    }
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
        // YAML that accelerate loads with the same values (`show > x.yaml`): sections nested, strings
        // PyYAML would misread quoted, origins as comments.
        let mut rows: Vec<(String, String)> = Vec::new();
        let mut open_section: Option<String> = None;
        for (key, value, origin) in resolved.entries() {
            let (indent, name) = match key.split_once('.') {
                Some((sec, inner)) => {
                    if open_section.as_deref() != Some(sec) {
                        rows.push((format!("{sec}:"), String::new()));
                        open_section = Some(sec.to_string());
                    }
                    (2, inner.to_string())
                }
                None => {
                    open_section = None;
                    (0, key.clone())
                }
            };
            let lines = edit::render_entry(&name, value, indent).unwrap_or_default();
            for (i, line) in lines.iter().enumerate() {
                let o = if i == 0 {
                    origin.to_string()
                } else {
                    String::new()
                };
                rows.push((line.trim_end_matches('\n').to_string(), o));
            }
        }
        let width = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
        let mut s = String::new();
        for (line, origin) in rows {
            if args.origin && !origin.is_empty() {
                s.push_str(&format!("{line:<width$}  # {origin}\n"));
            } else {
                s.push_str(&line);
                s.push('\n');
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
    let section = matches!(spec.kind, schema::Kind::Section(_));
    let parsed = if section {
        file::type_hint_parse_mapping(raw)
    } else {
        file::type_hint_parse(raw)
    };
    let value = config::coerce(&spec.kind, &parsed).map_err(|_| {
        ConfigError::Invalid(config::Problem {
            location: "command line".into(),
            key: key.clone(),
            message: if section {
                format!(
                    "invalid value `{raw}`: a section takes a mapping (`'{{{}: …}}'`), or set one of its keys (`{key}.{}`)",
                    section_example(&key),
                    section_example(&key)
                )
            } else {
                format!("invalid value `{raw}` (expected {})", spec.kind.describe())
            },
            hint: None,
        })
    })?;
    // Work on the document as written, so keys accel does not know survive the rewrite.
    let doc = match Document::read(path) {
        Ok(doc) => Some(doc),
        Err(ConfigError::NotFound { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let mut map = match &doc {
        Some(doc) => doc.map.clone(),
        None => default_map("no", env),
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
    match &doc {
        Some(doc) => write_edited(doc, &map, env)?,
        None => {
            // The result must load before it is written.
            let text = file::render(&map, Format::from_path(path)).map_err(|e| {
                Error::msg(ExitStatus::Output, format!("cannot serialise config: {e}"))
            })?;
            let loaded = config::normalize(Document::parse(path, text.clone())?)?;
            print_warnings(&loaded.warnings, env);
            write_text(path, &text)?;
        }
    }
    // Written as asked (a change may take two `set`s, e.g. fsdp_version then
    // fsdp_reshard_after_forward), but said at once when the launcher would refuse the result.
    if let Some(why) = config::load(path).ok().as_ref().and_then(launch_refusal) {
        warn(
            TOOL,
            &format!(
                "{}: accel-launch would refuse this file: {why}",
                path.display()
            ),
            env,
        );
    }
    Ok(ExitStatus::Success)
}

/// A key of `section` to show in messages (`fsdp_version` for `fsdp_config`).
fn section_example(section: &str) -> &'static str {
    schema::section(section)
        .and_then(|s| s.keys.first())
        .map(|k| k.name)
        .unwrap_or("key")
}

/// accel's own loading, then (unless `accel_only`) whether accelerate would load the file with the same
/// values (`config::compat`): a file only accel can read is not a valid accelerate config.
fn validate(path: &Path, accel_only: bool, env: &Environment) -> Result<ExitStatus> {
    let loaded = match config::load(path) {
        Ok(loaded) => loaded,
        // A file that cannot be read is an error of the command, as in `show` and `set`; one that
        // reads but is not a valid config is the answer `validate` exists to give (exit 1).
        Err(e @ (ConfigError::NotFound { .. } | ConfigError::Read { .. })) => return Err(e.into()),
        Err(e) => {
            crate::error::render(TOOL, &Error::from(e), env);
            return Ok(ExitStatus::Failure);
        }
    };
    print_warnings(&loaded.warnings, env);
    if needs_num_processes(&loaded) {
        warn(
            TOOL,
            &format!(
                "{}: sets no `num_processes`: accel-launch, as accelerate launch, needs `--num_processes N` with this file",
                path.display()
            ),
            env,
        );
    }
    if let Some(why) = launch_refusal(&loaded) {
        let err = Error::msg_hint(
            ExitStatus::Failure,
            format!(
                "{}: accel-launch would refuse this file: {why}",
                path.display()
            ),
            "fix the file (`accel-config set KEY VALUE`); validate checks the rules accel-launch starts a run by",
        );
        crate::error::render(TOOL, &err, env);
        return Ok(ExitStatus::Failure);
    }
    if accel_only {
        super::print(&format!(
            "{}: valid for accel (accelerate not checked)\n",
            path.display()
        ))?;
        return Ok(ExitStatus::Success);
    }
    let problems = compat::check(&loaded);
    if problems.is_empty() {
        super::print(&format!(
            "{}: valid (accel and accelerate read the same values)\n",
            path.display()
        ))?;
        return Ok(ExitStatus::Success);
    }
    let list: Vec<String> = problems.iter().map(|p| format!("  - {}", p.0)).collect();
    let err = Error::msg_hint(
        ExitStatus::Failure,
        format!(
            "{}: accel reads this file, but accelerate would refuse or misread it ({} problem{}):\n{}",
            path.display(),
            problems.len(),
            if problems.len() == 1 { "" } else { "s" },
            list.join("\n")
        ),
        "fix each one (`accel-config update` rewrites legacy keys), or pass --accel_only to check only what accel reads",
    );
    crate::error::render(TOOL, &err, env);
    Ok(ExitStatus::Failure)
}

/// What accel-launch would refuse in this file alone (no flags, no environment), by the launch's own
/// rules (`LaunchArgs::merge`, accelerate's `_validate_launch_command` and accel's own), so that a file
/// `validate` passes is never refused at launch. A missing `num_processes` is not a refusal here: the
/// launch takes it as a flag ([`needs_num_processes`] says so).
fn launch_refusal(loaded: &config::Loaded) -> Option<String> {
    use crate::contract::accelerate::ArgsError;
    match launch_check(loaded, None)? {
        Err(ArgsError::NumProcessesNeeded) => {
            // Judged as launched with a count, so that every other rule is checked too: two
            // ranks per machine, which satisfies the rules on the count itself (at least 2 for
            // multi-GPU, a multiple of num_machines) whatever the file says.
            let machines = launch_view(loaded)?.config.num_machines.max(1);
            match launch_check(loaded, Some(2 * u64::from(machines)))? {
                Err(e @ ArgsError::Invalid(_)) => Some(e.to_string()),
                _ => None,
            }
        }
        Err(e @ ArgsError::Invalid(_)) => Some(e.to_string()),
        _ => None,
    }
}

/// Whether accel-launch needs `--num_processes` with this file: it sets none (or -1).
fn needs_num_processes(loaded: &config::Loaded) -> bool {
    use crate::contract::accelerate::ArgsError;
    matches!(
        launch_check(loaded, None),
        Some(Err(ArgsError::NumProcessesNeeded))
    )
}

/// The file's values as a launch with no environment reads them, with `--num_processes`
/// when `num_processes` is given.
fn launch_resolved(loaded: &config::Loaded, num_processes: Option<u64>) -> Option<Resolved> {
    let env = Environment::from_pairs(Vec::<(String, String)>::new());
    let cli: Vec<config::CliValue> = num_processes
        .map(|n| config::CliValue {
            key: "num_processes".into(),
            value: Value::from(n),
            flag: "--num_processes".into(),
        })
        .into_iter()
        .collect();
    Resolved::resolve(Some(loaded), &env, &cli).ok()
}

fn launch_view(loaded: &config::Loaded) -> Option<config::View> {
    launch_resolved(loaded, None)?.view().ok()
}

/// `LaunchArgs::merge` over the file alone (and `--num_processes` when given), on a machine of
/// no GPUs; None where the file does not resolve (its own loading reports that).
fn launch_check(
    loaded: &config::Loaded,
    num_processes: Option<u64>,
) -> Option<std::result::Result<(), crate::contract::accelerate::ArgsError>> {
    use crate::contract::accelerate::{LaunchArgs, Machine, MergeInput, Paradigm};
    let env = Environment::from_pairs(Vec::<(String, String)>::new());
    let resolved = launch_resolved(loaded, num_processes)?;
    let view = resolved.view().ok()?;
    let merged = LaunchArgs::merge(MergeInput {
        view: &view,
        loaded: Some(loaded),
        paradigm: Paradigm::default(),
        num_cpu_threads_per_process: None,
        machine: Machine {
            gpus: 0,
            physical_cores: 1,
            nodes: 1,
            procs_per_node: None,
            own_ranks: None,
        },
        env: &env,
    });
    Some(merged.map(|_| ()))
}

/// `accelerate to-fsdp2` (`accelerate/commands/to_fsdp2.py::to_fsdp2_command`): the same checks in the
/// same order (input exists, an output is named, an existing output needs --overwrite), the same
/// conversion ([`fsdp2::convert`]), written as `set` writes (comments and order kept).
fn to_fsdp2(explicit: Option<&Path>, args: &ToFsdp2Args, env: &Environment) -> Result<ExitStatus> {
    let Some(input) = explicit else {
        return Err(Error::msg_hint(
            ExitStatus::Usage,
            "to-fsdp2 needs --config_file: the config file to convert",
            "accel-config to-fsdp2 --config_file fsdp.yaml --output_file fsdp2.yaml (or --overwrite)",
        ));
    };
    if !input.exists() {
        return Err(ConfigError::NotFound {
            path: input.to_path_buf(),
        }
        .into());
    }
    let output =
        match (&args.output_file, args.overwrite) {
            (Some(out), _) => out.clone(),
            (None, true) => input.to_path_buf(),
            (None, false) => return Err(Error::msg_hint(
                ExitStatus::Usage,
                "to-fsdp2 needs --output_file, or --overwrite to convert the config file in place",
                "add --output_file PATH, or --overwrite",
            )),
        };
    if !args.overwrite && output.exists() {
        return Err(Error::msg_hint(
            ExitStatus::Output,
            format!(
                "output file `{}` already exists; nothing written",
                output.display()
            ),
            "pass --overwrite to replace it, or another --output_file",
        ));
    }
    let doc = Document::read(input)?;
    let conversion = fsdp2::convert(&doc.map).map_err(|_| {
        Error::msg(
            ExitStatus::Usage,
            format!(
                "{}: `fsdp_config` is {}, not a mapping",
                doc.location("fsdp_config"),
                file::type_name(&doc.map["fsdp_config"])
            ),
        )
    })?;
    let (map, renames) = match conversion {
        fsdp2::Conversion::NoFsdpConfig | fsdp2::Conversion::AlreadyFsdp2 => {
            let why = if conversion == fsdp2::Conversion::NoFsdpConfig {
                format!(
                    "{}: no FSDP config (`fsdp_config`), nothing to convert",
                    input.display()
                )
            } else {
                format!(
                    "{}: the config already specifies FSDP2, nothing to convert; if its keys still have FSDP1 names, set `fsdp_config.fsdp_version` to 1 and run to-fsdp2 again",
                    doc.location("fsdp_config.fsdp_version")
                )
            };
            warn(TOOL, &why, env);
            if output != input {
                // accelerate writes the config back unchanged; a copy keeps it byte for byte.
                write_text(&output, &doc.in_file_style(&doc.text_lf()))?;
                eprintln!(
                    "{TOOL}: copied {} unchanged to {}",
                    input.display(),
                    output.display()
                );
            }
            return Ok(ExitStatus::Success);
        }
        fsdp2::Conversion::Converted {
            map,
            dropped,
            renamed,
        } => {
            for d in &dropped {
                let key = format!("fsdp_config.{}", d.key());
                let why = match d {
                    fsdp2::Dropped::Removed(_) => "has been removed in FSDP2",
                    fsdp2::Dropped::NotYetImplemented(_) => "is not yet implemented in FSDP2",
                };
                warn(
                    TOOL,
                    &format!("{}: `{key}` {why}: dropped", doc.location(&key)),
                    env,
                );
            }
            let renames: Vec<edit::Rename> = renamed
                .into_iter()
                .map(|(from, to)| ("fsdp_config".to_string(), from, to))
                .collect();
            (map, renames)
        }
    };
    let format = Format::from_path(&output);
    let text = if format == doc.format {
        let edited = edit::edit_renaming(&doc, &map, &renames).map_err(|e| {
            Error::msg(
                ExitStatus::Output,
                format!("cannot serialise config for `{}`: {e}", output.display()),
            )
        })?;
        if !edited.layout_kept {
            warn(
                TOOL,
                &format!(
                    "{}: its layout (flow style, anchors, …) cannot be edited line by line; written whole in accel's layout, comments lost",
                    input.display()
                ),
                env,
            );
        }
        warn_merges_expanded(&doc, &edited, env);
        edited.text
    } else {
        file::render(&map, format).map_err(|e| {
            Error::msg(
                ExitStatus::Output,
                format!("cannot serialise config for `{}`: {e}", output.display()),
            )
        })?
    };
    // What accel would say about the result, as `set` says it; the conversion is accelerate's either way.
    match config::normalize(Document::parse(&output, text.clone())?) {
        Ok(loaded) => print_warnings(&loaded.warnings, env),
        Err(e) => warn(TOOL, &format!("the converted config: {e}"), env),
    }
    write_text(&output, &text)?;
    eprintln!(
        "{TOOL}: converted {} to FSDP2, written to {}",
        input.display(),
        output.display()
    );
    Ok(ExitStatus::Success)
}
