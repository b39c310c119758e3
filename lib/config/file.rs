//! Reading and writing config files in the three formats, byte-compatible with what accelerate reads:
//! the format follows the extension (`.json`, `.toml`, anything else YAML — and JSON text inside a `.yaml`
//! file parses as YAML, which is how `accelerate config default` writes it). Parsed documents are kept as
//! `serde_json::Value` trees in file order plus a line index, so errors can point at `file:line`.
//!
//! YAML: `serde_yaml_ng`, the maintained drop-in fork of the archived `serde_yaml` (same API, same
//! YAML-1.2 core schema). Being YAML 1.2, an unquoted `no` reads as the string "no", which is what users
//! meant; when writing, strings that YAML 1.1 (PyYAML) would read as booleans are quoted. Merge keys
//! (`<<: *anchor`) are resolved as PyYAML resolves them ([`super::merge`]), so every reader sees the
//! values accelerate sees.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::merge;
use super::ConfigError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
    Toml,
}

impl Format {
    pub fn from_path(path: &Path) -> Format {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("json") => Format::Json,
            Some("toml") => Format::Toml,
            _ => Format::Yaml,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Format::Yaml => "YAML",
            Format::Json => "JSON",
            Format::Toml => "TOML",
        }
    }
}

/// A parsed config file: its top-level mapping, in file order, and where each key sits.
#[derive(Debug, Clone)]
pub struct Document {
    pub path: PathBuf,
    pub format: Format,
    pub map: Map<String, Value>,
    /// The text without its byte-order mark.
    text: String,
    /// The file began with a UTF-8 byte-order mark (editors on Windows write one; PyYAML, and so
    /// accelerate's `load_config_from_file` for YAML, reads past it; its JSON reading does not).
    bom: bool,
}

