//! FSDP1 → FSDP2 conversion of a config mapping, for `accel-config to-fsdp2`: the same keys renamed,
//! values mapped and FSDP1-only keys dropped as accelerate's `commands/to_fsdp2.py`
//! (`convert_config_to_fsdp2`, `ARGUMENT_KEY_MAPPING`, `ARGUMENT_VALUE_MAPPING`) does, so a file converted
//! here loads in accelerate with the values `accelerate to-fsdp2` would have written. Pure: the caller
//! reads, warns and writes.

use serde_json::{Map, Value};

/// What accelerate does with one `fsdp_config` key (`to_fsdp2.py::ARGUMENT_KEY_MAPPING`); a key not
/// listed is carried over unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// Kept, under this name.
    Rename(&'static str),
    /// `ConversionStatus.REMOVED`: FSDP2 has no such option.
    Removed,
    /// `ConversionStatus.NOT_YET_IMPLEMENTED`.
    NotYetImplemented,
}

const KEY_RULES: &[(&str, Rule)] = &[
    ("fsdp_version", Rule::Rename("fsdp_version")),
    (
        "fsdp_reshard_after_forward",
        Rule::Rename("fsdp_reshard_after_forward"),
    ),
    (
        "fsdp_auto_wrap_policy",
        Rule::Rename("fsdp_auto_wrap_policy"),
    ),
    ("fsdp_backward_prefetch", Rule::Removed),
    ("fsdp_forward_prefetch", Rule::NotYetImplemented),
    (
        "fsdp_cpu_ram_efficient_loading",
        Rule::Rename("fsdp_cpu_ram_efficient_loading"),
    ),
    ("fsdp_offload_params", Rule::Rename("fsdp_offload_params")),
    (
        "fsdp_sharding_strategy",
        Rule::Rename("fsdp_reshard_after_forward"),
    ),
    ("fsdp_state_dict_type", Rule::Rename("fsdp_state_dict_type")),
    ("fsdp_sync_module_states", Rule::Removed),
    (
        "fsdp_transformer_layer_cls_to_wrap",
        Rule::Rename("fsdp_transformer_layer_cls_to_wrap"),
    ),
    ("fsdp_min_num_params", Rule::Rename("fsdp_min_num_params")),
    ("fsdp_use_orig_params", Rule::Removed),
    (
        "fsdp_activation_checkpointing",
        Rule::Rename("fsdp_activation_checkpointing"),
    ),
];

/// `ARGUMENT_VALUE_MAPPING`: a sharding strategy name as FSDP2's `reshard_after_forward` bool, for both
/// the FSDP1 key and an FSDP1-style value already under the new name. Other values pass unchanged.
fn map_value(key: &str, value: &Value) -> Value {
    if !matches!(key, "fsdp_sharding_strategy" | "fsdp_reshard_after_forward") {
        return value.clone();
    }
    match value.as_str() {
        Some("FULL_SHARD" | "HYBRID_SHARD") => Value::Bool(true),
        Some("SHARD_GRAD_OP" | "HYBRID_SHARD_ZERO2" | "NO_SHARD") => Value::Bool(false),
        _ => value.clone(),
    }
}

/// Why a key of the FSDP1 section did not make it into the FSDP2 one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dropped {
    Removed(String),
    NotYetImplemented(String),
}

impl Dropped {
    pub fn key(&self) -> &str {
        match self {
            Dropped::Removed(k) | Dropped::NotYetImplemented(k) => k,
        }
    }
}

/// The outcome of converting one config mapping.
#[derive(Debug, Clone, PartialEq)]
pub enum Conversion {
    /// No `fsdp_config`, or an empty one: nothing to convert (accelerate writes the config unchanged).
    NoFsdpConfig,
    /// `fsdp_version` is already 2 (accelerate warns and writes the config unchanged).
    AlreadyFsdp2,
    Converted {
        map: Map<String, Value>,
        /// FSDP1 keys dropped, in file order.
        dropped: Vec<Dropped>,
        /// (old key, new key) of each key renamed, for an edit that keeps its line.
        renamed: Vec<(String, String)>,
    },
}

/// `fsdp_config` is there but not a mapping: accelerate crashes on it (`.get` of a non-dict).
#[derive(Debug, Clone, PartialEq)]
pub struct NotAMapping;

/// Python's `value == 2` for what YAML gives (`2`, `2.0`; not `"2"`, not `true`).
fn is_two(v: &Value) -> bool {
    v.as_f64() == Some(2.0) && v.is_number()
}

/// Python's truthiness of the `fsdp_config` value (`if not fsdp_config`).
fn is_falsy(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
    }
}

