//! Rewriting a config file with some keys changed while the rest stays as the user wrote it: `set` and
//! `update` change a few values in files people keep comments in, so the untouched lines of a YAML file
//! (comments, key order, quoting, blank lines) and of a TOML file (through `toml_edit`) are kept byte for
//! byte, and JSON keeps its key order. Each edit is checked by parsing the result: when it does not read
//! back as the intended mapping (a layout this editor does not understand, such as flow style or
//! anchors), the file is written whole in accel's layout instead, and the caller says so. A section
//! holding a merge key (`<<: *anchor`) that changes is written whole from its resolved values, and the
//! caller says that too.

use std::fmt;

use serde_json::{Map, Value};

use super::file::{self, Document, Format};
use super::merge;

/// One difference between the file as written and the mapping to write, for the warnings of `update`.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// Dotted key (`fsdp_config.fsdp_sharding_strategy`).
    pub key: String,
    pub old: Option<Value>,
    pub new: Option<Value>,
}

fn short(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.old, &self.new) {
            (Some(o), Some(n)) => write!(f, "`{}`: `{}` → `{}`", self.key, short(o), short(n)),
            (None, Some(n)) => write!(f, "added `{}: {}`", self.key, short(n)),
            (Some(o), None) => write!(f, "removed `{}` (was `{}`)", self.key, short(o)),
            (None, None) => write!(f, "`{}` unchanged", self.key),
        }
    }
}

/// Every changed key, one level into sections that are mappings on both sides, in file order then
/// new keys.
pub fn changes(old: &Map<String, Value>, new: &Map<String, Value>) -> Vec<Change> {
    let mut out = Vec::new();
    diff(old, new, "", &mut out, true);
    out
}

fn diff(
    old: &Map<String, Value>,
    new: &Map<String, Value>,
    prefix: &str,
    out: &mut Vec<Change>,
    descend: bool,
) {
    for (k, o) in old {
        let key = format!("{prefix}{k}");
        match new.get(k) {
            None => out.push(Change {
                key,
                old: Some(o.clone()),
                new: None,
            }),
            Some(n) if n == o => {}
            Some(Value::Object(n)) if descend => match o {
                Value::Object(o) => diff(o, n, &format!("{key}."), out, false),
                _ => out.push(Change {
                    key,
                    old: Some(o.clone()),
                    new: Some(Value::Object(n.clone())),
                }),
            },
            Some(n) => out.push(Change {
                key,
                old: Some(o.clone()),
                new: Some(n.clone()),
            }),
        }
    }
    for (k, n) in new {
        if !old.contains_key(k) {
            out.push(Change {
                key: format!("{prefix}{k}"),
                old: None,
                new: Some(n.clone()),
            });
        }
    }
}

/// The new text of `doc` holding `new`, and whether the file's own layout could be kept.
pub struct Edited {
    pub text: String,
    pub layout_kept: bool,
    /// The top-level sections holding a merge key (`<<: *anchor`) that changed: each was written
    /// whole from its resolved values, merge keys and aliases expanded (the keys a `<<` line brings
    /// have no line of their own to edit).
    pub merges_expanded: Vec<String>,
}

/// Writes `new` over `doc`, keeping what did not change (see the module header).
pub fn edit(doc: &Document, new: &Map<String, Value>) -> Result<Edited, String> {
    edit_renaming(doc, new, &[])
}

/// A key of a section renamed: `(section, old key, new key)`. In YAML the new key takes the old one's
/// line (and its trailing comment) instead of being appended at the section's end.
pub type Rename = (String, String, String);

/// [`edit`], with keys of sections renamed in place.
pub fn edit_renaming(
    doc: &Document,
    new: &Map<String, Value>,
    renames: &[Rename],
) -> Result<Edited, String> {
    let text = doc.text_lf();
    let attempt = match doc.format {
        Format::Yaml if text.trim_start().starts_with('{') => Some((json_text(new)?, Vec::new())),
        Format::Json => Some((json_text(new)?, Vec::new())),
        Format::Yaml => edit_yaml(&text, &doc.map, new, renames),
        Format::Toml => edit_toml(&text, &doc.map, new).map(|t| (t, Vec::new())),
    };
    if let Some((text, merges_expanded)) = attempt {
        let reads_back = Document::parse(&doc.path, text.clone())
            .map(|d| Value::Object(d.map) == Value::Object(new.clone()))
            .unwrap_or(false);
        if reads_back {
            return Ok(Edited {
                text: doc.in_file_style(&text),
                layout_kept: true,
                merges_expanded,
            });
        }
    }
    Ok(Edited {
        text: doc.in_file_style(&file::render(new, doc.format)?),
        layout_kept: false,
        merges_expanded: Vec::new(),
    })
}

