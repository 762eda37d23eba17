//! Text output: kubectl-style ages and durations, aligned tables with optional colour, and
//! JSON or YAML for scripts.

use crate::view::terminal::terminal_safe;
use serde::Serialize;
use std::borrow::Cow;

/// How a command prints its result (`-o`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Human-readable text (the default).
    Table,
    /// JSON, for scripts (`jq`).
    Json,
    /// YAML, for scripts and reading.
    Yaml,
}

/// Serializes a value as JSON (pretty) or YAML; `None` for [`Output::Table`].
pub fn structured<T: Serialize>(value: &T, output: Output) -> anyhow::Result<Option<String>> {
    Ok(match output {
        Output::Table => None,
        Output::Json => Some(serde_json::to_string_pretty(value)? + "\n"),
        Output::Yaml => Some(serde_norway::to_string(value)?),
    })
}

/// A duration the way kubectl shows ages: `45s`, `3m20s`, `25m`, `5h`, `3d`.
pub fn age(seconds: i64) -> String {
    let s = seconds.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86400);
    match () {
        _ if s < 120 => format!("{s}s"),
        _ if m < 10 && s % 60 != 0 => format!("{m}m{}s", s % 60),
        _ if m < 180 => format!("{m}m"),
        _ if h < 8 && m % 60 != 0 => format!("{h}h{}m", m % 60),
        _ if h < 48 => format!("{h}h"),
        _ if d < 8 && h % 24 != 0 => format!("{d}d{}h", h % 24),
        _ if d < 730 => format!("{d}d"),
        _ => format!("{}y", d / 365),
    }
}

/// The time between two timestamps as an age; `-` when either is unknown.
pub fn age_between(from: Option<jiff::Timestamp>, to: Option<jiff::Timestamp>) -> String {
    match (from, to) {
        (Some(a), Some(b)) => age(b.as_second() - a.as_second()),
        _ => "-".into(),
    }
}

/// An operation's length, exact to the second: `12s`, `1m5s`, `2h3m`.
pub fn duration(seconds: i64) -> String {
    let s = seconds.max(0);
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, min, sec) => format!("{min}m{sec}s"),
        (h, min, _) => format!("{h}h{min}m"),
    }
}

/// A terminal colour for a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Color {
    /// Good: Ready, succeeded.
    Green,
    /// Bad: Failing, Stalled, failed.
    Red,
    /// In progress: Reconciling, running.
    Yellow,
    /// On hold: Suspended.
    Blue,
}

impl Color {
    fn code(self) -> &'static str {
        match self {
            Color::Green => "32",
            Color::Red => "31",
            Color::Yellow => "33",
            Color::Blue => "34",
        }
    }
}

/// Colours `text` when `on` (a terminal), else returns it as is.
pub fn paint(text: &str, color: Option<Color>, on: bool) -> String {
    match color {
        Some(c) if on => format!("\x1b[{}m{text}\x1b[0m", c.code()),
        _ => text.to_string(),
    }
}

/// One table cell: its text and colour.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Cell {
    /// The text shown.
    pub text: String,
    /// Its colour on a terminal.
    pub color: Option<Color>,
}

impl Cell {
    /// A cell without colour; an empty text shows as `-`.
    pub fn plain(text: impl Into<String>) -> Cell {
        let text = text.into();
        Cell {
            text: if text.is_empty() { "-".into() } else { text },
            color: None,
        }
    }

    /// A coloured cell.
    pub fn colored(text: impl Into<String>, color: Option<Color>) -> Cell {
        Cell {
            color,
            ..Cell::plain(text)
        }
    }
}

