//! Keeping credentials out of messages.

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

/// Replaces known secret values (and each of their lines, for keys) with `[secret]`.
#[derive(Default, Clone)]
pub struct Redactor {
    secrets: Vec<String>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactor({} values)", self.secrets.len())
    }
}

impl Redactor {
    /// Remembers a secret value. Very short values are not redacted (they would mangle
    /// ordinary words); PEM armour lines are not secret and stay.
    pub fn add(&mut self, value: &str) {
        let mut candidates = vec![value.trim()];
        candidates.extend(value.lines().map(str::trim));
        for c in candidates {
            if c.chars().count() >= 4
                && !c.starts_with("-----")
                && !self.secrets.iter().any(|s| s == c)
            {
                self.secrets.push(c.to_string());
            }
        }
        // Longest first, so that a value containing another is replaced whole.
        self.secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }

    pub fn apply(&self, text: &str) -> String {
        let mut out = text.to_string();
        for s in &self.secrets {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), "[secret]");
            }
        }
        out
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
    fn secrets_and_their_lines_are_replaced() {
        let mut r = Redactor::default();
        r.add("hunter22");
        r.add("ab");
        r.add("-----BEGIN KEY-----\nline-one\nline-two\n-----END KEY-----\n");
        assert_eq!(
            r.apply("pw hunter22 ab line-two -----BEGIN KEY-----"),
            "pw [secret] ab [secret] -----BEGIN KEY-----"
        );
    }
}
