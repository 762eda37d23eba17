//! Stack configuration: resolving the plan's items (`value`, `valueFrom.env`,
//! `valueFrom.path`, `json`) and turning them into CLI steps that apply them in order.
//!
//! - plain strings → `config set-all --path --plaintext k=v…`, keys that are not paths escaped
//!   as `ns:["key"]` (PKO's `SetAllConfig`), consecutive items in one call; a key holding `=`
//!   (which `k=v` cannot carry) → its own `config set --path --plaintext -- KEY VALUE`;
//! - secret strings → one `config set --path KEY --secret` each, the value on **stdin**, so
//!   that no secret string is ever in an argv;
//! - structured values (numbers, booleans, objects, arrays, `json: true`) →
//!   `config set-all --json DOC` (CLI ≥ 3.202.0), consecutive items in one call. The contract
//!   offers no other way for structured values, so a structured *secret* is in that argv.
//!
//! Later items win over earlier ones for the same key, exactly as if every item were applied
//! one by one.

use crate::error::Failure;
use crate::pulumi::{self, Invocation, Version};
use crate::redact::Redactor;
use pulumi_operator_api::workspace::{ConfigItem, ConfigValueFrom};
use serde_json::{json, Map, Value};
use std::path::Path;

/// A resolved config value: the key as the plan wrote it, namespaced.
#[derive(Clone, PartialEq)]
pub struct Resolved {
    /// `ns:name` (or `ns:path` with `path`).
    pub key: String,
    pub path: bool,
    pub value: Value,
    pub secret: bool,
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let value: &dyn std::fmt::Debug = if self.secret {
            &"[secret]"
        } else {
            &self.value
        };
        f.debug_struct("Resolved")
            .field("key", &self.key)
            .field("path", &self.path)
            .field("value", value)
            .field("secret", &self.secret)
            .finish()
    }
}

/// One CLI step.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// `config set-all --path --plaintext k=v…` (keys in their `--path` form).
    Plaintext(Vec<(String, String)>),
    /// `config set --path --plaintext -- KEY VALUE`, for a key holding `=`.
    Plain { key: String, value: String },
    /// `config set --path --secret -- KEY`, value on stdin.
    Secret { key: String, value: String },
    /// `config set-all --json DOC`.
    Json {
        doc: Map<String, Value>,
        secret: bool,
    },
}

/// Where `valueFrom` reads from (the process environment and files, or fakes in tests).
pub trait Sources {
    fn env(&self, name: &str) -> Option<String>;
    fn file(&self, path: &Path) -> std::io::Result<String>;
}

/// The real environment and file system.
pub struct Process;

impl Sources for Process {
    fn env(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
    fn file(&self, path: &Path) -> std::io::Result<String> {
        std::fs::read_to_string(path)
    }
}

/// Adds the project namespace to a bare key (`key` → `project:key`), as the CLI does.
pub fn namespaced(key: &str, project: &str) -> String {
    if key.contains(':') {
        key.to_string()
    } else {
        format!("{project}:{key}")
    }
}

/// The `--path` form of a key that is not a path: `ns:["name"]` (dots and brackets literal).
pub fn escaped(key: &str) -> String {
    match key.split_once(':') {
        Some((ns, name)) => {
            let name = name.replace('\\', "\\\\").replace('"', "\\\"");
            format!("{ns}:[\"{name}\"]")
        }
        None => key.to_string(),
    }
}

/// The scalar leaves of a structured value as (`--path` suffix, text) pairs, e.g.
/// `{"a": [1]}` → `("[\"a\"][0]", "1")`; an empty object or list is one leaf holding its JSON.
fn secret_leaves(value: &Value) -> Vec<(String, String)> {
    fn walk(v: &Value, path: &mut String, out: &mut Vec<(String, String)>) {
        let len = path.len();
        match v {
            Value::Object(map) if !map.is_empty() => {
                for (k, child) in map {
                    let k = k.replace('\\', "\\\\").replace('"', "\\\"");
                    path.push_str(&format!("[\"{k}\"]"));
                    walk(child, path, out);
                    path.truncate(len);
                }
            }
            Value::Array(items) if !items.is_empty() => {
                for (i, child) in items.iter().enumerate() {
                    path.push_str(&format!("[{i}]"));
                    walk(child, path, out);
                    path.truncate(len);
                }
            }
            Value::String(s) => out.push((path.clone(), s.clone())),
            other => out.push((path.clone(), other.to_string())),
        }
    }
    let mut out = Vec::new();
    walk(value, &mut String::new(), &mut out);
    out
}

/// Remembers a secret value in `redactor` (its [`secret_texts`]).
pub fn remember_secret_value(redactor: &mut Redactor, value: &Value) {
    for text in secret_texts(value) {
        redactor.add(&text);
    }
}

/// The texts that show a secret value: a string as it is, a structured value as its JSON and
/// each of its leaves.
pub fn secret_texts(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) => vec![s.clone()],
        other => std::iter::once(other.to_string())
            .chain(secret_leaves(other).into_iter().map(|(_, leaf)| leaf))
            .collect(),
    }
}

