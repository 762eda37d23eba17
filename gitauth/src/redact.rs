//! Keeping credentials out of messages: URL user-info ([`urls`]) and known secret values in
//! every spelling a program is likely to print them in ([`Redactor`]).

use aho_corasick::{AhoCorasick, MatchKind};
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use std::collections::BTreeSet;
use std::sync::OnceLock;

/// What a masked value is replaced with (the word Pulumi itself prints for secrets).
pub const MASK: &str = "[secret]";

/// Secret values shorter than this (in characters, after trimming) are not masked: masking
/// "a" or "on" everywhere would make every log unreadable while hiding nearly nothing (a
/// 1–3 character secret is guessable anyway). Such a value is only counted
/// ([`Redactor::too_short`]) so that the runner can say so; it never affects how the other
/// values are masked.
pub const MIN_SECRET_CHARS: usize = 4;

/// Lines of a multi-line secret (a key, a PEM, a kubeconfig) are masked on their own only
/// from this length: shorter lines (`}`, `a: b`) are structure, not key material.
pub const MIN_LINE_CHARS: usize = 8;

/// Derived spellings that are only a fragment of the encoded value (base64 at a shifted
/// offset) are skipped below this length: a short fragment would match unrelated base64.
const MIN_FRAGMENT_CHARS: usize = 6;

