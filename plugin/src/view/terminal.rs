//! Text from the cluster or from a Pulumi program (URNs, resource types, messages, outputs,
//! condition and Event messages, log lines), made safe to print on a terminal. Such text may
//! hold escape sequences, carriage returns, backspaces, bidi overrides or zero-width
//! characters that would move the cursor, erase a line or reorder what the reader sees (and
//! so hide a `delete` from the person about to approve a plan). They are shown escaped, as
//! visible text: `\x1b`, `\r`, `\u{9b}`, `\u{202e}`; ordinary printable Unicode (accents,
//! CJK, emoji) stays as it is. A backslash is not escaped: escaping is idempotent, and
//! nothing the escaped text holds can act on the terminal.
//!
//! JSON and YAML output (`-o json|yaml`) is not escaped here: it stays machine-readable.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Characters that print nothing yet change how the text around them reads: bidi embeddings,
/// overrides and isolates (U+202A–U+202E, U+2066–U+2069), marks (U+200E, U+200F, U+061C),
/// zero-width characters (U+200B–U+200D, U+2060, U+FEFF), the line and paragraph separators,
/// the soft hyphen, invisible operators, interlinear annotations and tag characters.
fn invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}'
        | '\u{061C}'
        | '\u{180E}'
        | '\u{200B}'..='\u{200F}'
        | '\u{2028}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}'
        | '\u{FEFF}'
        | '\u{FFF9}'..='\u{FFFB}'
        | '\u{E0000}'..='\u{E007F}')
}

/// Whether `c` is shown escaped; `text`: multi-line text, where `\n` and `\t` are kept.
fn escaped(c: char, text: bool) -> bool {
    match c {
        '\n' | '\t' => !text,
        // C0 and C1 controls and DEL (ESC, CR, BS, CSI U+009B...).
        c => c.is_control() || invisible(c),
    }
}

/// The one escaping function behind [`terminal_safe`] and [`terminal_safe_text`].
fn escape(s: &str, text: bool) -> Cow<'_, str> {
    if !s.chars().any(|c| escaped(c, text)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        // A CR that ends a line (CRLF) erases nothing: kept in multi-line text.
        let crlf = text && c == '\r' && chars.peek() == Some(&'\n');
        if crlf || !escaped(c, text) {
            out.push(c);
            continue;
        }
        // Writing to a String cannot fail.
        let _ = match c {
            '\n' => out.write_str("\\n"),
            '\r' => out.write_str("\\r"),
            '\t' => out.write_str("\\t"),
            c if u32::from(c) < 0x80 => write!(out, "\\x{:02x}", u32::from(c)),
            c => write!(out, "\\u{{{:x}}}", u32::from(c)),
        };
    }
    Cow::Owned(out)
}

/// A one-line field (a URN, a type, a name, a reason, a table cell) as it may be printed:
/// every control character escaped, newlines and tabs included.
pub fn terminal_safe(s: &str) -> Cow<'_, str> {
    escape(s, false)
}

/// Multi-line text the plugin prints as lines on purpose (a message, a log): as
/// [`terminal_safe`], but newlines (with a CR before them) and tabs are kept.
pub fn terminal_safe_text(s: &str) -> Cow<'_, str> {
    escape(s, true)
}

/// How much of a line without a newline is held before it is printed anyway.
const MAX_PENDING: usize = 64 * 1024;

/// The end of the whole UTF-8 characters of `bytes`: before an incomplete last character.
fn whole_chars(bytes: &[u8]) -> usize {
    let from = bytes.len().saturating_sub(4);
    let lead = (from..bytes.len()).rev().find(|&i| bytes[i] & 0xC0 != 0x80);
    match lead {
        Some(i) if matches!(std::str::from_utf8(&bytes[i..]), Err(e) if e.error_len().is_none()) => {
            i
        }
        _ => bytes.len(),
    }
}

/// A log streamed in chunks, printed escaped ([`terminal_safe_text`]) line by line: a chunk may
/// end inside a line or inside a character. Bytes that are not UTF-8 show as U+FFFD.
#[derive(Debug, Default)]
pub struct LogEscaper {
    pending: Vec<u8>,
}