/// An aligned table in kubectl's style (upper-case headers, three spaces between columns, the
/// last column not padded). Colour codes are added after padding so that columns stay aligned.
/// Cells hold text from the cluster: each is shown escaped ([`terminal_safe`], one line) and
/// measured as shown.
pub fn table(headers: &[&str], rows: &[Vec<Cell>], color: bool) -> String {
    let header: Vec<Cell> = headers.iter().map(|h| Cell::plain(*h)).collect();
    let shown: Vec<Vec<(Cow<'_, str>, Option<Color>)>> = std::iter::once(&header)
        .chain(rows)
        .map(|r| {
            r.iter()
                .map(|c| (terminal_safe(&c.text), c.color))
                .collect()
        })
        .collect();
    let widths: Vec<usize> = (0..headers.len())
        .map(|i| {
            shown
                .iter()
                .filter_map(|r| r.get(i))
                .map(|(text, _)| text.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in &shown {
        let mut line = String::new();
        for (i, (text, cell_color)) in row.iter().enumerate() {
            let pad = match widths.get(i) {
                Some(w) if i + 1 < row.len() => w.saturating_sub(text.chars().count()) + 3,
                _ => 0,
            };
            line.push_str(&paint(text, *cell_color, color));
            line.push_str(&" ".repeat(pad));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Cuts a text to `max` characters (with `…`), and to its first line.
pub fn short(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or("").trim();
    if line.chars().count() <= max && !text.trim().contains('\n') {
        return line.to_string();
    }
    let cut: String = line.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_like_kubectl() {
        assert_eq!(age(-3), "0s");
        assert_eq!(age(45), "45s");
        assert_eq!(age(200), "3m20s");
        assert_eq!(age(600), "10m");
        assert_eq!(age(3 * 3600 + 60), "3h1m");
        assert_eq!(age(20 * 3600), "20h");
        assert_eq!(age(3 * 86400 + 3600), "3d1h");
        assert_eq!(age(30 * 86400), "30d");
        assert_eq!(age(800 * 86400), "2y");
        assert_eq!(age_between(None, None), "-");
    }

    #[test]
    fn durations_are_exact() {
        assert_eq!(duration(12), "12s");
        assert_eq!(duration(65), "1m5s");
        assert_eq!(duration(2 * 3600 + 180), "2h3m");
    }

    #[test]
    fn tables_align_without_counting_colour() {
        let rows = vec![
            vec![
                Cell::plain("app"),
                Cell::colored("Ready", Some(Color::Green)),
            ],
            vec![Cell::plain("a-longer-name"), Cell::plain("")],
        ];
        let plain = table(&["NAME", "STATE"], &rows, false);
        assert_eq!(
            plain,
            "NAME            STATE\napp             Ready\na-longer-name   -\n"
        );
        let colored = table(&["NAME", "STATE"], &rows, true);
        assert!(colored.contains("app             \x1b[32mReady\x1b[0m"));
    }

    #[test]
    fn cells_are_shown_escaped_and_aligned_as_shown() {
        let rows = vec![
            vec![
                Cell::colored("delete", Some(Color::Red)),
                Cell::plain("gone\x1b[2K\r\x1b[1A"),
                Cell::plain("x"),
            ],
            vec![Cell::plain("create"), Cell::plain("a\nb"), Cell::plain("y")],
        ];
        let text = table(&["OP", "NAME", "Z"], &rows, true);
        assert_eq!(
            text,
            "OP       NAME                   Z\n\
             \x1b[31mdelete\x1b[0m   gone\\x1b[2K\\r\\x1b[1A   x\n\
             create   a\\nb                   y\n"
        );
    }

    #[test]
    fn long_messages_are_cut_to_one_line() {
        assert_eq!(short("short", 10), "short");
        assert_eq!(short("0123456789abc", 10), "012345678…");
        assert_eq!(short("first\nsecond", 20), "first…");
    }

    #[test]
    fn structured_output() {
        let v = serde_json::json!({"a": 1});
        assert_eq!(structured(&v, Output::Table).unwrap(), None);
        assert_eq!(
            structured(&v, Output::Json).unwrap().unwrap(),
            "{\n  \"a\": 1\n}\n"
        );
        assert_eq!(structured(&v, Output::Yaml).unwrap().unwrap(), "a: 1\n");
    }
}