/// Resolves every item, in order. Secret values are remembered in `redactor`.
pub fn resolve(
    items: &[ConfigItem],
    project: &str,
    sources: &dyn Sources,
    redactor: &mut Redactor,
) -> Result<Vec<Resolved>, Failure> {
    items
        .iter()
        .map(|item| resolve_item(item, project, sources, redactor))
        .collect()
}

/// One item: its value (literal or read), checked, and remembered when secret.
fn resolve_item(
    item: &ConfigItem,
    project: &str,
    sources: &dyn Sources,
    redactor: &mut Redactor,
) -> Result<Resolved, Failure> {
    let key = item.key.trim();
    if key.is_empty() {
        return Err(Failure::config_invalid("a config item has an empty key"));
    }
    let secret = item.secret.unwrap_or(false);
    let path = item.path.unwrap_or(false);
    let value = match (&item.value, &item.value_from) {
        (Some(v), None) => v.clone(),
        (None, Some(from)) => read_value_from(key, from, secret, sources, redactor)?,
        (Some(_), Some(_)) => {
            return Err(Failure::config_invalid(format!(
                "config key {key}: both value and valueFrom are set"
            )))
        }
        (None, None) => {
            return Err(Failure::config_invalid(format!(
                "config key {key}: neither value nor valueFrom is set"
            )))
        }
    };
    if value.is_null() {
        return Err(Failure::config_invalid(format!(
            "config key {key}: the value is null"
        )));
    }
    if path && !value.is_string() {
        return Err(Failure::config_invalid(format!(
            "config key {key}: path: true cannot be combined with a structured value"
        )));
    }
    if secret {
        remember_secret_value(redactor, &value);
    }
    Ok(Resolved {
        key: namespaced(key, project),
        path,
        value,
        secret,
    })
}

/// The value `valueFrom` names: an environment variable or a file, as text or JSON (a secret
/// text is remembered before it is parsed, so that a parse error cannot show it).
fn read_value_from(
    key: &str,
    from: &ConfigValueFrom,
    secret: bool,
    sources: &dyn Sources,
    redactor: &mut Redactor,
) -> Result<Value, Failure> {
    let (text, origin) = match (&from.env, &from.path) {
        (Some(name), None) => (
            sources.env(name).ok_or_else(|| {
                Failure::config_invalid(format!(
                    "config key {key}: the environment variable {name} is not set"
                ))
            })?,
            format!("the environment variable {name}"),
        ),
        (None, Some(file)) => (
            sources.file(Path::new(file)).map_err(|e| {
                Failure::config_invalid(format!("config key {key}: cannot read {file}: {e}"))
            })?,
            format!("the file {file}"),
        ),
        _ => {
            return Err(Failure::config_invalid(format!(
                "config key {key}: valueFrom needs exactly one of env and path"
            )))
        }
    };
    if !from.json.unwrap_or(false) {
        return Ok(Value::String(text));
    }
    if secret {
        redactor.add(&text);
    }
    serde_json::from_str(&text).map_err(|e| {
        Failure::config_invalid(format!("config key {key}: {origin} is not valid JSON: {e}"))
    })
}