impl Document {
    pub fn read(path: &Path) -> Result<Document, ConfigError> {
        let bytes = match fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ConfigError::NotFound {
                    path: path.to_path_buf(),
                })
            }
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        let text = String::from_utf8(bytes).map_err(|_| ConfigError::Parse {
            path: path.to_path_buf(),
            line: None,
            format: Format::from_path(path).name(),
            message: "the file is not UTF-8 text".into(),
        })?;
        Document::parse(path, text)
    }

    pub fn parse(path: &Path, text: String) -> Result<Document, ConfigError> {
        let (bom, text) = match text.strip_prefix('\u{feff}') {
            Some(rest) => (true, rest.to_string()),
            None => (false, text),
        };
        let format = Format::from_path(path);
        let parse_err = |line: Option<usize>, message: String| ConfigError::Parse {
            path: path.to_path_buf(),
            line,
            format: format.name(),
            message,
        };
        let value: Value = match format {
            Format::Json => {
                serde_json::from_str(&text).map_err(|e| parse_err(Some(e.line()), e.to_string()))?
            }
            Format::Toml => {
                let v: toml::Value = toml::from_str(&text).map_err(|e| {
                    let line = e
                        .span()
                        .map(|s| text[..s.start.min(text.len())].lines().count().max(1));
                    parse_err(line, e.message().to_string())
                })?;
                serde_json::to_value(v).map_err(|e| parse_err(None, e.to_string()))?
            }
            Format::Yaml => {
                let merges = merge::scan(&text);
                let parsed = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(&text);
                let v = match parsed {
                    // Two merge keys in one mapping are fine for PyYAML; `merge::resolve` reads them.
                    Err(e) if merges.plain && is_duplicate_merge_key(&e.to_string()) => None,
                    Err(e) => {
                        let line = e.location().map(|l| l.line());
                        return Err(
                            match duplicate_key(&text, &e.to_string(), line.unwrap_or(1)) {
                                Some((first, second, key)) => parse_err(
                                    Some(second),
                                    format!("duplicate key `{key}` (first at line {first})"),
                                ),
                                None => parse_err(line, e.to_string()),
                            },
                        );
                    }
                    Ok(v) => Some(v),
                };
                match (merges.plain, v) {
                    (false, Some(v)) => yaml_to_json(v).map_err(|m| parse_err(None, m))?,
                    _ if merges.quoted => {
                        return Err(parse_err(
                            None,
                            "a quoted `\"<<\"` key beside merge keys (`<<: *anchor`): accel cannot tell them apart; rename the quoted key".into(),
                        ))
                    }
                    _ => {
                        let node: merge::Node = serde_yaml_ng::from_str(&text).map_err(|e| {
                            parse_err(e.location().map(|l| l.line()), e.to_string())
                        })?;
                        merge::resolve(node).map_err(|m| parse_err(None, m))?
                    }
                }
            }
        };
        let map = match value {
            Value::Object(map) => map,
            Value::Null => {
                return Err(ConfigError::Empty {
                    path: path.to_path_buf(),
                })
            }
            other => {
                return Err(parse_err(
                    None,
                    format!(
                        "the top level must be a mapping of keys to values, found {}",
                        type_name(&other)
                    ),
                ))
            }
        };
        Ok(Document {
            path: path.to_path_buf(),
            format,
            map,
            text,
            bom,
        })
    }

    /// accelerate cannot read this file for its byte-order mark: `load_config_from_file`
    /// (accelerate/commands/config/config_args.py) reads a path ending in exactly `.json` with
    /// `json.load`, which raises "Unexpected UTF-8 BOM"; PyYAML, which reads every other path
    /// (`.JSON` included), skips the mark.
    pub fn bom_refused_by_accelerate(&self) -> bool {
        self.bom && self.path.to_string_lossy().ends_with(".json")
    }

    /// The file's text as read, without a byte-order mark.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Every line of the file ends in CRLF (a file written on Windows).
    pub fn crlf(&self) -> bool {
        let lf = self.text.matches('\n').count();
        lf > 0 && self.text.matches("\r\n").count() == lf
    }

    /// The text with LF line endings: what the editors of [`super::edit`] work on.
    pub fn text_lf(&self) -> std::borrow::Cow<'_, str> {
        if self.crlf() {
            self.text.replace("\r\n", "\n").into()
        } else {
            self.text.as_str().into()
        }
    }

    /// `text` (LF line endings) as this file writes it: CRLF where the file had CRLF, and its
    /// byte-order mark, so a line that did not change is written back byte for byte.
    pub fn in_file_style(&self, text: &str) -> String {
        let body = if self.crlf() {
            text.replace("\r\n", "\n").replace('\n', "\r\n")
        } else {
            text.to_string()
        };
        if self.bom {
            format!("\u{feff}{body}")
        } else {
            body
        }
    }

    /// The 1-based line of `key` (a dotted `section.key` for nested keys), if it can be found.
    pub fn line_of(&self, dotted: &str) -> Option<usize> {
        locate(&self.text, self.format, dotted)
    }

    /// `path:line` for a key, or the path alone.
    pub fn location(&self, dotted: &str) -> String {
        match self.line_of(dotted) {
            Some(line) => format!("{}:{line}", self.path.display()),
            None => self.path.display().to_string(),
        }
    }
}

pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

pub(crate) fn yaml_to_json(v: serde_yaml_ng::Value) -> Result<Value, String> {
    use serde_yaml_ng::Value as Y;
    Ok(match v {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                serde_json::Number::from_f64(f)
                    .map(Value::Number)
                    .ok_or_else(|| format!("unsupported number {f}"))?
            }
        }
        Y::String(s) => Value::String(s),
        Y::Sequence(seq) => Value::Array(
            seq.into_iter()
                .map(yaml_to_json)
                .collect::<Result<_, _>>()?,
        ),
        Y::Mapping(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                let key = match k {
                    Y::String(s) => s,
                    Y::Bool(b) => b.to_string(),
                    Y::Number(n) => n.to_string(),
                    other => return Err(format!("unsupported mapping key {other:?}")),
                };
                out.insert(key, yaml_to_json(v)?);
            }
            Value::Object(out)
        }
        Y::Tagged(t) => yaml_to_json(t.value)?,
    })
}

/// serde_yaml_ng's refusal of a second `<<` in one mapping (`duplicate entry with key "<<"`).
fn is_duplicate_merge_key(message: &str) -> bool {
    message.contains("duplicate entry with key \"<<\"")
}

