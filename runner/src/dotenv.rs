//! `$PULUMI_ENV` (`/share/.env`): environment variables that user init containers append as
//! `KEY=VALUE` lines ("dynamic environment variables", as PKO's agent loads them with
//! godotenv). They are added to every Pulumi command; a missing file means none.

/// Parses dotenv text: `KEY=VALUE`, optional `export `, `#` comments, blank lines, and values
/// in single quotes (literal) or double quotes (with `\n`, `\"` and `\\` escapes).
pub fn parse(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let value = value.trim();
        let value = if let Some(inner) = value.strip_prefix('\'').and_then(|v| v.strip_suffix('\''))
        {
            inner.to_string()
        } else if let Some(inner) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
            let mut s = String::new();
            let mut chars = inner.chars();
            while let Some(c) = chars.next() {
                match (c, chars.clone().next()) {
                    ('\\', Some('n')) => {
                        s.push('\n');
                        chars.next();
                    }
                    ('\\', Some(e @ ('"' | '\\'))) => {
                        s.push(e);
                        chars.next();
                    }
                    _ => s.push(c),
                }
            }
            s
        } else {
            // An unquoted value ends at an inline comment.
            value.split(" #").next().unwrap_or("").trim().to_string()
        };
        out.retain(|(k, _): &(String, String)| k != key);
        out.push((key.to_string(), value));
    }
    out
}

/// The variables in the file named by `$PULUMI_ENV` (none when unset or missing).
pub fn load() -> Vec<(String, String)> {
    std::env::var_os("PULUMI_ENV")
        .and_then(|path| std::fs::read_to_string(path).ok())
        .map(|text| parse(&text))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn parses_dotenv_lines() {
        let vars = parse(
            "# comment\nA=1\nexport B=two words # trailing\nC='lit $X'\nD=\"line\\nnext \\\"q\\\"\"\n\nbad line\nA=overridden\n",
        );
        let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("A"), Some("overridden"));
        assert_eq!(get("B"), Some("two words"));
        assert_eq!(get("C"), Some("lit $X"));
        assert_eq!(get("D"), Some("line\nnext \"q\""));
        assert_eq!(vars.len(), 4);
    }
}