/// Removes the user-info part (`user:password@`) of every URL in `text`.
pub fn urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find("://") {
        let (before, after) = rest.split_at(pos + 3);
        out.push_str(before);
        // The authority ends at the first '/', whitespace or quote.
        let end = after
            .find(|c: char| c == '/' || c.is_whitespace() || c == '"' || c == '\'')
            .unwrap_or(after.len());
        let authority = &after[..end];
        // An SSH user name (`ssh://git@host`) is not a secret; anything else before '@' may be.
        let ssh_user = before.ends_with("ssh://")
            && authority
                .rfind('@')
                .is_some_and(|at| !authority[..at].contains(':'));
        match authority.rfind('@') {
            Some(_) if ssh_user => out.push_str(authority),
            Some(at) => {
                out.push_str("***@");
                out.push_str(&authority[at + 1..]);
            }
            None => out.push_str(authority),
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The secret parts of the URLs in `text`: passwords (`scheme://user:PASSWORD@host`) and, for
/// HTTP(S), a lone user name (`https://TOKEN@host`, how tokens are put in clone URLs). Both
/// as written and percent-decoded.
pub fn url_credentials(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(pos) = rest.find("://") {
        let scheme = rest[..pos]
            .rsplit(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        let after = &rest[pos + 3..];
        let end = after
            .find(|c: char| c == '/' || c.is_whitespace() || c == '"' || c == '\'')
            .unwrap_or(after.len());
        let authority = &after[..end];
        if let Some(at) = authority.rfind('@') {
            let user_info = &authority[..at];
            let secret = match user_info.split_once(':') {
                Some((_, password)) => Some(password),
                None if scheme == "http" || scheme == "https" => Some(user_info),
                None => None,
            };
            if let Some(s) = secret.filter(|s| !s.is_empty()) {
                out.push(s.to_string());
                if let Some(decoded) = percent_decode(s).filter(|d| d != s) {
                    out.push(decoded);
                }
            }
        }
        rest = &after[end..];
    }
    out
}

fn percent_decode(text: &str) -> Option<String> {
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .ok()
        .map(|d| d.into_owned())
}

/// Masks known secret values — and the spellings of them a program may print — with
/// [`MASK`]. Each value is masked raw, JSON-escaped (as serde_json writes it, as Go writes it
/// with HTML escaping, with every non-ASCII character as `\uXXXX`, and escaped twice),
/// base64-encoded (standard and URL-safe, padded and not, whole and at the three byte
/// alignments it can have inside a longer encoded blob), and percent-encoded (strict, form,
/// user-info). Multi-line values are also masked line by line. Overlapping matches of
/// different values are masked as one span, so no fragment of either survives.
#[derive(Default, Clone)]
pub struct Redactor {
    needles: BTreeSet<String>,
    too_short: usize,
    /// Built on first use after a change (adding values is rare, applying is per line).
    matcher: OnceLock<Option<AhoCorasick>>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactor({} spellings)", self.needles.len())
    }
}

impl Redactor {
    /// Remembers a secret value. Returns false when it is too short to be masked (see
    /// [`MIN_SECRET_CHARS`]) or empty; PEM armour lines are not secret and stay.
    pub fn add(&mut self, value: &str) -> bool {
        let trimmed = value.trim();
        if trimmed.is_empty() {
            return false;
        }
        if trimmed.chars().count() < MIN_SECRET_CHARS {
            self.too_short += 1;
            return false;
        }
        let mut pieces: Vec<&str> = vec![value, trimmed];
        if trimmed.contains('\n') {
            pieces.extend(
                trimmed
                    .lines()
                    .map(str::trim)
                    .filter(|l| l.chars().count() >= MIN_LINE_CHARS && !l.starts_with("-----")),
            );
        }
        for piece in pieces {
            for spelling in spellings(piece) {
                self.needles.insert(spelling);
            }
        }
        self.matcher = OnceLock::new();
        true
    }

    /// Adds every value another redactor knows.
    pub fn extend(&mut self, other: &Redactor) {
        if other.needles.is_subset(&self.needles) && other.too_short == 0 {
            return;
        }
        self.needles.extend(other.needles.iter().cloned());
        self.too_short += other.too_short;
        self.matcher = OnceLock::new();
    }

    /// How many values were too short to be masked.
    pub fn too_short(&self) -> usize {
        self.too_short
    }

    pub fn is_empty(&self) -> bool {
        self.needles.is_empty()
    }

    /// The length in bytes of the longest spelling: a stream cut at least this far from a
    /// match cannot split it.
    pub fn longest(&self) -> usize {
        self.needles.iter().map(String::len).max().unwrap_or(0)
    }

    fn matcher(&self) -> Option<&AhoCorasick> {
        self.matcher
            .get_or_init(|| {
                if self.needles.is_empty() {
                    return None;
                }
                // Standard semantics: overlapping matches are all reported and merged. The
                // automaton kind is left to the crate: a full DFA of many long spellings (a
                // PEM's) would cost the user's container tens of megabytes.
                AhoCorasick::builder()
                    .match_kind(MatchKind::Standard)
                    .build(&self.needles)
                    .ok()
            })
            .as_ref()
    }

    /// The byte spans of `haystack` to mask, merged and in order.
    fn spans(&self, haystack: &[u8]) -> Vec<(usize, usize)> {
        let Some(matcher) = self.matcher() else {
            return Vec::new();
        };
        let mut spans: Vec<(usize, usize)> = Vec::new();
        for m in matcher.find_overlapping_iter(haystack) {
            spans.push((m.start(), m.end()));
        }
        spans.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(spans.len());
        for (start, end) in spans {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        merged
    }

    /// `bytes` with every secret spelling masked.
    pub fn apply_bytes(&self, bytes: &[u8]) -> Vec<u8> {
        let spans = self.spans(bytes);
        if spans.is_empty() {
            return bytes.to_vec();
        }
        let mut out = Vec::with_capacity(bytes.len());
        let mut at = 0;
        for (start, end) in spans {
            out.extend_from_slice(&bytes[at..start]);
            out.extend_from_slice(MASK.as_bytes());
            at = end;
        }
        out.extend_from_slice(&bytes[at..]);
        out
    }

    /// `text` with every secret spelling masked.
    pub fn apply(&self, text: &str) -> String {
        if self.is_empty() {
            return text.to_string();
        }
        // Spellings are UTF-8, so their matches in UTF-8 text start and end on character
        // boundaries and the result stays UTF-8.
        String::from_utf8(self.apply_bytes(text.as_bytes()))
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }

    /// How many leading bytes of `pending` (an unfinished line too long to hold) can be
    /// masked and let go now: none of its matches may run past the cut, and a spelling that
    /// begins before the cut must be wholly visible.
    pub fn safe_prefix(&self, pending: &[u8]) -> usize {
        let mut cut = pending.len().saturating_sub(self.longest());
        for (start, end) in self.spans(pending) {
            if start < cut && end > cut {
                cut = start;
                break;
            }
        }
        cut
    }
}

/// The spellings of one value that are worth masking.
fn spellings(value: &str) -> Vec<String> {
    let json = json_escaped(value, JsonStyle::Serde);
    let go_json = json_escaped(value, JsonStyle::GoHtml);
    let mut out: Vec<String> = vec![
        value.to_string(),
        json_escaped(&json, JsonStyle::Serde),
        json_escaped(value, JsonStyle::Ascii),
    ];
    // A value is base64-encoded raw (a Kubernetes Secret's data) or inside an encoded JSON
    // document (a kubeconfig, a Docker config), so both textual forms get encoded.
    for text in [value, json.as_str(), go_json.as_str()] {
        out.extend(base64_spellings(text.as_bytes()));
    }
    for style in [
        PercentStyle::Strict,
        PercentStyle::StrictLower,
        PercentStyle::Form,
        PercentStyle::UserInfo,
    ] {
        out.push(percent_encoded(value, style));
    }
    out.push(json);
    out.push(go_json);
    out.retain(|s| !s.is_empty());
    out.sort();
    out.dedup();
    out
}

/// `bytes` base64-encoded (standard and URL-safe, padded and not), and the fragments of its
/// encoding that appear whatever surrounds it in a longer encoded blob.
fn base64_spellings(bytes: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
        out.push(engine.encode(bytes));
    }
    // Inside a longer blob the value starts at byte offset 0, 1 or 2 of a 3-byte group; the
    // characters that depend only on the value's bytes are the same whatever surrounds it.
    // Encode behind 0–2 filler bytes and keep those characters.
    for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
        for (shift, first_clean_char) in [(0usize, 0usize), (1, 2), (2, 3)] {
            let mut shifted = vec![0u8; shift];
            shifted.extend_from_slice(bytes);
            let encoded = engine.encode(&shifted);
            // The last character also holds bits of whatever follows.
            let clean_end = (shifted.len() * 8) / 6;
            if let Some(fragment) = encoded.get(first_clean_char..clean_end) {
                if fragment.len() >= MIN_FRAGMENT_CHARS {
                    out.push(fragment.to_string());
                }
            }
        }
    }
    out
}

#[derive(Clone, Copy, PartialEq)]
enum JsonStyle {
    /// serde_json: `"`, `\`, `\n` `\r` `\t` `\b` `\f`, other controls as `\u00XX`.
    Serde,
    /// Go's encoding/json (Pulumi's): as serde, plus `<`, `>`, `&`, U+2028 and U+2029.
    GoHtml,
    /// Everything outside printable ASCII as `\uXXXX` (surrogate pairs above the BMP).
    Ascii,
}

/// The inside of a JSON string literal holding `value`.
fn json_escaped(value: &str, style: JsonStyle) -> String {
    let mut out = String::with_capacity(value.len() + 8);
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' if style != JsonStyle::GoHtml => out.push_str("\\b"),
            '\u{c}' if style != JsonStyle::GoHtml => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' if style == JsonStyle::GoHtml => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if style == JsonStyle::Ascii && !c.is_ascii() => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{:04x}", unit));
                }
            }
            c => out.push(c),
        }
    }
    out
}