/// `convert_config_to_fsdp2`, key for key and value for value.
pub fn convert(config: &Map<String, Value>) -> Result<Conversion, NotAMapping> {
    let section = match config.get("fsdp_config") {
        None => return Ok(Conversion::NoFsdpConfig),
        Some(v) if is_falsy(v) => return Ok(Conversion::NoFsdpConfig),
        Some(Value::Object(m)) => m,
        Some(_) => return Err(NotAMapping),
    };
    if section.get("fsdp_version").is_some_and(is_two) {
        return Ok(Conversion::AlreadyFsdp2);
    }
    let mut out = Map::new();
    let mut dropped = Vec::new();
    let mut renamed = Vec::new();
    for (key, value) in section {
        let rule = KEY_RULES.iter().find(|(k, _)| k == key).map(|(_, r)| *r);
        match rule {
            None => {
                out.insert(key.clone(), value.clone());
            }
            Some(Rule::Removed) => dropped.push(Dropped::Removed(key.clone())),
            Some(Rule::NotYetImplemented) => dropped.push(Dropped::NotYetImplemented(key.clone())),
            Some(Rule::Rename(new)) => {
                if new != key {
                    renamed.push((key.clone(), new.to_string()));
                }
                // A later key of the same new name wins, as in accelerate's dict.
                out.insert(new.to_string(), map_value(key, value));
            }
        }
    }
    out.insert("fsdp_version".into(), Value::from(2));
    let mut map = config.clone();
    map.insert("fsdp_config".into(), Value::Object(out));
    Ok(Conversion::Converted {
        map,
        dropped,
        renamed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn fsdp1_keys_renamed_mapped_and_dropped() {
        let c = obj(json!({
            "distributed_type": "FSDP",
            "fsdp_config": {
                "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                "fsdp_backward_prefetch": "BACKWARD_PRE",
                "fsdp_forward_prefetch": false,
                "fsdp_sharding_strategy": "SHARD_GRAD_OP",
                "fsdp_sync_module_states": true,
                "fsdp_use_orig_params": true,
                "my_key": 3,
            },
            "num_processes": 2,
        }));
        let Conversion::Converted {
            map,
            dropped,
            renamed,
        } = convert(&c).unwrap()
        else {
            panic!()
        };
        assert_eq!(
            Value::Object(map),
            json!({
                "distributed_type": "FSDP",
                "fsdp_config": {
                    "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                    "fsdp_reshard_after_forward": false,
                    "my_key": 3,
                    "fsdp_version": 2,
                },
                "num_processes": 2,
            })
        );
        let keys: Vec<_> = dropped.iter().map(Dropped::key).collect();
        assert_eq!(
            keys,
            [
                "fsdp_backward_prefetch",
                "fsdp_forward_prefetch",
                "fsdp_sync_module_states",
                "fsdp_use_orig_params"
            ]
        );
        assert_eq!(
            renamed,
            [(
                "fsdp_sharding_strategy".to_string(),
                "fsdp_reshard_after_forward".to_string()
            )]
        );
    }

    #[test]
    fn version_two_empty_and_missing_sections_are_left_alone() {
        for c in [
            json!({"fsdp_config": {"fsdp_version": 2, "fsdp_sharding_strategy": "FULL_SHARD"}}),
            json!({"fsdp_config": {"fsdp_version": 2.0}}),
        ] {
            assert_eq!(convert(&obj(c)).unwrap(), Conversion::AlreadyFsdp2);
        }
        for c in [
            json!({"distributed_type": "NO"}),
            json!({"fsdp_config": {}}),
            json!({"fsdp_config": null}),
        ] {
            assert_eq!(convert(&obj(c)).unwrap(), Conversion::NoFsdpConfig);
        }
        // `"2"` is not 2 in Python: converted, and the version becomes the number.
        let Conversion::Converted { map, .. } =
            convert(&obj(json!({"fsdp_config": {"fsdp_version": "2"}}))).unwrap()
        else {
            panic!()
        };
        assert_eq!(map["fsdp_config"]["fsdp_version"], 2);
        assert_eq!(convert(&obj(json!({"fsdp_config": "x"}))), Err(NotAMapping));
    }

    #[test]
    fn sharding_strategy_values_as_accelerate_maps_them() {
        for (s, want) in [
            (json!("FULL_SHARD"), json!(true)),
            (json!("SHARD_GRAD_OP"), json!(false)),
            (json!("HYBRID_SHARD"), json!(true)),
            (json!("HYBRID_SHARD_ZERO2"), json!(false)),
            (json!("NO_SHARD"), json!(false)),
            (json!(1), json!(1)),
            (json!("full_shard"), json!("full_shard")),
        ] {
            let c = obj(json!({"fsdp_config": {"fsdp_reshard_after_forward": s.clone()}}));
            let Conversion::Converted { map, .. } = convert(&c).unwrap() else {
                panic!()
            };
            assert_eq!(
                map["fsdp_config"]["fsdp_reshard_after_forward"], want,
                "{s}"
            );
        }
    }
}