/// Groups resolved items into CLI steps that keep their order.
pub fn steps(items: &[Resolved]) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    for item in items {
        match (&item.value, item.secret) {
            (Value::String(s), false) => {
                let key = if item.path {
                    item.key.clone()
                } else {
                    escaped(&item.key)
                };
                if key.contains('=') {
                    // `set-all` and `--config` split `k=v` at the first `=`: `ns:a=b=v` would
                    // set `ns:a` to `b=v`, and `ns:["a=b"]=v` fails.
                    steps.push(Step::Plain {
                        key,
                        value: s.clone(),
                    });
                } else if let Some(Step::Plaintext(pairs)) = steps.last_mut() {
                    pairs.push((key, s.clone()));
                } else {
                    steps.push(Step::Plaintext(vec![(key, s.clone())]));
                }
            }
            (Value::String(s), true) => {
                let key = if item.path {
                    item.key.clone()
                } else {
                    escaped(&item.key)
                };
                steps.push(Step::Secret {
                    key,
                    value: s.clone(),
                });
            }
            // The CLI cannot take a secret structured value from `config set-all --json` (3.259
            // fails with "invalid character 'v' looking for beginning of value": it parses the
            // ciphertext as JSON), so each leaf is set as a secret at its path instead. Leaves
            // are stored as strings, which is what a `--path` set does.
            (v, true) => {
                let base = if item.path {
                    item.key.clone()
                } else {
                    escaped(&item.key)
                };
                for (path, value) in secret_leaves(v) {
                    steps.push(Step::Secret {
                        key: format!("{base}{path}"),
                        value,
                    });
                }
            }
            (v, secret) => {
                let entry = json!({"value": v.to_string(), "objectValue": v, "secret": secret});
                match steps.last_mut() {
                    Some(Step::Json { doc, secret: s }) if !doc.contains_key(&item.key) => {
                        doc.insert(item.key.clone(), entry);
                        *s |= secret;
                    }
                    _ => {
                        let mut doc = Map::new();
                        doc.insert(item.key.clone(), entry);
                        steps.push(Step::Json { doc, secret });
                    }
                }
            }
        }
    }
    steps
}

/// The steps with every plaintext value that can be set last moved to one trailing
/// `Plaintext` step (which an operation takes as its `--config`: one CLI process fewer). A
/// value can be set last when no later step that stays in place sets the same key or a path
/// inside or around it (a later value of one key wins, and a path set after its parent
/// changes it); a `Json` step after it keeps it in place.
pub fn plaintext_last(steps: Vec<Step>) -> Vec<Step> {
    let mut fixed_keys: Vec<&str> = Vec::new();
    let mut json_after = false;
    let mut movable = vec![false; steps.len()];
    for (i, step) in steps.iter().enumerate().rev() {
        match step {
            Step::Plaintext(pairs)
                if !json_after
                    && pairs
                        .iter()
                        .all(|(k, _)| fixed_keys.iter().all(|f| !overlaps(k, f))) =>
            {
                movable[i] = true;
            }
            Step::Plaintext(pairs) => fixed_keys.extend(pairs.iter().map(|(k, _)| k.as_str())),
            Step::Plain { key, .. } | Step::Secret { key, .. } => fixed_keys.push(key),
            Step::Json { .. } => json_after = true,
        }
    }
    let mut kept = Vec::new();
    let mut last: Vec<(String, String)> = Vec::new();
    for (step, moved) in steps.into_iter().zip(movable) {
        match step {
            Step::Plaintext(pairs) if moved => last.extend(pairs),
            other => kept.push(other),
        }
    }
    if !last.is_empty() {
        kept.push(Step::Plaintext(last));
    }
    kept
}

/// Whether two config keys (in their `--path` form) may touch the same value: cautiously,
/// whenever they share their namespace and top-level name (`ns:["a"]`, `ns:a.b` and `ns:a[0]`
/// all touch `ns:a`), or either cannot be read.
fn overlaps(a: &str, b: &str) -> bool {
    match (top_level(a), top_level(b)) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    }
}

/// The namespace and top-level name of a key in its `--path` form, if plainly spelled.
fn top_level(key: &str) -> Option<(&str, &str)> {
    let (ns, path) = key.split_once(':')?;
    let name = match path.strip_prefix("[\"") {
        Some(quoted) if !quoted.contains('\\') => quoted.split_once("\"]")?.0,
        Some(_) => return None,
        None => path.split(['.', '[']).next()?,
    };
    Some((ns, name))
}