#[derive(Clone, Copy, PartialEq)]
enum PercentStyle {
    /// Everything but RFC 3986 unreserved characters, upper-case hex (`%20` for a space).
    Strict,
    /// As `Strict`, lower-case hex.
    StrictLower,
    /// As `Strict`, a space as `+` (forms, Go's `url.QueryEscape`).
    Form,
    /// As `Strict`, sub-delimiters kept (Go's user-info escaping in `url.URL.String`).
    UserInfo,
}

/// Everything but RFC 3986's unreserved characters.
const NOT_UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');
/// As [`NOT_UNRESERVED`], with the sub-delimiters Go keeps in a URL's user info.
const NOT_USER_INFO: &AsciiSet = &NOT_UNRESERVED
    .remove(b'!')
    .remove(b'$')
    .remove(b'&')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')')
    .remove(b'*')
    .remove(b'+')
    .remove(b',')
    .remove(b';')
    .remove(b'=');

fn percent_encoded(value: &str, style: PercentStyle) -> String {
    let set = match style {
        PercentStyle::UserInfo => NOT_USER_INFO,
        _ => NOT_UNRESERVED,
    };
    let encoded = utf8_percent_encode(value, set).to_string();
    match style {
        PercentStyle::Form => encoded.replace("%20", "+"),
        // Only the escapes' hex digits are upper-case letters to lower (the kept characters
        // keep their case).
        PercentStyle::StrictLower => {
            let mut out = String::with_capacity(encoded.len());
            let mut hex_left = 0;
            for c in encoded.chars() {
                if c == '%' {
                    hex_left = 2;
                    out.push(c);
                } else if hex_left > 0 {
                    hex_left -= 1;
                    out.push(c.to_ascii_lowercase());
                } else {
                    out.push(c);
                }
            }
            out
        }
        PercentStyle::Strict | PercentStyle::UserInfo => encoded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_credentials_are_removed() {
        assert_eq!(
            urls("cannot fetch https://user:pa55@example.com/r.git at x"),
            "cannot fetch https://***@example.com/r.git at x"
        );
        assert_eq!(urls("ssh://git@h:22/r"), "ssh://git@h:22/r");
        assert_eq!(urls("ssh://git:pw@h:22/r"), "ssh://***@h:22/r");
        assert_eq!(urls("https://tok@h/r"), "https://***@h/r");
        assert_eq!(urls("no url"), "no url");
    }

    #[test]
    fn url_credentials_are_found() {
        assert_eq!(
            url_credentials("postgres://u:p%40ss-w0rd@db:5432/state"),
            vec!["p%40ss-w0rd".to_string(), "p@ss-w0rd".to_string()]
        );
        assert_eq!(
            url_credentials("https://ghp_tok123@github.com/o/r"),
            vec!["ghp_tok123"]
        );
        assert!(url_credentials("ssh://git@github.com/o/r").is_empty());
        assert!(url_credentials("s3://bucket/path https://h/x").is_empty());
    }

    #[test]
    fn secrets_and_their_lines_are_replaced() {
        let mut r = Redactor::default();
        assert!(r.add("hunter22"));
        assert!(!r.add("ab"));
        assert_eq!(r.too_short(), 1);
        r.add("-----BEGIN KEY-----\nline-one\nline-two\n-----END KEY-----\n");
        assert_eq!(
            r.apply("pw hunter22 ab line-two -----BEGIN KEY-----"),
            "pw [secret] ab [secret] -----BEGIN KEY-----"
        );
    }

    /// Every spelling of every canary is masked; the text around it survives.
    #[test]
    fn canaries_are_masked_in_every_encoding() {
        let canaries = [
            "canary-Zq9x7Wv3",
            "p@ss w0rd/with:\"quotes\"\\and<html>&more",
            "ünïcødé-sécret-😀",
            "tab\tand\u{1}control",
        ];
        let mut r = Redactor::default();
        for c in canaries {
            r.add(c);
        }
        for c in canaries {
            let serde = serde_json::to_string(c).unwrap();
            let serde_inner = &serde[1..serde.len() - 1];
            let double = serde_json::to_string(&serde).unwrap();
            let mut encodings = vec![
                c.to_string(),
                serde.clone(),
                double[1..double.len() - 1].to_string(),
                json_escaped(c, JsonStyle::GoHtml),
                json_escaped(c, JsonStyle::Ascii),
                percent_encoded(c, PercentStyle::Strict),
                percent_encoded(c, PercentStyle::StrictLower),
                percent_encoded(c, PercentStyle::Form),
                percent_encoded(c, PercentStyle::UserInfo),
            ];
            for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
                encodings.push(engine.encode(c.as_bytes()));
                // Inside a longer blob, at each alignment.
                for prefix in ["", "x", "xy"] {
                    let blob = format!("{prefix}{{\"k\": \"{serde_inner}\"}} and more text");
                    encodings.push(engine.encode(blob.as_bytes()));
                    encodings.push(engine.encode(format!("{prefix}{c}tail").as_bytes()));
                }
            }
            for e in encodings {
                let line = format!("before {e} after");
                let out = r.apply(&line);
                assert!(out.starts_with("before "), "{out}");
                assert!(out.ends_with(" after"), "{out}");
                assert!(out.contains(MASK), "{c:?} as {e:?} not masked: {out}");
                assert!(!out.contains(c), "{out}");
                assert!(!out.contains(serde_inner), "{out}");
            }
        }
        // Ordinary text is left alone.
        let plain = "Updating (dev): + aws:s3:Bucket my-bucket created (2s) https://app.pulumi.com/o/p/dev/updates/3";
        assert_eq!(r.apply(plain), plain);
    }

    #[test]
    fn base64_fragments_leave_no_readable_part() {
        let secret = "s3cr3t-v4lue-0123456789";
        let mut r = Redactor::default();
        r.add(secret);
        for prefix in ["", "a", "ab", "abc"] {
            let blob = STANDARD.encode(format!("{prefix}{secret}").as_bytes());
            let out = r.apply(&blob);
            assert!(out.contains(MASK), "{prefix:?}: {out}");
            // What is left cannot hold more than the two boundary groups' worth of bits.
            assert!(out.len() - MASK.len() <= 8, "{prefix:?}: {out}");
        }
    }

    #[test]
    fn multi_line_secrets_are_masked_per_line() {
        let key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\nQyNTUxOQAAACBq8xYz\nshort\n-----END OPENSSH PRIVATE KEY-----\n";
        let mut r = Redactor::default();
        r.add(key);
        let out = r.apply("error: bad key line QyNTUxOQAAACBq8xYz near short");
        assert_eq!(out, "error: bad key line [secret] near short");
        let out = r.apply(&serde_json::to_string(key).unwrap());
        assert!(!out.contains("b3BlbnNzaC1"), "{out}");
        assert!(!out.contains("QyNTUxOQAAACBq8xYz"), "{out}");
    }

    #[test]
    fn overlapping_secrets_are_masked_as_one() {
        let mut r = Redactor::default();
        r.add("abcd1234");
        r.add("1234wxyz");
        assert_eq!(r.apply("x abcd1234wxyz y"), "x [secret] y");
        // A short secret never weakens a long one that contains it.
        r.add("abc");
        assert_eq!(r.apply("abcd1234 abc"), "[secret] abc");
    }

    #[test]
    fn a_long_line_is_let_go_only_where_no_match_can_be_cut() {
        let mut r = Redactor::default();
        r.add("0123456789abcdef");
        let pending = b"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx0123456789";
        let cut = r.safe_prefix(pending);
        // The unfinished spelling at the end stays pending.
        assert!(cut <= pending.len() - 10, "{cut}");
        let pending = b"xxxxxxxxxxxxxxxxxxxxxxxxxxxx0123456789abcdefyyyyyyyyy";
        let cut = r.safe_prefix(pending);
        assert!(cut <= 28 || cut >= 44, "{cut}");
        assert_eq!(Redactor::default().safe_prefix(b"abc"), 3);
    }

    #[test]
    fn extend_merges_values() {
        let mut a = Redactor::default();
        a.add("first-secret");
        let mut b = Redactor::default();
        b.add("second-secret");
        b.add("x");
        a.extend(&b);
        assert_eq!(a.apply("first-secret second-secret"), "[secret] [secret]");
        assert_eq!(a.too_short(), 1);
    }
}