impl LogEscaper {
    /// Takes the next chunk; returns the escaped text of the lines it completes (and of a long
    /// line without a newline, once [`MAX_PENDING`] bytes of it are held).
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let cut = match self.pending.iter().rposition(|b| *b == b'\n') {
            Some(i) => i + 1,
            None if self.pending.len() >= MAX_PENDING => whole_chars(&self.pending),
            None => return String::new(),
        };
        let rest = self.pending.split_off(cut);
        let done = std::mem::replace(&mut self.pending, rest);
        terminal_safe_text(&String::from_utf8_lossy(&done)).into_owned()
    }

    /// The escaped rest, at the end of the log.
    pub fn finish(self) -> String {
        terminal_safe_text(&String::from_utf8_lossy(&self.pending)).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nothing in `s` acts on a terminal.
    fn inert(s: &str) -> bool {
        !s.chars()
            .any(|c| (c.is_control() && c != '\n') || invisible(c))
    }

    #[test]
    fn an_erase_line_and_carriage_return_hiding_a_delete_are_shown() {
        // On a terminal, `\x1b[2K\r` erases the line and `\x1b[1A` moves up: a name ending so
        // would wipe the `delete` printed before it.
        let urn = "urn:pulumi:dev::app::aws:s3/bucket:Bucket::data\x1b[2K\r\x1b[1Acreate ok";
        let safe = terminal_safe(urn);
        assert_eq!(
            safe,
            "urn:pulumi:dev::app::aws:s3/bucket:Bucket::data\\x1b[2K\\r\\x1b[1Acreate ok"
        );
        assert!(inert(&safe));
        assert_eq!(terminal_safe("a\x08\x08b\x7f"), "a\\x08\\x08b\\x7f");
    }

    #[test]
    fn an_osc_8_hyperlink_is_shown_not_followed() {
        let link = "\x1b]8;;https://evil.example/\x07settings\x1b]8;;\x07";
        assert_eq!(
            terminal_safe(link),
            "\\x1b]8;;https://evil.example/\\x07settings\\x1b]8;;\\x07"
        );
        // The ST form of the terminator too.
        assert_eq!(terminal_safe("\x1b]0;t\x1b\\"), "\\x1b]0;t\\x1b\\");
    }

    #[test]
    fn bidi_overrides_and_zero_width_characters_are_shown() {
        // U+202E would show `eteled` reversed: "…::delete" read as "…::eteled".
        assert_eq!(
            terminal_safe("bucket\u{202e}eteled\u{202c}"),
            "bucket\\u{202e}eteled\\u{202c}"
        );
        assert_eq!(
            terminal_safe("a\u{2066}b\u{2069}c\u{200b}d\u{feff}e\u{200f}\u{e0041}"),
            "a\\u{2066}b\\u{2069}c\\u{200b}d\\u{feff}e\\u{200f}\\u{e0041}"
        );
    }

    #[test]
    fn c1_controls_are_shown() {
        // U+009B is CSI on its own (8-bit): `\u{9b}2K` erases a line on some terminals.
        assert_eq!(terminal_safe("x\u{9b}2K\u{85}y"), "x\\u{9b}2K\\u{85}y");
        assert!(inert(&terminal_safe("\u{80}\u{9f}")));
    }

    #[test]
    fn printable_unicode_is_kept_and_nothing_is_copied() {
        for s in ["café", "東京-バケット", "🚀 deploy", "C:\\path\\x1b", "a b"] {
            assert!(
                matches!(terminal_safe(s), Cow::Borrowed(b) if b == s),
                "{s}"
            );
        }
        // Escaping twice changes nothing.
        let once = terminal_safe("a\x1b[31mb\u{202e}").into_owned();
        assert_eq!(terminal_safe(&once), once);
    }

    #[test]
    fn one_line_fields_have_no_newline_multi_line_text_keeps_its_lines() {
        assert_eq!(terminal_safe("a\nb\tc"), "a\\nb\\tc");
        assert_eq!(
            terminal_safe_text("line 1\r\n\tline 2\n\x1b[1Aover\rwritten\n"),
            "line 1\r\n\tline 2\n\\x1b[1Aover\\rwritten\n"
        );
    }

    #[test]
    fn a_log_is_escaped_across_chunks() {
        let mut log = LogEscaper::default();
        assert_eq!(log.push(b"+ create bucket\n- del"), "+ create bucket\n");
        assert_eq!(log.push(b"ete \x1b[2K"), "");
        // `é` split between two chunks.
        assert_eq!(log.push(b"\r\xc3"), "");
        assert_eq!(log.push(b"\xa9\n"), "- delete \\x1b[2K\\ré\n");
        assert_eq!(log.push(b"tail \xff\x1b"), "");
        assert_eq!(log.finish(), "tail \u{fffd}\\x1b");
        // A long line without a newline is printed in pieces, never cut inside a character.
        let mut long = LogEscaper::default();
        let mut text = vec![b'a'; MAX_PENDING - 1];
        text.push(0xc3);
        let out = long.push(&text);
        assert_eq!(out, "a".repeat(MAX_PENDING - 1));
        assert_eq!(long.push(b"\xa9"), "");
        assert_eq!(long.finish(), "é");
    }
}