/// The invocations of `steps`; fails when structured values meet a CLI older than 3.202.0.
pub fn invocations(
    stack: &str,
    steps: &[Step],
    cli: Option<Version>,
) -> Result<Vec<Invocation>, Failure> {
    let mut out = Vec::with_capacity(steps.len());
    for step in steps {
        out.push(match step {
            Step::Plaintext(pairs) => pulumi::config_set_all_plaintext(stack, pairs),
            Step::Plain { key, value } => pulumi::config_set_plaintext(stack, key, value),
            Step::Secret { key, value } => pulumi::config_set_secret(stack, key, value),
            Step::Json { doc, secret } => {
                if let Some(v) = cli.filter(|v| *v < Version::JSON_CONFIG) {
                    let keys: Vec<&str> = doc.keys().map(String::as_str).collect();
                    return Err(Failure::config_invalid(format!(
                        "structured config values ({}) need Pulumi CLI {} or later; the image has {v}",
                        keys.join(", "),
                        Version::JSON_CONFIG
                    )));
                }
                let text = Value::Object(doc.clone()).to_string();
                pulumi::config_set_all_json(stack, &text, *secret)
            }
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(pairs: &[(&str, &str)]) -> Step {
        Step::Plaintext(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn secret(key: &str) -> Step {
        Step::Secret {
            key: key.into(),
            value: "s3cr3t-value".into(),
        }
    }

    #[test]
    fn plaintext_values_go_last_unless_a_later_step_touches_their_key() {
        // The common case: plaintext, then a secret of another key: one trailing step.
        let steps = vec![
            plain(&[("p:[\"a\"]", "1"), ("k:x", "2")]),
            secret("p:[\"t\"]"),
        ];
        assert_eq!(
            plaintext_last(steps),
            vec![
                secret("p:[\"t\"]"),
                plain(&[("p:[\"a\"]", "1"), ("k:x", "2")])
            ]
        );
        // A later secret of the same top-level key, however spelled, keeps the order.
        for later in ["p:[\"a\"]", "p:a.b", "p:a[0]"] {
            let steps = vec![plain(&[("p:[\"a\"]", "1")]), secret(later)];
            assert_eq!(plaintext_last(steps.clone()), steps, "{later}");
        }
        let steps = vec![plain(&[("p:a.b", "1")]), secret("p:[\"a\"]")];
        assert_eq!(plaintext_last(steps.clone()), steps);
        // Groups merge in their order around what stays; a group that must stay keeps the
        // ones before it from passing it.
        let steps = vec![
            plain(&[("p:a", "1")]),
            secret("p:t"),
            plain(&[("p:a", "2")]),
        ];
        assert_eq!(
            plaintext_last(steps),
            vec![secret("p:t"), plain(&[("p:a", "1"), ("p:a", "2")])]
        );
        let steps = vec![
            plain(&[("p:a", "1")]),
            plain(&[("p:b", "2")]),
            secret("p:b"),
        ];
        assert_eq!(
            plaintext_last(steps),
            vec![
                plain(&[("p:b", "2")]),
                secret("p:b"),
                plain(&[("p:a", "1")])
            ]
        );
        // A structured value after it, or a key that cannot be read, keeps it in place.
        let json = Step::Json {
            doc: Map::new(),
            secret: false,
        };
        let steps = vec![plain(&[("p:a", "1")]), json];
        assert_eq!(plaintext_last(steps.clone()), steps);
        let steps = vec![plain(&[("p:a", "1")]), secret("p:[\"we\\\"ird\"]")];
        assert_eq!(plaintext_last(steps.clone()), steps);
    }
    use pulumi_operator_api::workspace::ConfigValueFrom;
    use std::collections::BTreeMap;

    struct Fake {
        env: BTreeMap<&'static str, &'static str>,
        files: BTreeMap<&'static str, &'static str>,
    }

    impl Sources for Fake {
        fn env(&self, name: &str) -> Option<String> {
            self.env.get(name).map(|s| s.to_string())
        }
        fn file(&self, path: &Path) -> std::io::Result<String> {
            self.files
                .get(path.to_str().unwrap_or_default())
                .map(|s| s.to_string())
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
        }
    }

    fn fake() -> Fake {
        Fake {
            env: [("PW", "env-secret"), ("REGION", "us-west-2")].into(),
            files: [
                ("/m/token", "file-secret\n"),
                ("/m/obj.json", r#"{"a": [1, 2], "b": "x"}"#),
                ("/m/bad.json", "{"),
            ]
            .into(),
        }
    }

    fn item(key: &str, value: Value) -> ConfigItem {
        ConfigItem {
            key: key.into(),
            value: Some(value),
            ..Default::default()
        }
    }

    fn from(
        key: &str,
        env: Option<&str>,
        path: Option<&str>,
        json: bool,
        secret: bool,
    ) -> ConfigItem {
        ConfigItem {
            key: key.into(),
            value_from: Some(ConfigValueFrom {
                env: env.map(Into::into),
                path: path.map(Into::into),
                json: json.then_some(true),
            }),
            secret: secret.then_some(true),
            ..Default::default()
        }
    }

    #[test]
    fn keys() {
        assert_eq!(namespaced("a", "p"), "p:a");
        assert_eq!(namespaced("aws:region", "p"), "aws:region");
        assert_eq!(escaped("p:a.b"), "p:[\"a.b\"]");
        assert_eq!(escaped("p:q\"x"), "p:[\"q\\\"x\"]");
    }

    #[test]
    fn application_order_is_kept() {
        let items = vec![
            item("region", json!("eu")),                            // plain
            from("aws:region", Some("REGION"), None, false, false), // plain, env
            ConfigItem {
                path: Some(true),
                ..item("data.nums[0]", json!("1"))
            }, // plain path
            from("pw", Some("PW"), None, false, true),              // secret, env
            item("count", json!(3)),                                // structured
            from("obj", None, Some("/m/obj.json"), true, false),    // structured, file
            item("count", json!(4)),                                // same key: new batch
            from("token", None, Some("/m/token"), false, true),     // secret, file
            item("region", json!("us")),                            // plain again
        ];
        let mut r = Redactor::default();
        let resolved = resolve(&items, "proj", &fake(), &mut r).unwrap();
        let s = steps(&resolved);
        assert_eq!(s.len(), 6, "{s:#?}");
        assert_eq!(
            s[0],
            Step::Plaintext(vec![
                ("proj:[\"region\"]".into(), "eu".into()),
                ("aws:[\"region\"]".into(), "us-west-2".into()),
                ("proj:data.nums[0]".into(), "1".into()),
            ])
        );
        assert_eq!(
            s[1],
            Step::Secret {
                key: "proj:[\"pw\"]".into(),
                value: "env-secret".into()
            }
        );
        let Step::Json { doc, secret } = &s[2] else {
            panic!("{s:?}")
        };
        assert!(!secret);
        assert_eq!(
            doc["proj:count"],
            json!({"value": "3", "objectValue": 3, "secret": false})
        );
        assert_eq!(
            doc["proj:obj"]["objectValue"],
            json!({"a": [1, 2], "b": "x"})
        );
        assert_eq!(doc["proj:obj"]["value"], json!(r#"{"a":[1,2],"b":"x"}"#));
        let Step::Json { doc, .. } = &s[3] else {
            panic!("{s:?}")
        };
        assert_eq!(doc["proj:count"]["objectValue"], json!(4));
        // File content is kept exactly (the trailing newline too).
        assert_eq!(
            s[4],
            Step::Secret {
                key: "proj:[\"token\"]".into(),
                value: "file-secret\n".into()
            }
        );
        assert_eq!(
            s[5],
            Step::Plaintext(vec![("proj:[\"region\"]".into(), "us".into())])
        );
        assert_eq!(r.apply("env-secret file-secret"), "[secret] [secret]");

        let inv = invocations("dev", &s, Some(Version(3, 259, 0))).unwrap();
        assert_eq!(inv.len(), 6);
        for i in &inv {
            let argv = i.args.join(" ");
            assert!(
                !argv.contains("env-secret") && !argv.contains("file-secret"),
                "{argv}"
            );
        }
        assert_eq!(inv[1].stdin.as_deref(), Some("env-secret\n"));
        assert_eq!(inv[4].stdin.as_deref(), Some("file-secret\n\n"));
    }

    #[test]
    fn keys_holding_equals_signs_are_set_one_by_one_and_dashes_stay_keys() {
        let items = vec![
            item("a", json!("1")),
            item("k=v", json!("-x")),
            ConfigItem {
                path: Some(true),
                ..item("m.n=o", json!("2"))
            },
            item("-h:--force", json!("--yes")),
            ConfigItem {
                secret: Some(true),
                ..item("--secret:k", json!("s3cr3t-value"))
            },
        ];
        let s = steps(&resolve(&items, "p", &fake(), &mut Redactor::default()).unwrap());
        let plain = |key: &str, value: &str| Step::Plain {
            key: key.into(),
            value: value.into(),
        };
        assert_eq!(
            s,
            vec![
                Step::Plaintext(vec![("p:[\"a\"]".into(), "1".into())]),
                plain("p:[\"k=v\"]", "-x"),
                plain("p:m.n=o", "2"),
                Step::Plaintext(vec![("-h:[\"--force\"]".into(), "--yes".into())]),
                Step::Secret {
                    key: "--secret:[\"k\"]".into(),
                    value: "s3cr3t-value".into()
                },
            ]
        );
        let inv = invocations("dev", &s, None).unwrap();
        assert!(inv[1]
            .args
            .ends_with(&["--".into(), "p:[\"k=v\"]".into(), "-x".into()]));
        assert!(inv[4]
            .args
            .ends_with(&["--".into(), "--secret:[\"k\"]".into()]));
    }

    #[test]
    fn structured_secrets_are_set_leaf_by_leaf_and_plain_ones_are_version_gated() {
        let items = vec![ConfigItem {
            secret: Some(true),
            ..item(
                "obj",
                json!({"k": "structured-secret", "a.b": [1, true], "e": {}}),
            )
        }];
        let mut r = Redactor::default();
        let s = steps(&resolve(&items, "p", &fake(), &mut r).unwrap());
        let secret = |key: &str, value: &str| Step::Secret {
            key: key.into(),
            value: value.into(),
        };
        assert_eq!(
            s,
            vec![
                secret("p:[\"obj\"][\"a.b\"][0]", "1"),
                secret("p:[\"obj\"][\"a.b\"][1]", "true"),
                secret("p:[\"obj\"][\"e\"]", "{}"),
                secret("p:[\"obj\"][\"k\"]", "structured-secret"),
            ]
        );
        let inv = invocations("dev", &s, None).unwrap();
        assert!(inv
            .iter()
            .all(|i| !i.display().contains("structured-secret")));
        assert!(r.apply("leaked structured-secret").contains("[secret]"));
        // Plain structured values need `config set-all --json` (CLI 3.202.0 and later).
        let s = steps(&resolve(&[item("obj", json!({"k": 1}))], "p", &fake(), &mut r).unwrap());
        assert!(matches!(&s[0], Step::Json { secret: false, .. }));
        let e = invocations("dev", &s, Some(Version(3, 201, 0))).unwrap_err();
        assert_eq!(
            e.reason,
            pulumi_operator_api::plan::FailureReason::ConfigInvalid
        );
        assert!(e.message.contains("3.202.0"), "{}", e.message);
        assert!(r
            .apply("{\"k\":\"structured-secret\"}")
            .contains("[secret]"));
    }

    #[test]
    fn invalid_items() {
        let f = fake();
        let mut r = Redactor::default();
        let bad = |items: Vec<ConfigItem>| {
            resolve(&items, "p", &f, &mut Redactor::default())
                .unwrap_err()
                .message
        };
        assert!(
            bad(vec![from("a", Some("MISSING"), None, false, true)]).contains("MISSING is not set")
        );
        assert!(bad(vec![from("a", None, Some("/m/none"), false, false)])
            .contains("cannot read /m/none"));
        assert!(
            bad(vec![from("a", None, Some("/m/bad.json"), true, false)]).contains("not valid JSON")
        );
        assert!(bad(vec![ConfigItem {
            key: "a".into(),
            ..Default::default()
        }])
        .contains("neither"));
        assert!(bad(vec![ConfigItem {
            path: Some(true),
            ..item("a.b", json!([1]))
        }])
        .contains("path: true"));
        assert!(bad(vec![item("a", Value::Null)]).contains("null"));
        // JSON that parses to a string stays a plain string.
        let ok = resolve(
            &[from("s", Some("REGION"), None, false, false)],
            "p",
            &f,
            &mut r,
        )
        .unwrap();
        assert_eq!(ok[0].value, json!("us-west-2"));
        assert!(!format!(
            "{:?}",
            resolve(&[from("s", Some("PW"), None, false, true)], "p", &f, &mut r).unwrap()
        )
        .contains("env-secret"));
    }
}