/// serde_yaml_ng reports a duplicate key at the start of its mapping; users need the duplicate's own
/// line. Returns the first and the second line of the key (1-based) and the key, searching from the
/// mapping's line for two key lines at the same indentation.
fn duplicate_key(text: &str, message: &str, from: usize) -> Option<(usize, usize, String)> {
    const MARK: &str = "duplicate entry with key ";
    let quoted = &message[message.find(MARK)? + MARK.len()..];
    let end = quoted.find(" at line").unwrap_or(quoted.len());
    let key: String = serde_json::from_str(&quoted[..end])
        .unwrap_or_else(|_| quoted[..end].trim_matches(['"', '`']).to_string());
    let mut first: Option<(usize, usize)> = None;
    for (i, line) in text.lines().enumerate().skip(from.saturating_sub(1)) {
        let t = line.trim_start_matches([' ', '-', '{', ',']);
        let indent = line.len() - t.len();
        let hit = [key.clone(), format!("\"{key}\""), format!("'{key}'")]
            .iter()
            .any(|k| {
                t.strip_prefix(k.as_str())
                    .is_some_and(|r| r.trim_start().starts_with(':'))
            });
        if !hit {
            continue;
        }
        match first {
            None => first = Some((i + 1, indent)),
            Some((at, ind)) if ind == indent => return Some((at, i + 1, key)),
            Some(_) => {}
        }
    }
    None
}

/// Finds the line of a key by its text: good enough for files written by accelerate or by hand, where
/// each key sits on its own line. Nested keys are searched after their section's line.
fn locate(text: &str, format: Format, dotted: &str) -> Option<usize> {
    let (section, key) = match dotted.split_once('.') {
        Some((s, k)) => (Some(s), k),
        None => (None, dotted),
    };
    let lines: Vec<&str> = text.lines().collect();
    let is_key_line = |line: &str, key: &str, nested: bool| -> bool {
        let indent = line.len() - line.trim_start().len();
        let t = line.trim_start();
        match format {
            Format::Yaml => {
                if !nested && indent != 0 && !t.starts_with('"') && !t.starts_with('{') {
                    return false;
                }
                let t = t.trim_start_matches(['{', ' ', '-']);
                t.strip_prefix(key)
                    .is_some_and(|r| r.trim_start().starts_with(':'))
                    || t.strip_prefix(&format!("\"{key}\""))
                        .is_some_and(|r| r.trim_start().starts_with(':'))
                    || t.strip_prefix(&format!("'{key}'"))
                        .is_some_and(|r| r.trim_start().starts_with(':'))
            }
            Format::Json => t
                .strip_prefix(&format!("\"{key}\""))
                .is_some_and(|r| r.trim_start().starts_with(':')),
            Format::Toml => {
                t.strip_prefix(key)
                    .is_some_and(|r| r.trim_start().starts_with('='))
                    || (t.starts_with('[') && t.trim_matches(['[', ']', ' ']) == key)
            }
        }
    };
    match section {
        None => lines
            .iter()
            .position(|l| is_key_line(l, key, format != Format::Yaml))
            .map(|i| i + 1),
        Some(section) => {
            let start = lines
                .iter()
                .position(|l| is_key_line(l, section, format != Format::Yaml))?;
            lines
                .iter()
                .enumerate()
                .skip(start + 1)
                .find(|(_, l)| is_key_line(l, key, true))
                .map(|(i, _)| i + 1)
        }
    }
}

/// Strings PyYAML (YAML 1.1) reads as booleans when unquoted but YAML-1.2 emitters leave bare.
/// (`true`/`false` are booleans in both, so an unquoted one is a real boolean and stays as it is.)
fn needs_yaml11_quotes(s: &str) -> bool {
    const BOOLISH: &[&str] = &["y", "yes", "n", "no", "on", "off"];
    BOOLISH.contains(&s.to_ascii_lowercase().as_str())
}