/// JSON as accelerate's `to_json_file` indents it, keys in the file's order.
fn json_text(new: &Map<String, Value>) -> Result<String, String> {
    serde_json::to_string_pretty(new)
        .map(|s| s + "\n")
        .map_err(|e| e.to_string())
}

/// One `key: value` entry of a block mapping: its key and the lines it spans (the key's line and its
/// more-indented continuation; comments and blank lines after it are not part of it).
#[derive(Debug)]
struct Entry {
    key: String,
    start: usize,
    end: usize,
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

fn is_blank_or_comment(line: &str) -> bool {
    let t = line.trim();
    t.is_empty() || t.starts_with('#')
}

/// The key of a `key: value` line (after its indentation), plain or quoted, and the rest after `:`.
fn split_key(t: &str) -> Option<(String, &str)> {
    let t = t.trim_end_matches(['\n', '\r']);
    if let Some(q) = t.chars().next().filter(|c| *c == '"' || *c == '\'') {
        let close = t[1..].find(q)? + 1;
        let rest = t[close + 1..].trim_start_matches(' ');
        let rest = rest.strip_prefix(':')?;
        if !(rest.is_empty() || rest.starts_with(' ')) {
            return None;
        }
        return Some((t[1..close].to_string(), rest));
    }
    if t.starts_with(['?', '{', '[', '&', '*', '!', '-', '|', '>', '%', '@', '`']) {
        return None;
    }
    let mut at = None;
    for (i, c) in t.char_indices() {
        if c == ':' && (t[i + 1..].is_empty() || t[i + 1..].starts_with(' ')) {
            at = Some(i);
            break;
        }
        if c == '#' && i > 0 && t[..i].ends_with(' ') {
            return None;
        }
    }
    let at = at?;
    Some((t[..at].trim_end().to_string(), &t[at + 1..]))
}

/// The entries of the block mapping at `indent` in `lines[from..to]`, or `None` when the text is not
/// a plain block mapping there.
fn entries(lines: &[String], from: usize, to: usize, indent: usize) -> Option<Vec<Entry>> {
    let mut out: Vec<Entry> = Vec::new();
    for (i, line) in lines.iter().enumerate().take(to).skip(from) {
        if is_blank_or_comment(line) {
            continue;
        }
        let t = line.trim_end_matches(['\n', '\r']);
        if indent == 0 && (t == "---" || t.starts_with("--- ") || t == "...") {
            if out.is_empty() || t == "..." {
                continue;
            }
            return None;
        }
        let ind = indent_of(line);
        let body = &line[ind..];
        let list_item = body.starts_with("- ") || body.trim_end() == "-";
        if ind > indent || (ind == indent && list_item && !out.is_empty()) {
            out.last_mut()?.end = i + 1;
            continue;
        }
        if ind < indent {
            return None;
        }
        let (key, _) = split_key(body)?;
        out.push(Entry {
            key,
            start: i,
            end: i + 1,
        });
    }
    Some(out)
}

fn keys_match(found: &[Entry], map: &Map<String, Value>) -> bool {
    found.len() == map.len() && found.iter().zip(map.keys()).all(|(e, k)| &e.key == k)
}

/// `key: value` as accel writes it (YAML PyYAML reads alike), indented, each line ending in a newline.
pub fn render_entry(key: &str, value: &Value, indent: usize) -> Option<Vec<String>> {
    let mut m = Map::new();
    m.insert(key.to_string(), value.clone());
    let text = file::render(&m, Format::Yaml).ok()?;
    Some(
        text.lines()
            .map(|l| format!("{}{l}\n", " ".repeat(indent)))
            .collect(),
    )
}

/// A one-line `key: value  # comment` keeps its comment when the value changes.
fn with_comment(old_line: &str, mut new: Vec<String>) -> Vec<String> {
    if new.len() != 1 {
        return new;
    }
    let body = old_line.trim_end_matches(['\n', '\r']);
    let Some((_, rest)) = split_key(body.trim_start()) else {
        return new;
    };
    let Some(hash) = rest.find(" #") else {
        return new;
    };
    let before = &rest[..hash];
    // Only a comment when the text before it is a whole scalar (not `'a #b'` cut in two).
    if serde_yaml_ng::from_str::<serde_yaml_ng::Value>(before.trim()).is_err() {
        return new;
    }
    let spaces = before.len() - before.trim_end().len();
    let line = new[0].trim_end_matches('\n').to_string();
    new[0] = format!("{line}{}{}\n", " ".repeat(spaces), &rest[hash..]);
    new
}

/// Replacements of line ranges and insertions before a line, applied at the end.
#[derive(Default)]
struct Plan {
    /// (start, end, new lines); `start == end` inserts before `start`.
    ops: Vec<(usize, usize, Vec<String>)>,
}

impl Plan {
    fn apply(mut self, lines: &[String]) -> String {
        self.ops.sort_by_key(|(s, e, _)| (*s, *e));
        let mut out = String::new();
        let mut at = 0;
        for (start, end, new) in self.ops {
            for l in &lines[at..start.max(at)] {
                out.push_str(l);
            }
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            for l in new {
                out.push_str(&l);
            }
            at = end.max(at);
        }
        for l in &lines[at..] {
            out.push_str(l);
        }
        out
    }
}

fn edit_yaml(
    text: &str,
    old: &Map<String, Value>,
    new: &Map<String, Value>,
    renames: &[Rename],
) -> Option<(String, Vec<String>)> {
    let lines: Vec<String> = text.split_inclusive('\n').map(str::to_string).collect();
    let top = entries(&lines, 0, lines.len(), 0)?;
    if !keys_match(&top, old) {
        return None;
    }
    let mut plan = Plan::default();
    let mut merges_expanded = Vec::new();
    for entry in &top {
        let o = &old[&entry.key];
        let holds_merge = lines[entry.start..entry.end]
            .iter()
            .any(|l| merge::plain_merge_key(l));
        match new.get(&entry.key) {
            None => plan.ops.push((entry.start, entry.end, Vec::new())),
            Some(n) if n == o => {}
            Some(n) if holds_merge => {
                plan.ops
                    .push((entry.start, entry.end, render_entry(&entry.key, n, 0)?));
                merges_expanded.push(entry.key.clone());
            }
            Some(Value::Object(n)) if o.is_object() && entry.end > entry.start + 1 => {
                let Value::Object(o) = o else { return None };
                let renames: Vec<(&str, &str)> = renames
                    .iter()
                    .filter(|(s, _, _)| s == &entry.key)
                    .map(|(_, from, to)| (from.as_str(), to.as_str()))
                    .collect();
                edit_section(&lines, entry, o, n, &renames, &mut plan)?;
            }
            Some(n) => {
                let rendered = render_entry(&entry.key, n, 0)?;
                let rendered = if entry.end == entry.start + 1 {
                    with_comment(&lines[entry.start], rendered)
                } else {
                    rendered
                };
                plan.ops.push((entry.start, entry.end, rendered));
            }
        }
    }
    let mut added = Vec::new();
    for (k, n) in new {
        if !old.contains_key(k) {
            added.extend(render_entry(k, n, 0)?);
        }
    }
    if !added.is_empty() {
        plan.ops.push((lines.len(), lines.len(), added));
    }
    Some((plan.apply(&lines), merges_expanded))
}

fn edit_section(
    lines: &[String],
    entry: &Entry,
    old: &Map<String, Value>,
    new: &Map<String, Value>,
    renames: &[(&str, &str)],
    plan: &mut Plan,
) -> Option<()> {
    // The section's own line must end at its colon (a block mapping follows).
    let (_, rest) = split_key(lines[entry.start].trim_start())?;
    if !is_blank_or_comment(rest) {
        return None;
    }
    let first = (entry.start + 1..entry.end).find(|&i| !is_blank_or_comment(&lines[i]))?;
    let indent = indent_of(&lines[first]);
    let inner = entries(lines, entry.start + 1, entry.end, indent)?;
    if !keys_match(&inner, old) {
        return None;
    }
    let mut placed: Vec<&str> = Vec::new();
    for e in &inner {
        let o = &old[&e.key];
        let renamed_to = renames
            .iter()
            .find(|(from, to)| {
                *from == e.key
                    && new.contains_key(*to)
                    && !old.contains_key(*to)
                    && !placed.contains(to)
            })
            .map(|(_, to)| *to);
        match new.get(&e.key) {
            None => match renamed_to {
                Some(to) => {
                    placed.push(to);
                    let rendered = render_entry(to, &new[to], indent)?;
                    let rendered = if e.end == e.start + 1 {
                        with_comment(&lines[e.start], rendered)
                    } else {
                        rendered
                    };
                    plan.ops.push((e.start, e.end, rendered));
                }
                None => plan.ops.push((e.start, e.end, Vec::new())),
            },
            Some(n) if n == o => {}
            Some(n) => {
                let rendered = render_entry(&e.key, n, indent)?;
                let rendered = if e.end == e.start + 1 {
                    with_comment(&lines[e.start], rendered)
                } else {
                    rendered
                };
                plan.ops.push((e.start, e.end, rendered));
            }
        }
    }
    let mut added = Vec::new();
    for (k, n) in new {
        if !old.contains_key(k) && !placed.contains(&k.as_str()) {
            added.extend(render_entry(k, n, indent)?);
        }
    }
    if !added.is_empty() {
        let after = inner.last().map(|e| e.end).unwrap_or(entry.end);
        plan.ops.push((after, after, added));
    }
    Some(())
}

fn toml_value(v: &Value) -> Option<toml_edit::Value> {
    Some(match v {
        Value::Null => return None,
        Value::Bool(b) => (*b).into(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.into(),
            None => n.as_f64()?.into(),
        },
        Value::String(s) => s.as_str().into(),
        Value::Array(a) => {
            let mut arr = toml_edit::Array::new();
            for item in a {
                arr.push(toml_value(item)?);
            }
            arr.into()
        }
        Value::Object(m) => {
            let mut t = toml_edit::InlineTable::new();
            for (k, v) in m {
                if let Some(v) = toml_value(v) {
                    t.insert(k, v);
                }
            }
            t.into()
        }
    })
}

fn toml_item(v: &Value) -> Option<toml_edit::Item> {
    match v {
        Value::Object(m) => {
            let mut t = toml_edit::Table::new();
            for (k, v) in m {
                if let Some(v) = toml_value(v) {
                    t.insert(k, toml_edit::Item::Value(v));
                }
            }
            Some(toml_edit::Item::Table(t))
        }
        other => toml_value(other).map(toml_edit::Item::Value),
    }
}

/// Sets `key` in `table`; an existing scalar keeps its key's comments and its own trailing comment.
fn toml_set(table: &mut dyn toml_edit::TableLike, key: &str, item: Option<toml_edit::Item>) {
    let Some(item) = item else {
        table.remove(key);
        return;
    };
    if let (Some(existing), toml_edit::Item::Value(new)) = (
        table.get_mut(key).and_then(toml_edit::Item::as_value_mut),
        &item,
    ) {
        let decor = existing.decor().clone();
        *existing = new.clone();
        *existing.decor_mut() = decor;
        return;
    }
    table.insert(key, item);
}

fn edit_toml(text: &str, old: &Map<String, Value>, new: &Map<String, Value>) -> Option<String> {
    let mut doc: toml_edit::DocumentMut = text.parse().ok()?;
    for change in changes(old, new) {
        match change.key.split_once('.') {
            Some((section, inner)) if old.get(section).is_some_and(Value::is_object) => {
                let table = doc.get_mut(section)?.as_table_like_mut()?;
                let item = change
                    .new
                    .as_ref()
                    .and_then(toml_value)
                    .map(toml_edit::Item::Value);
                toml_set(table, inner, item);
            }
            _ => toml_set(
                doc.as_table_mut(),
                &change.key,
                change.new.as_ref().and_then(toml_item),
            ),
        }
    }
    Some(doc.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn doc(name: &str, text: &str) -> Document {
        Document::parse(Path::new(name), text.into()).unwrap()
    }

    fn with(doc: &Document, f: impl FnOnce(&mut Map<String, Value>)) -> Map<String, Value> {
        let mut m = doc.map.clone();
        f(&mut m);
        m
    }

    #[test]
    fn yaml_keeps_comments_order_and_untouched_lines() {
        let text = "# my cluster\nnum_processes: 2   # two ranks\ndistributed_type: MULTI_GPU\n\n# FSDP below\nfsdp_config:\n    # v2 please\n    fsdp_version: 1\n    fsdp_sharding_strategy: 1\ncommands:\n- a\n- b\nmy_key: 'kept'\n";
        let d = doc("c.yaml", text);
        let new = with(&d, |m| {
            m.insert("num_processes".into(), Value::from(4));
            m["fsdp_config"]["fsdp_sharding_strategy"] = Value::from("FULL_SHARD");
            m["fsdp_config"]
                .as_object_mut()
                .unwrap()
                .insert("fsdp_offload_params".into(), Value::Bool(false));
            m.remove("commands");
            m.insert("mixed_precision".into(), Value::from("no"));
        });
        let e = edit(&d, &new).unwrap();
        assert!(e.layout_kept);
        assert_eq!(
            e.text,
            "# my cluster\nnum_processes: 4   # two ranks\ndistributed_type: MULTI_GPU\n\n# FSDP below\nfsdp_config:\n    # v2 please\n    fsdp_version: 1\n    fsdp_sharding_strategy: FULL_SHARD\n    fsdp_offload_params: false\nmy_key: 'kept'\nmixed_precision: 'no'\n"
        );
    }

    #[test]
    fn flow_style_falls_back_to_a_full_render() {
        let d = doc("c.yaml", "{distributed_type: NO, x: [1,\n 2]}\n");
        let new = with(&d, |m| {
            m.insert("num_processes".into(), Value::from(2));
        });
        let e = edit(&d, &new).unwrap();
        let back = Document::parse(Path::new("c.yaml"), e.text).unwrap();
        assert_eq!(back.map, new);
    }

    #[test]
    fn toml_keeps_comments_and_json_keeps_order() {
        let d = doc(
            "c.toml",
            "# top\nnum_processes = 2 # two\ndistributed_type = \"FSDP\"\n\n[fsdp_config]\n# inner\nfsdp_version = 1\n",
        );
        let new = with(&d, |m| {
            m["fsdp_config"]["fsdp_version"] = Value::from(2);
        });
        let e = edit(&d, &new).unwrap();
        assert!(e.layout_kept);
        assert_eq!(
            e.text,
            "# top\nnum_processes = 2 # two\ndistributed_type = \"FSDP\"\n\n[fsdp_config]\n# inner\nfsdp_version = 2\n"
        );
        let d = doc("c.json", "{\"z\": 1, \"a\": 2}");
        let new = with(&d, |m| {
            m.insert("z".into(), Value::from(3));
        });
        assert_eq!(
            edit(&d, &new).unwrap().text,
            "{\n  \"z\": 3,\n  \"a\": 2\n}\n"
        );
    }

    #[test]
    fn crlf_and_a_byte_order_mark_are_kept() {
        let text = "\u{feff}# mine\r\nnum_processes: 2   # two\r\nuse_cpu: true\r\n";
        let d = doc("c.yaml", text);
        assert_eq!(d.map["num_processes"], 2);
        let e = edit(
            &d,
            &with(&d, |m| {
                m.insert("num_processes".into(), Value::from(4));
            }),
        )
        .unwrap();
        assert!(e.layout_kept);
        assert_eq!(
            e.text,
            "\u{feff}# mine\r\nnum_processes: 4   # two\r\nuse_cpu: true\r\n"
        );
        let lf = doc("c.yaml", "num_processes: 2\nuse_cpu: true\n");
        let e = edit(
            &lf,
            &with(&lf, |m| {
                m.insert("mixed_precision".into(), Value::from("bf16"));
            }),
        )
        .unwrap();
        assert!(
            !e.text.contains('\r') && !e.text.starts_with('\u{feff}'),
            "{:?}",
            e.text
        );
    }

    #[test]
    fn changes_name_each_key() {
        let d = doc(
            "c.yaml",
            "fp16: true\nfsdp_config:\n  fsdp_sharding_strategy: 1\n",
        );
        let new = with(&d, |m| {
            m.remove("fp16");
            m["fsdp_config"]["fsdp_sharding_strategy"] = Value::from("FULL_SHARD");
            m.insert("mixed_precision".into(), Value::from("fp16"));
        });
        let all: Vec<String> = changes(&d.map, &new)
            .iter()
            .map(|c| c.to_string())
            .collect();
        assert_eq!(
            all,
            [
                "removed `fp16` (was `true`)",
                "`fsdp_config.fsdp_sharding_strategy`: `1` → `FULL_SHARD`",
                "added `mixed_precision: fp16`",
            ]
        );
    }
}
