//! accelerate's output, reproduced to the character: `convert_bytes` (Python `round(x, 2)` and float
//! repr), the per-dtype rows of `gather_data`/`estimate_training_usage`, and `create_ascii_table`
//! including its widening rule for long titles — users diff our table against theirs.

use super::tensors::{Bytes, MaximumSizes};

/// The dtypes of `--dtypes`, in accelerate's default order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TableDtype {
    Float32,
    Float16,
    Int8,
    Int4,
}

impl TableDtype {
    pub fn name(self) -> &'static str {
        match self {
            TableDtype::Float32 => "float32",
            TableDtype::Float16 => "float16",
            TableDtype::Int8 => "int8",
            TableDtype::Int4 => "int4",
        }
    }
    fn divisor(self) -> Option<f64> {
        match self {
            TableDtype::Float32 => None,
            TableDtype::Float16 => Some(2.0),
            TableDtype::Int8 => Some(4.0),
            TableDtype::Int4 => Some(8.0),
        }
    }
}

/// One row of the table, as numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Row {
    pub dtype: TableDtype,
    pub largest_layer: Bytes,
    pub total: Bytes,
    /// `None` for int8/int4, printed `N/A`.
    pub training_adam: Option<Bytes>,
}

/// `gather_data`: sizes per dtype. The Adam column comes from the fp32 total *T*: the max of model,
/// gradients, optimizer and step is 4T for float32 and 2T for float16.
pub fn rows(sizes: &MaximumSizes, dtypes: &[TableDtype]) -> Vec<Row> {
    dtypes
        .iter()
        .map(|&dtype| {
            let (largest_layer, total) = match dtype.divisor() {
                None => (sizes.largest_layer, sizes.total),
                Some(d) => (sizes.largest_layer.divided(d), sizes.total.divided(d)),
            };
            let training_adam = match dtype {
                TableDtype::Float32 => Some(sizes.total.times(4)),
                TableDtype::Float16 => Some(sizes.total.times(2)),
                TableDtype::Int8 | TableDtype::Int4 => None,
            };
            Row {
                dtype,
                largest_layer,
                total,
                training_adam,
            }
        })
        .collect()
}

/// accelerate's `convert_bytes`: divide by 1024 until below 1024, then `f"{round(size, 2)} {unit}"`.
pub fn convert_bytes(size: Bytes) -> String {
    let mut value = size.value;
    let mut is_float = size.is_float;
    for unit in ["bytes", "KB", "MB", "GB", "TB"] {
        if value < 1024.0 {
            return format!("{} {unit}", python_round2(value, is_float));
        }
        value /= 1024.0;
        is_float = true;
    }
    format!("{} PB", python_round2(value, true))
}

/// `repr(round(x, 2))`. Rust's `{:.2}` rounds the exact binary value half-to-even, as CPython's
/// `round` does; parsing it back and printing the shortest repr gives Python's `86.47`, `256.0`.
fn python_round2(value: f64, is_float: bool) -> String {
    if !is_float {
        return format!("{value:.0}");
    }
    let rounded: f64 = format!("{value:.2}").parse().unwrap_or(value);
    let mut text = format!("{rounded}");
    if !text.contains('.') && !text.contains("inf") && !text.contains("NaN") {
        text.push_str(".0");
    }
    text
}

/// Python's `str.center`: when the padding is odd the extra space goes left iff `pad & width & 1`.
fn center(text: &str, width: usize) -> String {
    let len = text.chars().count();
    if len >= width {
        return text.to_string();
    }
    let pad = width - len;
    let left = pad / 2 + (pad & width & 1);
    format!("{}{text}{}", " ".repeat(left), " ".repeat(pad - left))
}

/// Python's `"%{w}s" % s`: right-justify to at least `w`.
fn rjust(text: &str, width: usize) -> String {
    let len = text.chars().count();
    if len >= width {
        text.to_string()
    } else {
        format!("{}{text}", " ".repeat(width - len))
    }
}

/// The cells of `rows` as accelerate prints them.
pub fn cells(rows: &[Row]) -> Vec<Vec<String>> {
    rows.iter()
        .map(|r| {
            vec![
                r.dtype.name().to_string(),
                convert_bytes(r.largest_layer),
                convert_bytes(r.total),
                r.training_adam
                    .map(convert_bytes)
                    .unwrap_or_else(|| "N/A".into()),
            ]
        })
        .collect()
}

pub const HEADERS: [&str; 4] = [
    "dtype",
    "Largest Layer",
    "Total Size",
    "Training using Adam",
];

