//! YAML merge keys (`<<: *base`), resolved as accelerate reads them. accelerate loads a config with
//! PyYAML's `safe_load`, whose `SafeConstructor.flatten_mapping` (yaml/constructor.py, PyYAML 6.0.4)
//! replaces each `<<` of a mapping by the pairs of the mapping (or of each mapping of the list) it
//! names, themselves flattened first, all placed before the mapping's own pairs; the dict built from
//! them keeps each key where it first appears and the value it last gets. So the mapping's own keys win
//! over merged ones, wherever the `<<` stands, and among merged mappings the later one wins (the
//! `id()` de-duplication there only fires for keys Python caches as one object: one-character names,
//! or a mapping merged twice). A scalar after `<<` is an error there, and here.
//!
//! serde_yaml_ng reads `<<` as an ordinary key (and refuses two in one mapping), and its
//! `apply_merge` lets the first merged value win, so mappings are read here as their pairs in file
//! order ([`Node`]) and flattened by PyYAML's rule. A quoted `"<<"` is an ordinary key to PyYAML but
//! reads the same as `<<` through serde, so [`scan`] tells them apart by the text.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// A YAML node with every mapping pair kept, in file order (aliases already replayed by the parser).
#[derive(Debug, Clone)]
pub enum Node {
    Null,
    Bool(bool),
    I64(i64),
    U64(u64),
    F64(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Node, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a YAML node")
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }
    fn visit_bool<E>(self, b: bool) -> Result<Node, E> {
        Ok(Node::Bool(b))
    }
    fn visit_i64<E>(self, i: i64) -> Result<Node, E> {
        Ok(Node::I64(i))
    }
    fn visit_u64<E>(self, u: u64) -> Result<Node, E> {
        Ok(Node::U64(u))
    }
    fn visit_f64<E>(self, f: f64) -> Result<Node, E> {
        Ok(Node::F64(f))
    }
    fn visit_str<E>(self, s: &str) -> Result<Node, E> {
        Ok(Node::Str(s.to_string()))
    }
    fn visit_string<E>(self, s: String) -> Result<Node, E> {
        Ok(Node::Str(s))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut out = Vec::new();
        while let Some(n) = seq.next_element()? {
            out.push(n);
        }
        Ok(Node::Seq(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut out = Vec::new();
        while let Some(pair) = map.next_entry()? {
            out.push(pair);
        }
        Ok(Node::Map(out))
    }
    // A tagged node (`!Tag value`): its value, as `file::yaml_to_json` reads one.
    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<Node, A::Error> {
        use de::VariantAccess;
        let (_tag, contents): (String, _) = data.variant()?;
        contents.newtype_variant()
    }
}

/// Where `<<` stands as a key in the text: plain (a merge key), quoted (an ordinary key).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Scan {
    pub plain: bool,
    pub quoted: bool,
}

/// Whether `line` holds a plain `<<` key: at the start of the line (after indentation or a list
/// item's `- `), or after `{` or `,` in flow style, followed by `:`.
pub fn plain_merge_key(line: &str) -> bool {
    let mut from = 0;
    while let Some(i) = line[from..].find("<<") {
        let at = from + i;
        let before = line[..at].trim_end_matches(' ');
        let after = line[at + 2..].trim_start_matches(' ');
        let opens = before.is_empty()
            || before.ends_with(['{', ',', '?'])
            || before.trim_start_matches([' ', '-']).is_empty();
        if opens && after.starts_with(':') {
            return true;
        }
        from = at + 2;
    }
    false
}

/// The `<<` keys of a YAML text, plain and quoted (comments are not told apart: a commented-out
/// merge key only costs the slower reading).
pub fn scan(text: &str) -> Scan {
    let mut s = Scan::default();
    for line in text.lines() {
        s.plain |= plain_merge_key(line);
        s.quoted |= ["'<<'", "\"<<\""].iter().any(|q| {
            line.match_indices(q)
                .any(|(i, _)| line[i + q.len()..].trim_start().starts_with(':'))
        });
    }
    s
}

/// `node` as the JSON value accelerate reads, every merge key resolved.
pub fn resolve(node: Node) -> Result<Value, String> {
    Ok(match node {
        Node::Null => Value::Null,
        Node::Bool(b) => Value::Bool(b),
        Node::I64(i) => Value::from(i),
        Node::U64(u) => Value::from(u),
        Node::F64(f) => serde_json::Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| format!("unsupported number {f}"))?,
        Node::Str(s) => Value::String(s),
        Node::Seq(items) => Value::Array(items.into_iter().map(resolve).collect::<Result<_, _>>()?),
        Node::Map(pairs) => {
            let mut out = Map::new();
            for (k, v) in flatten(pairs)? {
                out.insert(key(k)?, resolve(v)?);
            }
            Value::Object(out)
        }
    })
}

