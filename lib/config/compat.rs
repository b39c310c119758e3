//! Whether accelerate itself will load a config file accel loads, and read the same values: what
//! `accel-config validate` checks besides accel's own rules. accelerate
//! (`accelerate/commands/config/config_args.py::load_config_from_file`) reads `.json` as JSON and every
//! other file as YAML through PyYAML's `safe_load` (YAML 1.1), refuses keys that are not `ClusterConfig`
//! fields after `process_config`, and builds its `DistributedType`/`ComputeEnvironment` enums from the
//! exact spelling; its `json.load` of a `.json` path raises on a UTF-8 byte-order mark, which PyYAML
//! skips. accel reads YAML 1.2, TOML, past a byte-order mark, and is lenient about case and unknown
//! keys, so a file can be valid here and refused (or misread) there.

use serde_json::Value;

use super::file::Format;
use super::schema::{self, Kind};
use super::{value, Loaded};

/// One reason accelerate would refuse or misread the file, with its `file:line`.
#[derive(Debug, Clone, PartialEq)]
pub struct Incompatibility(pub String);

/// Every reason accelerate would not load `loaded` as accel does.
pub fn check(loaded: &Loaded) -> Vec<Incompatibility> {
    let doc = &loaded.doc;
    let mut out = Vec::new();
    if doc.format == Format::Toml {
        out.push(Incompatibility(format!(
            "{}: accelerate reads only YAML and JSON config files (it parses a .toml file as YAML and fails)",
            doc.path.display()
        )));
        return out;
    }
    if doc.bom_refused_by_accelerate() {
        out.push(Incompatibility(format!(
            "{}:1: starts with a UTF-8 byte-order mark, which accelerate's JSON loader refuses (`Unexpected UTF-8 BOM`); save the file as UTF-8 without a BOM",
            doc.path.display()
        )));
    }
    for key in doc.map.keys() {
        let migrated_by_accelerate = key == "fp16" || key == "dynamo_backend";
        if schema::top(key).is_none() && !migrated_by_accelerate {
            out.push(Incompatibility(format!(
                "{}: accelerate refuses unknown key `{key}` (`had unknown keys`)",
                doc.location(key)
            )));
        }
    }
    for key in ["distributed_type", "compute_environment"] {
        if let (Some(Value::String(raw)), Some(Value::String(canon))) =
            (doc.map.get(key), loaded.map.get(key))
        {
            if raw != canon {
                out.push(Incompatibility(format!(
                    "{}: accelerate needs `{key}: {canon}` spelled exactly (it raises on `{raw}`)",
                    doc.location(key)
                )));
            }
        }
    }
    if doc.format == Format::Yaml && !doc.text().trim_start().starts_with('{') {
        out.extend(yaml11_misreadings(loaded));
    }
    out
}

/// Plain scalars that PyYAML (YAML 1.1) reads as a different value than accel (YAML 1.2): `No`/`on`
/// as booleans, `1e8` as a string, `010` as octal. Block-style `key: value` and `- item` lines are
/// checked, which is how config files are written.
fn yaml11_misreadings(loaded: &Loaded) -> Vec<Incompatibility> {
    let doc = &loaded.doc;
    let mut out = Vec::new();
    let mut section: Option<String> = None;
    let mut last_key: Option<String> = None;
    for (i, line) in doc.text().lines().enumerate() {
        let t = line.trim_start();
        if t.is_empty() || t.starts_with('#') || t.starts_with("---") || t.starts_with('%') {
            continue;
        }
        let indent = line.len() - t.len();
        let (dotted, raw) = if let Some(item) = t.strip_prefix("- ") {
            let Some(k) = &last_key else { continue };
            (k.clone(), item)
        } else {
            let Some((key, rest)) = split_plain_key(t) else {
                continue;
            };
            let dotted = match (&section, indent) {
                (_, 0) => key.to_string(),
                (Some(s), _) => format!("{s}.{key}"),
                (None, _) => continue,
            };
            if indent == 0 {
                section = Some(key.to_string());
            }
            last_key = Some(dotted.clone());
            (dotted, rest)
        };
        let scalar = strip_comment(raw).trim();
        if scalar.is_empty() || scalar.starts_with(['\'', '"', '{', '[', '|', '>', '&', '*', '!']) {
            continue;
        }
        let theirs = pyyaml_plain(scalar);
        let ours = match serde_yaml_ng::from_str::<serde_yaml_ng::Value>(scalar) {
            Ok(v) => super::file::yaml_to_json(v).unwrap_or(Value::Null),
            Err(_) => continue,
        };
        if same_reading(&dotted, &theirs, &ours) {
            continue;
        }
        out.push(Incompatibility(format!(
            "{}:{}: PyYAML (accelerate) reads `{dotted}: {scalar}` as {}, accel as {}; quote it: `'{scalar}'`",
            doc.path.display(),
            i + 1,
            python_repr(&theirs),
            python_repr(&ours)
        )));
    }
    out
}