/// serde_yaml_ng quotes YAML-1.2 look-alikes (`no`, `true`) but not every YAML-1.1 word (`On`, `Y`).
/// Its block-style output puts each plain scalar after `: ` or `- `, so such values are quoted there.
fn quote_yaml11_words(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for line in text.lines() {
        let split = line.rfind(": ").map(|i| i + 2).or_else(|| {
            let t = line.trim_start();
            t.starts_with("- ").then(|| line.len() - t.len() + 2)
        });
        match split {
            Some(at) if needs_yaml11_quotes(&line[at..]) => {
                out.push_str(&line[..at]);
                out.push('\'');
                out.push_str(&line[at..]);
                out.push('\'');
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Serialises a config mapping in `format`. YAML and JSON sort keys as PyYAML's `safe_dump` and
/// accelerate's `to_json_file` do; TOML keeps scalars before sections as TOML requires.
pub fn render(map: &Map<String, Value>, format: Format) -> Result<String, String> {
    let sorted = sort_keys(&Value::Object(map.clone()));
    match format {
        Format::Json => serde_json::to_string_pretty(&sorted)
            .map(|s| s + "\n")
            .map_err(|e| e.to_string()),
        Format::Toml => {
            let mut scalars = Map::new();
            let mut tables = Map::new();
            if let Value::Object(m) = sorted {
                for (k, v) in m {
                    if v.is_null() {
                        continue;
                    }
                    if v.is_object() {
                        tables.insert(k, strip_nulls(v));
                    } else {
                        scalars.insert(k, v);
                    }
                }
            }
            scalars.extend(tables);
            toml::to_string(&Value::Object(scalars)).map_err(|e| e.to_string())
        }
        Format::Yaml => {
            let yaml = json_to_yaml(&sorted);
            let text = serde_yaml_ng::to_string(&yaml).map_err(|e| e.to_string())?;
            Ok(quote_yaml11_words(&text))
        }
    }
}

fn strip_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, strip_nulls(v)))
                .collect(),
        ),
        other => other,
    }
}

fn sort_keys(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), sort_keys(&m[k])))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(sort_keys).collect()),
        other => other.clone(),
    }
}

fn json_to_yaml(v: &Value) -> serde_yaml_ng::Value {
    use serde_yaml_ng::Value as Y;
    match v {
        Value::Null => Y::Null,
        Value::Bool(b) => Y::Bool(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Y::Number(i.into())
            } else if let Some(u) = n.as_u64() {
                Y::Number(u.into())
            } else {
                Y::Number(n.as_f64().unwrap_or(0.0).into())
            }
        }
        Value::String(s) => Y::String(s.clone()),
        Value::Array(a) => Y::Sequence(a.iter().map(json_to_yaml).collect()),
        Value::Object(m) => Y::Mapping(
            m.iter()
                .map(|(k, v)| (Y::String(k.clone()), json_to_yaml(v)))
                .collect(),
        ),
    }
}

/// Writes `contents` to `path` atomically: a temporary file in the same directory, fsync, rename.
/// A crash or a full disk leaves the old file (or nothing) in place, never half a config.
pub fn write_atomic(path: &Path, contents: &str) -> Result<(), ConfigError> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let wrap = |source| ConfigError::Write {
        path: path.to_path_buf(),
        source,
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "config".into());
    let tmp = dir.join(format!(".{name}.accel-tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(contents.as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(wrap(e));
    }
    Ok(())
}

/// A command-line value read as a YAML scalar (`8` a number, `true` a boolean, `[a, b]` a list), so
/// `set` coerces it like a value written in a file.
pub fn type_hint_parse(raw: &str) -> Value {
    match serde_yaml_ng::from_str::<serde_yaml_ng::Value>(raw)
        .ok()
        .map(yaml_to_json)
    {
        Some(Ok(v)) if !v.is_object() && !v.is_null() => v,
        _ => Value::String(raw.to_string()),
    }
}