fn is_merge(k: &Node) -> bool {
    matches!(k, Node::Str(s) if s == "<<")
}

/// PyYAML's `flatten_mapping`: the merged pairs (each merged mapping flattened first), in order,
/// then the mapping's own pairs; inserting them in that order gives the dict PyYAML builds.
fn flatten(pairs: Vec<(Node, Node)>) -> Result<Vec<(Node, Node)>, String> {
    let mut merged = Vec::new();
    let mut own = Vec::new();
    for (k, v) in pairs {
        if !is_merge(&k) {
            own.push((k, v));
            continue;
        }
        match v {
            Node::Map(inner) => merged.extend(flatten(inner)?),
            Node::Seq(items) => {
                for item in items {
                    match item {
                        Node::Map(inner) => merged.extend(flatten(inner)?),
                        other => {
                            return Err(format!(
                                "expected a mapping for merging (`<<`), but found {}",
                                kind(&other)
                            ))
                        }
                    }
                }
            }
            other => {
                return Err(format!(
                    "expected a mapping or list of mappings for merging (`<<`), but found {}",
                    kind(&other)
                ))
            }
        }
    }
    merged.extend(own);
    Ok(merged)
}

fn kind(n: &Node) -> &'static str {
    match n {
        Node::Seq(_) => "a sequence",
        Node::Map(_) => "a mapping",
        _ => "a scalar",
    }
}

fn key(k: Node) -> Result<String, String> {
    Ok(match k {
        Node::Str(s) => s,
        Node::Bool(b) => b.to_string(),
        Node::I64(i) => i.to_string(),
        Node::U64(u) => u.to_string(),
        Node::F64(f) => f.to_string(),
        other => return Err(format!("unsupported mapping key {other:?}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Value, String> {
        let node: Node = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
        resolve(node)
    }

    /// Each expectation is what PyYAML 6.0.4's `safe_load` returns for the text.
    #[test]
    fn merges_resolve_as_pyyaml_resolves_them() {
        let v = read(
            "a: &a {k1: 1, k2: 1}\nb: &b {k3: 2, k1: 2}\nm:\n  k0: 0\n  <<: [*a, *b]\n  k4: 4\n",
        )
        .unwrap();
        assert_eq!(
            serde_json::to_string(&v["m"]).unwrap(),
            r#"{"k1":2,"k2":1,"k3":2,"k0":0,"k4":4}"#
        );
        let v = read("a: &a {sharding: FULL}\nb: &b {sharding: GRAD}\nm:\n  <<: *a\n  <<: *b\n")
            .unwrap();
        assert_eq!(v["m"]["sharding"], "GRAD");
        let v = read("a: &a {x: 1}\nm:\n  x: 5\n  <<: *a\n").unwrap();
        assert_eq!(v["m"]["x"], 5);
        let v = read("a: &a {x: 1}\nb: &b {<<: *a, y: 2}\nm:\n  <<: *b\n").unwrap();
        assert_eq!(v["m"], serde_json::json!({"x": 1, "y": 2}));
        let v = read("a: &a {x: {p: 1}}\nm:\n  <<: *a\n  x: {q: 2}\n").unwrap();
        assert_eq!(v["m"], serde_json::json!({"x": {"q": 2}}));
        assert!(read("m:\n  <<: 3\n")
            .unwrap_err()
            .contains("found a scalar"));
        assert!(read("m:\n  <<: [1]\n")
            .unwrap_err()
            .contains("found a scalar"));
    }

    #[test]
    fn scan_tells_plain_from_quoted() {
        assert_eq!(
            scan("m:\n  <<: *a\n"),
            Scan {
                plain: true,
                quoted: false
            }
        );
        assert_eq!(
            scan("m: {x: 1, <<: *a}\n- <<: *b\n"),
            Scan {
                plain: true,
                quoted: false
            }
        );
        assert_eq!(
            scan("m:\n  '<<': 1\n  \"<<\" : 2\n"),
            Scan {
                plain: false,
                quoted: true
            }
        );
        assert_eq!(scan("cmd: a << b\n# x\n"), Scan::default());
    }
}