/// The two readings agree where the key's kind makes them equal (`use_cpu: yes` is true either way).
fn same_reading(dotted: &str, theirs: &Value, ours: &Value) -> bool {
    if theirs == ours {
        return true;
    }
    if let (Some(a), Some(b)) = (theirs.as_f64(), ours.as_f64()) {
        return a == b;
    }
    let kind = schema::lookup(dotted)
        .or_else(|| {
            let (sec, inner) = dotted.split_once('.')?;
            schema::section(sec)?.key(inner)
        })
        .map(|s| s.kind);
    matches!(kind, Some(Kind::Bool))
        && value::coerce(&Kind::Bool, theirs).ok() == value::coerce(&Kind::Bool, ours).ok()
        && value::coerce(&Kind::Bool, ours).is_ok()
}

fn split_plain_key(t: &str) -> Option<(&str, &str)> {
    let (k, rest) = t.split_once(':')?;
    if !(rest.is_empty() || rest.starts_with(' ')) || k.is_empty() || k.contains(' ') {
        return None;
    }
    Some((k.trim_matches(['"', '\'']), rest))
}

fn strip_comment(s: &str) -> &str {
    match s.find(" #") {
        Some(i) => &s[..i],
        None => s,
    }
}

fn python_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::String(s) => format!("the string '{s}'"),
        other => other.to_string(),
    }
}

fn digits(s: &str, radix: u32) -> Option<i64> {
    let clean: String = s.chars().filter(|c| *c != '_').collect();
    if clean.is_empty() {
        return None;
    }
    i64::from_str_radix(&clean, radix).ok()
}

/// PyYAML's implicit resolvers (`yaml/resolver.py`, YAML 1.1) for a plain scalar.
pub fn pyyaml_plain(s: &str) -> Value {
    const TRUE: &[&str] = &[
        "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON",
    ];
    const FALSE: &[&str] = &[
        "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF",
    ];
    if TRUE.contains(&s) {
        return Value::Bool(true);
    }
    if FALSE.contains(&s) {
        return Value::Bool(false);
    }
    if ["~", "null", "Null", "NULL", ""].contains(&s) {
        return Value::Null;
    }
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let sign = |i: i64| Value::from(if neg { -i } else { i });
    let all = |t: &str, ok: fn(char) -> bool| !t.is_empty() && t.chars().all(ok);
    // int: 0b…, 0x…, 0… (octal), decimal with `_`, sexagesimal a:b:c.
    if let Some(b) = body.strip_prefix("0b") {
        if all(b, |c| c == '0' || c == '1' || c == '_') {
            if let Some(i) = digits(b, 2) {
                return sign(i);
            }
        }
    }
    if let Some(h) = body.strip_prefix("0x") {
        if all(h, |c| c.is_ascii_hexdigit() || c == '_') {
            if let Some(i) = digits(h, 16) {
                return sign(i);
            }
        }
    }
    if body.len() > 1
        && body.starts_with('0')
        && all(&body[1..], |c| ('0'..='7').contains(&c) || c == '_')
    {
        if let Some(i) = digits(&body[1..], 8) {
            return sign(i);
        }
    }
    if body == "0"
        || (body.starts_with(|c: char| ('1'..='9').contains(&c))
            && all(body, |c| c.is_ascii_digit() || c == '_'))
    {
        if let Some(i) = digits(body, 10) {
            return sign(i);
        }
    }
    // float: digits, a dot, digits, and an exponent only with a sign (`1.0e+8`); `.inf`, `.nan`.
    if [".inf", ".Inf", ".INF"].contains(&body) {
        return Value::String(s.to_string()); // not representable in JSON; never equal to accel's
    }
    let (mantissa, exp) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let exp_ok = exp.is_none_or(|e| {
        (e.starts_with('+') || e.starts_with('-')) && all(&e[1..], |c| c.is_ascii_digit())
    });
    let mantissa_ok = match mantissa.split_once('.') {
        Some((a, b)) => {
            (a.is_empty() && !b.is_empty() && b.starts_with(|c: char| c.is_ascii_digit())
                || all(a, |c| c.is_ascii_digit() || c == '_')
                    && a.starts_with(|c: char| c.is_ascii_digit()))
                && b.chars().all(|c| c.is_ascii_digit() || c == '_')
        }
        None => false,
    };
    if exp_ok && mantissa_ok {
        let clean: String = body.chars().filter(|c| *c != '_').collect();
        if let Some(f) = clean
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
        {
            let f = f.as_f64().unwrap_or(0.0);
            return Value::from(if neg { -f } else { f });
        }
    }
    Value::String(s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pyyaml_resolution() {
        assert_eq!(pyyaml_plain("No"), Value::Bool(false));
        assert_eq!(pyyaml_plain("on"), Value::Bool(true));
        assert_eq!(pyyaml_plain("y"), Value::from("y"));
        assert_eq!(pyyaml_plain("1e8"), Value::from("1e8"));
        assert_eq!(pyyaml_plain("1.0e+8"), Value::from(1e8));
        assert_eq!(pyyaml_plain("010"), Value::from(8));
        assert_eq!(pyyaml_plain("1_000"), Value::from(1000));
        assert_eq!(pyyaml_plain("8"), Value::from(8));
        assert_eq!(pyyaml_plain("0.5"), Value::from(0.5));
        assert_eq!(pyyaml_plain("bf16"), Value::from("bf16"));
        assert_eq!(pyyaml_plain("-1"), Value::from(-1));
    }
}