/// A command-line value for a whole section: a YAML mapping (`'{fsdp_version: 2}'`), or the text as a
/// string when it is not one (which the section's kind then refuses with its own message).
pub fn type_hint_parse_mapping(raw: &str) -> Value {
    match serde_yaml_ng::from_str::<serde_yaml_ng::Value>(raw)
        .ok()
        .map(yaml_to_json)
    {
        Some(Ok(v)) if v.is_object() => v,
        _ => Value::String(raw.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_quotes_yaml11_booleans() {
        let mut map = Map::new();
        map.insert("mixed_precision".into(), Value::from("no"));
        map.insert("distributed_type".into(), Value::from("NO"));
        map.insert("a".into(), Value::from("On"));
        map.insert("b".into(), Value::from("y"));
        map.insert("c".into(), Value::from("off"));
        map.insert("d".into(), Value::from("bf16"));
        map.insert("e".into(), Value::from(true));
        map.insert("commands".into(), serde_json::json!(["Yes", "run"]));
        let text = render(&map, Format::Yaml).unwrap();
        assert_eq!(
            text,
            "a: 'On'\nb: 'y'\nc: 'off'\ncommands:\n- 'Yes'\n- run\nd: bf16\ndistributed_type: 'NO'\ne: true\nmixed_precision: 'no'\n"
        );
    }

    #[test]
    fn duplicate_key_points_at_the_duplicate() {
        let err = Document::parse(
            Path::new("c.yaml"),
            "distributed_type: NO\nnum_processes: 2\nfsdp_config:\n  fsdp_version: 1\n  fsdp_version: 2\n".into(),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "c.yaml:5: invalid YAML: duplicate key `fsdp_version` (first at line 4)"
        );
        let err = Document::parse(
            Path::new("c.yaml"),
            "distributed_type: NO\nnum_processes: 2\n# again\nnum_processes: 4\n".into(),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "c.yaml:4: invalid YAML: duplicate key `num_processes` (first at line 2)"
        );
    }

    #[test]
    fn merge_keys_resolve_and_a_quoted_one_beside_them_is_refused() {
        let doc = Document::parse(
            Path::new("c.yaml"),
            "a: &a {x: 1}\nb: &b {x: 2}\nm:\n  <<: *a\n  <<: *b\n'<<': 3\n".into(),
        );
        let err = doc.unwrap_err().to_string();
        assert!(err.contains("cannot tell them apart"), "{err}");
        let doc = Document::parse(
            Path::new("c.yaml"),
            "a: &a {x: 1}\nb: &b {x: 2}\nm:\n  <<: *a\n  <<: *b\n".into(),
        )
        .unwrap();
        assert_eq!(doc.map["m"], serde_json::json!({"x": 2}));
        // Without a plain merge key, a quoted `<<` is an ordinary key, as in PyYAML.
        let doc = Document::parse(Path::new("c.yaml"), "m:\n  '<<': 3\n".into()).unwrap();
        assert_eq!(doc.map["m"]["<<"], 3);
        // Other duplicates are still refused with their lines.
        let err = Document::parse(
            Path::new("c.yaml"),
            "a: &a {x: 1}\nm:\n  <<: *a\n  y: 1\n  y: 2\n".into(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("duplicate key `y`"), "{err}");
    }

    #[test]
    fn unquoted_no_reads_as_string() {
        let doc = Document::parse(
            Path::new("x.yaml"),
            "mixed_precision: no\ndistributed_type: NO\n".into(),
        )
        .unwrap();
        assert_eq!(doc.map["mixed_precision"], Value::from("no"));
        assert_eq!(doc.map["distributed_type"], Value::from("NO"));
    }

    #[test]
    fn json_in_yaml_and_lines() {
        let text =
            "{\n  \"debug\": false,\n  \"fsdp_config\": {\n    \"fsdp_version\": 2\n  }\n}\n";
        let doc = Document::parse(Path::new("c.yaml"), text.into()).unwrap();
        assert_eq!(doc.line_of("debug"), Some(2));
        assert_eq!(doc.line_of("fsdp_config.fsdp_version"), Some(4));
        let doc = Document::parse(
            Path::new("c.yaml"),
            "a: 1\nfsdp_config:\n  x: 1\n  fsdp_version: 2\n".into(),
        )
        .unwrap();
        assert_eq!(doc.line_of("fsdp_config.fsdp_version"), Some(4));
        assert_eq!(doc.line_of("a"), Some(1));
        let doc = Document::parse(
            Path::new("c.toml"),
            "a = 1\n[fsdp_config]\nfsdp_version = 2\n".into(),
        )
        .unwrap();
        assert_eq!(doc.line_of("fsdp_config.fsdp_version"), Some(3));
    }
}
