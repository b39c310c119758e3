//! Coercing a value to a key's kind, tolerant the way hand-written and PyYAML-written files need:
//! YAML-1.1 words for booleans (`yes`, `off`), numbers written as strings, a bare string for a list.

use serde_json::Value;

use super::schema::Kind;

fn bool_word(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "true" | "yes" | "y" | "on" | "1" => Some(true),
        "false" | "no" | "n" | "off" | "0" => Some(false),
        _ => None,
    }
}

fn as_int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A value that cannot be read as the kind a key wants; the caller knows the key and says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch;

/// The value as `kind` wants it, or `Err` when it cannot be read that way.
pub fn coerce(kind: &Kind, v: &Value) -> Result<Value, Mismatch> {
    match kind {
        Kind::Any => Ok(v.clone()),
        Kind::Bool => match v {
            Value::Bool(b) => Ok(Value::Bool(*b)),
            Value::String(s) => bool_word(s).map(Value::Bool).ok_or(Mismatch),
            Value::Number(n) if n.as_i64() == Some(0) || n.as_i64() == Some(1) => {
                Ok(Value::Bool(n.as_i64() == Some(1)))
            }
            _ => Err(Mismatch),
        },
        Kind::Int { min, max } => as_int(v)
            .filter(|i| i >= min && i <= max)
            .map(Value::from)
            .ok_or(Mismatch),
        Kind::IntChoice(values) => as_int(v)
            .filter(|i| values.contains(i))
            .map(Value::from)
            .ok_or(Mismatch),
        Kind::Float => match v {
            Value::Number(n) => n.as_f64().map(Value::from).ok_or(Mismatch),
            Value::String(s) => s
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite())
                .map(Value::from)
                .ok_or(Mismatch),
            _ => Err(Mismatch),
        },
        Kind::Str => match v {
            Value::String(s) => Ok(Value::String(s.clone())),
            Value::Number(n) => Ok(Value::String(n.to_string())),
            Value::Bool(b) => Ok(Value::String(b.to_string())),
            _ => Err(Mismatch),
        },
        Kind::Choice {
            values,
            ci,
            legacy_int,
        } => {
            let text = match v {
                Value::String(s) => s.clone(),
                // An unquoted YAML-1.1 `no` that reached us as a boolean.
                Value::Bool(false) => "no".into(),
                Value::Number(n) if *legacy_int => {
                    let i = n.as_u64().ok_or(Mismatch)? as usize;
                    return values
                        .get(i.wrapping_sub(1))
                        .map(|s| Value::from(*s))
                        .ok_or(Mismatch);
                }
                _ => return Err(Mismatch),
            };
            if *legacy_int {
                if let Ok(i) = text.parse::<usize>() {
                    return values
                        .get(i.wrapping_sub(1))
                        .map(|s| Value::from(*s))
                        .ok_or(Mismatch);
                }
            }
            values
                .iter()
                .find(|c| {
                    if *ci {
                        c.eq_ignore_ascii_case(&text)
                    } else {
                        **c == text
                    }
                })
                .map(|c| Value::from(*c))
                .ok_or(Mismatch)
        }
        Kind::BoolOrChoice(values) => match v {
            Value::Bool(b) => Ok(Value::Bool(*b)),
            Value::String(s) => match bool_word(s) {
                Some(b) => Ok(Value::Bool(b)),
                None => values
                    .iter()
                    .find(|c| c.eq_ignore_ascii_case(s))
                    .map(|c| Value::from(*c))
                    .ok_or(Mismatch),
            },
            _ => Err(Mismatch),
        },
        Kind::List => match v {
            Value::Array(items) => items
                .iter()
                .map(|i| coerce(&Kind::Str, i))
                .collect::<Result<Vec<_>, Mismatch>>()
                .map(Value::Array),
            Value::String(s) => Ok(Value::Array(vec![Value::String(s.clone())])),
            _ => Err(Mismatch),
        },
        Kind::Section(_) => match v {
            Value::Object(_) => Ok(v.clone()),
            _ => Err(Mismatch),
        },
    }
}

/// A command-line or environment string read as a YAML scalar would be (`[a, b]` as a list), so
/// `accel-config set commands '[a, b]'` does what a user expects. Non-strings pass through.
pub fn parse_scalar(v: &Value) -> Value {
    match v {
        Value::String(s) if s.trim_start().starts_with('[') => {
            serde_yaml_ng::from_str::<Value>(s).unwrap_or_else(|_| v.clone())
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coercions() {
        assert_eq!(
            coerce(&Kind::Bool, &Value::from("yes")),
            Ok(Value::Bool(true))
        );
        assert_eq!(coerce(&Kind::Bool, &Value::from("maybe")), Err(Mismatch));
        assert_eq!(
            coerce(&Kind::Int { min: 0, max: 10 }, &Value::from("8")),
            Ok(Value::from(8))
        );
        assert_eq!(
            coerce(&Kind::Int { min: 0, max: 10 }, &Value::from(11)),
            Err(Mismatch)
        );
        let mp = Kind::Choice {
            values: &["no", "fp16"],
            ci: true,
            legacy_int: false,
        };
        assert_eq!(coerce(&mp, &Value::from("FP16")), Ok(Value::from("fp16")));
        assert_eq!(coerce(&mp, &Value::Bool(false)), Ok(Value::from("no")));
        let legacy = Kind::Choice {
            values: &["FULL_SHARD", "SHARD_GRAD_OP"],
            ci: true,
            legacy_int: true,
        };
        assert_eq!(
            coerce(&legacy, &Value::from(2)),
            Ok(Value::from("SHARD_GRAD_OP"))
        );
        assert_eq!(coerce(&Kind::Str, &Value::from(0)), Ok(Value::from("0")));
        assert_eq!(
            coerce(&Kind::List, &Value::from("a")),
            Ok(serde_json::json!(["a"]))
        );
        assert_eq!(
            parse_scalar(&Value::from("[a, b]")),
            serde_json::json!(["a", "b"])
        );
    }
}