/// `create_ascii_table(headers, rows, title)`, transcribed with its quirks: when the title is longer
/// than the columns, the last column is widened by the difference twice over and the border rows
/// carry the difference once more.
pub fn ascii_table(headers: &[&str], rows: &[Vec<String>], title: &str) -> String {
    const SEP: &str = "│";
    const LINE: &str = "─";
    let len = |s: &str| s.chars().count();
    let mut widths: Vec<usize> = (0..headers.len())
        .map(|i| {
            rows.iter()
                .map(|r| len(&r[i]))
                .chain([len(headers[i])])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let formats = widths.clone();
    let make_row = |widths: &[usize], diff: usize, left: &str, middle: &str, right: &str| {
        let parts: Vec<String> = widths.iter().map(|&n| LINE.repeat(n)).collect();
        format!("{left}{}{}{right}", parts.join(middle), LINE.repeat(diff))
    };
    let mut diff = 0;
    let separator = make_row(&widths, diff, "├", "┼", "┤");
    if len(title) > widths.iter().sum() {
        diff = len(title).abs_diff(len(&separator));
        if let Some(last) = widths.last_mut() {
            *last += diff;
        }
    }
    let separator = make_row(&widths, diff, "├", "┼", "┤");
    let line = |cells: &[String]| {
        let parts: Vec<String> = cells
            .iter()
            .zip(&formats)
            .map(|(c, &w)| rjust(c, w))
            .collect();
        format!("{SEP}{}{SEP}", parts.join(SEP))
    };
    let mut table = String::new();
    table.push_str(&make_row(&widths, diff, "┌", LINE, "┐"));
    table.push('\n');
    table.push_str(&format!(
        "{SEP}{}{SEP}\n",
        center(title, len(&separator) - 2)
    ));
    table.push_str(&make_row(&widths, diff, "├", "┬", "┤"));
    table.push('\n');
    if let Some(last) = widths.last_mut() {
        *last += diff;
    }
    let centered = |cells: &[&str]| -> Vec<String> {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, &w)| center(c, w))
            .collect()
    };
    table.push_str(&line(&centered(headers)));
    table.push('\n');
    table.push_str(&separator);
    table.push('\n');
    for row in rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        table.push_str(&line(&centered(&cells)));
        table.push('\n');
    }
    let parts: Vec<String> = widths.iter().map(|&n| LINE.repeat(n)).collect();
    table.push_str(&format!("└{}┘", parts.join("┴")));
    table
}

/// A table in the same style for accel's own output, without accelerate's widening quirk: a long
/// title widens the last column just enough.
pub fn box_table(headers: &[&str], rows: &[Vec<String>], title: &str) -> String {
    let len = |s: &str| s.chars().count();
    let mut widths: Vec<usize> = (0..headers.len())
        .map(|i| {
            rows.iter()
                .map(|r| len(&r[i]) + 2)
                .chain([len(headers[i]) + 2])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let inner = |w: &[usize]| w.iter().sum::<usize>() + w.len().saturating_sub(1);
    let short = (len(title) + 2).saturating_sub(inner(&widths));
    if let Some(last) = widths.last_mut() {
        *last += short;
    }
    let rule = |left: &str, middle: &str, right: &str| {
        let parts: Vec<String> = widths.iter().map(|&n| "─".repeat(n)).collect();
        format!("{left}{}{right}\n", parts.join(middle))
    };
    let line = |cells: &[&str]| {
        let parts: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, &w)| center(c, w))
            .collect();
        format!("│{}│\n", parts.join("│"))
    };
    let mut table = rule("┌", "─", "┐");
    table.push_str(&format!("│{}│\n", center(title, inner(&widths))));
    table.push_str(&rule("├", "┬", "┤"));
    table.push_str(&line(headers));
    table.push_str(&rule("├", "┼", "┤"));
    for row in rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        table.push_str(&line(&cells));
    }
    table.push_str(&rule("└", "┴", "┘"));
    table
}

/// The whole default output of `accelerate estimate-memory <name>` (without its trailing newline).
pub fn render(model_name: &str, sizes: &MaximumSizes, dtypes: &[TableDtype]) -> String {
    let title = format!("Memory Usage for loading `{model_name}`");
    ascii_table(&HEADERS, &cells(&rows(sizes, dtypes)), &title)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn convert_bytes_matches_python() {
        assert_eq!(convert_bytes(Bytes::int(512)), "512 bytes");
        assert_eq!(convert_bytes(Bytes::int(512).divided(1.0)), "512.0 bytes");
        assert_eq!(convert_bytes(Bytes::int(1024)), "1.0 KB");
        assert_eq!(convert_bytes(Bytes::int(90_669_056)), "86.47 MB");
        assert_eq!(convert_bytes(Bytes::int(268_435_456)), "256.0 MB");
        assert_eq!(convert_bytes(Bytes::int(433_249_280 * 4)), "1.61 GB");
        // 0.125 KB: an exact tie, rounded half to even like CPython.
        assert_eq!(convert_bytes(Bytes::int(1024 + 128)), "1.12 KB");
        assert_eq!(convert_bytes(Bytes::int(1 << 60)), "1024.0 PB");
    }

    #[test]
    fn center_matches_python() {
        // "ab".center(5) == "  ab " ; "abc".center(6) == " abc  " ; "a".center(4) == " a  "
        assert_eq!(center("ab", 5), "  ab ");
        assert_eq!(center("abc", 6), " abc  ");
        assert_eq!(center("a", 4), " a  ");
        assert_eq!(center("ab", 7), "   ab  ");
    }

    #[test]
    fn bert_base_cased_reference_table() {
        let sizes = MaximumSizes {
            total: Bytes::int(433_249_280),
            largest_layer: Bytes::int(90_669_056),
        };
        let cells = cells(&rows(
            &sizes,
            &[
                TableDtype::Float32,
                TableDtype::Float16,
                TableDtype::Int8,
                TableDtype::Int4,
            ],
        ));
        assert_eq!(cells[0], ["float32", "86.47 MB", "413.18 MB", "1.61 GB"]);
        assert_eq!(cells[1], ["float16", "43.23 MB", "206.59 MB", "826.36 MB"]);
        assert_eq!(cells[2], ["int8", "21.62 MB", "103.29 MB", "N/A"]);
        assert_eq!(cells[3], ["int4", "10.81 MB", "51.65 MB", "N/A"]);
    }
}
