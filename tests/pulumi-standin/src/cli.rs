//! A small cobra/pflag-like argument parser: commands, persistent (global) flags, long and
//! shorthand flags, `--flag=value` and `--flag value`, repeatable string arrays, `--`, and the
//! error texts cobra produces for unknown flags and commands.

use crate::util::{exit, parse_go_bool, Failure, Res};
use std::collections::HashMap;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Bool,
    Str,
    Arr,
    Int,
}

#[derive(Clone, Debug)]
pub struct Flag {
    pub name: &'static str,
    pub short: Option<char>,
    pub kind: Kind,
    /// Value used when the flag is given without `=value` (pflag's NoOptDefVal).
    pub no_opt: Option<&'static str>,
}

const fn f(name: &'static str, short: Option<char>, kind: Kind) -> Flag {
    Flag {
        name,
        short,
        kind,
        no_opt: None,
    }
}

const fn fo(name: &'static str, short: Option<char>, kind: Kind, no_opt: &'static str) -> Flag {
    Flag {
        name,
        short,
        kind,
        no_opt: Some(no_opt),
    }
}

use Kind::*;

fn global_flags() -> Vec<Flag> {
    vec![
        f("cwd", Some('C'), Str),
        f("color", None, Str),
        f("non-interactive", None, Bool),
        f("verbose", Some('v'), Int),
        f("logtostderr", None, Bool),
        f("logflow", None, Bool),
        f("tracing", None, Str),
        f("tracing-header", None, Str),
        f("otel-traces", None, Str),
        f("profiling", None, Str),
        f("memprofilerate", None, Int),
        f("emoji", Some('e'), Bool),
        f("fully-qualify-stack-names", Some('Q'), Bool),
        f("disable-integrity-checking", None, Bool),
        f("help", Some('h'), Bool),
    ]
}

fn op_common(op: &str) -> Vec<Flag> {
    let mut v = vec![
        f("stack", Some('s'), Str),
        f("config-file", None, Str),
        f("config", Some('c'), Arr),
        f("config-path", None, Bool),
        f("message", Some('m'), Str),
        f("parallel", Some('p'), Int),
        f("target", Some('t'), Arr),
        f("target-dependents", None, Bool),
        f("json", Some('j'), Bool),
        f("diff", None, Bool),
        f("suppress-outputs", None, Bool),
        f("suppress-progress", None, Bool),
        fo("suppress-permalink", None, Str, "false"),
        f("exec-kind", None, Str),
        f("exec-agent", None, Str),
        f("client", None, Str),
        f("debug", Some('d'), Bool),
        f("show-config", None, Bool),
        f("show-replacement-steps", None, Bool),
        f("show-sames", None, Bool),
        f("show-reads", None, Bool),
        f("show-full-output", None, Bool),
        f("show-secrets", None, Bool),
        f("show-policy-remediations", None, Bool),
        f("policy-pack", None, Arr),
        f("policy-pack-config", None, Arr),
        f("run-program", None, Bool),
        fo("attach-debugger", None, Arr, "program"),
    ];
    v.push(f("exclude", if op == "up" { None } else { Some('x') }, Arr));
    if op != "destroy" {
        v.push(f("exclude-dependents", None, Bool));
    }
    if crate::util::env_truthy("PULUMI_DEBUG_COMMANDS") {
        v.push(f("event-log", None, Str));
    }
    match op {
        "up" => v.extend([
            f("yes", Some('y'), Bool),
            f("skip-preview", Some('f'), Bool),
            f("expect-no-changes", None, Bool),
            f("replace", None, Arr),
            f("target-replace", None, Arr),
            f("continue-on-error", None, Bool),
            f("plan", None, Str),
            f("secrets-provider", None, Str),
            fo("refresh", Some('r'), Str, "true"),
            f("strict", None, Bool),
        ]),
        "preview" => v.extend([
            f("expect-no-changes", None, Bool),
            f("replace", None, Arr),
            f("target-replace", None, Arr),
            f("save-plan", None, Str),
            f("import-file", None, Str),
            fo("refresh", Some('r'), Str, "true"),
        ]),
        "refresh" => v.extend([
            f("yes", Some('y'), Bool),
            f("skip-preview", Some('f'), Bool),
            f("preview-only", None, Bool),
            f("expect-no-changes", None, Bool),
            f("clear-pending-creates", None, Bool),
            f("import-pending-creates", None, Arr),
            f("skip-pending-creates", None, Bool),
        ]),
        "destroy" => v.extend([
            f("yes", Some('y'), Bool),
            f("skip-preview", Some('f'), Bool),
            f("preview-only", None, Bool),
            f("continue-on-error", None, Bool),
            f("remove", None, Bool),
            f("exclude-protected", None, Bool),
            fo("refresh", Some('r'), Str, "true"),
        ]),
        _ => {}
    }
    v
}

/// Subcommands of a command group (`None` for leaf commands).
fn subcommands(path: &[&str]) -> Option<&'static [&'static str]> {
    match path {
        [] => Some(&[
            "version", "whoami", "about", "stack", "config", "preview", "up", "update", "refresh",
            "destroy", "cancel", "install", "plugin", "login", "logout",
        ]),
        ["stack"] => Some(&[
            "init", "new", "select", "ls", "list", "rm", "remove", "output", "history", "export",
            "import",
        ]),
        ["config"] => Some(&["set", "set-all", "get", "rm", "rm-all", "refresh", "env"]),
        ["config", "env"] => Some(&["add", "rm", "ls"]),
        ["plugin"] => Some(&["install", "ls", "rm"]),
        _ => None,
    }
}

/// Flags of a command (besides the global ones).
fn command_flags(path: &[&str]) -> Vec<Flag> {
    match path {
        ["preview"] => op_common("preview"),
        ["up"] => op_common("up"),
        ["refresh"] => op_common("refresh"),
        ["destroy"] => op_common("destroy"),
        ["version"] => vec![],
        ["whoami"] => vec![f("json", Some('j'), Bool)],
        ["about"] => vec![
            f("json", Some('j'), Bool),
            f("stack", Some('s'), Str),
            f("transitive", Some('t'), Bool),
        ],
        ["cancel"] => vec![f("stack", Some('s'), Str), f("yes", Some('y'), Bool)],
        ["install"] => vec![
            f("use-language-version-tools", None, Bool),
            f("no-plugins", None, Bool),
            f("no-dependencies", None, Bool),
            f("reinstall", None, Bool),
            f("parallel", None, Int),
        ],
        ["login"] => vec![
            f("local", Some('l'), Bool),
            f("cloud-url", Some('c'), Str),
            f("default-org", None, Str),
            f("insecure", None, Bool),
            f("interactive", None, Bool),
            f("oidc-token", None, Str),
            f("oidc-org", None, Str),
            f("oidc-team", None, Str),
            f("oidc-user", None, Str),
            f("oidc-expiration", None, Str),
        ],
        ["logout"] => vec![
            f("local", Some('l'), Bool),
            f("all", None, Bool),
            f("cloud-url", Some('c'), Str),
        ],
        ["plugin"] => vec![],
        ["plugin", "install"] => vec![
            f("exact", None, Bool),
            f("file", None, Str),
            f("reinstall", None, Bool),
            f("server", None, Str),
            f("checksum", None, Str),
        ],
        ["plugin", "ls"] => vec![f("json", Some('j'), Bool), f("project", Some('p'), Bool)],
        ["plugin", "rm"] => vec![f("all", Some('a'), Bool), f("yes", Some('y'), Bool)],
        ["stack"] => vec![
            f("stack", Some('s'), Str),
            f("show-ids", Some('i'), Bool),
            f("show-name", None, Bool),
            f("show-urns", Some('u'), Bool),
            f("show-secrets", None, Bool),
        ],
        ["stack", "init"] => vec![
            f("stack", Some('s'), Str),
            f("secrets-provider", None, Str),
            f("copy-config-from", None, Str),
            f("no-select", None, Bool),
            f("teams", None, Arr),
            f("yes", None, Bool),
        ],
        ["stack", "select"] => vec![
            f("stack", Some('s'), Str),
            f("create", Some('c'), Bool),
            f("secrets-provider", None, Str),
        ],
        ["stack", "ls"] => vec![
            f("json", Some('j'), Bool),
            f("all", Some('a'), Bool),
            f("organization", Some('o'), Str),
            f("project", Some('p'), Str),
            f("tag", Some('t'), Str),
        ],
        ["stack", "rm"] => vec![
            f("stack", Some('s'), Str),
            f("yes", Some('y'), Bool),
            f("force", Some('f'), Bool),
            f("preserve-config", None, Bool),
            f("remove-backups", None, Bool),
        ],
        ["stack", "output"] => vec![
            f("stack", Some('s'), Str),
            f("json", Some('j'), Bool),
            f("show-secrets", None, Bool),
            f("shell", None, Bool),
        ],
        ["stack", "history"] => vec![
            f("stack", Some('s'), Str),
            f("json", Some('j'), Bool),
            f("output", Some('o'), Str),
            f("show-secrets", None, Bool),
            f("page-size", None, Int),
            f("page", None, Int),
            f("full-dates", None, Bool),
        ],
        ["stack", "export"] => vec![
            f("stack", Some('s'), Str),
            f("file", None, Str),
            f("show-secrets", None, Bool),
            f("version", None, Str),
        ],
        ["stack", "import"] => vec![
            f("stack", Some('s'), Str),
            f("file", None, Str),
            f("force", Some('f'), Bool),
        ],
        ["config"] => vec![
            f("stack", Some('s'), Str),
            f("config-file", None, Str),
            f("json", Some('j'), Bool),
            f("show-secrets", None, Bool),
            f("open", None, Bool),
        ],
        ["config", "set"] => vec![
            f("stack", Some('s'), Str),
            f("config-file", None, Str),
            f("path", None, Bool),
            f("plaintext", None, Bool),
            f("secret", None, Bool),
            f("type", None, Str),
        ],
        ["config", "set-all"] => {
            let mut v = vec![
                f("stack", Some('s'), Str),
                f("config-file", None, Str),
                f("path", None, Bool),
                f("plaintext", None, Arr),
                f("secret", None, Arr),
            ];
            if crate::version_at_least(3, 202, 0) {
                v.push(f("json", None, Str));
            }
            v
        }
        ["config", "get"] => vec![
            f("stack", Some('s'), Str),
            f("config-file", None, Str),
            f("path", None, Bool),
            f("json", Some('j'), Bool),
            f("open", None, Bool),
        ],
        ["config", "rm"] | ["config", "rm-all"] => vec![
            f("stack", Some('s'), Str),
            f("config-file", None, Str),
            f("path", None, Bool),
        ],
        ["config", "refresh"] => vec![
            f("stack", Some('s'), Str),
            f("config-file", None, Str),
            f("force", Some('f'), Bool),
        ],
        ["config", "env"] => vec![f("stack", Some('s'), Str), f("config-file", None, Str)],
        ["config", "env", _] => vec![
            f("stack", Some('s'), Str),
            f("config-file", None, Str),
            f("yes", Some('y'), Bool),
            f("show-secrets", None, Bool),
            f("json", Some('j'), Bool),
        ],
        _ => vec![],
    }
}

fn canonical(word: &str) -> &str {
    match word {
        "update" => "up",
        "new" => "init",
        "list" => "ls",
        "remove" => "rm",
        other => other,
    }
}

/// The result of parsing argv.
#[derive(Debug, Default)]
pub struct Parsed {
    pub path: Vec<String>,
    pub args: Vec<String>,
    values: HashMap<&'static str, Vec<String>>,
}

impl Parsed {
    pub fn cmd(&self) -> Vec<&str> {
        self.path.iter().map(|s| s.as_str()).collect()
    }
    pub fn bool(&self, name: &str) -> bool {
        self.values
            .get(name)
            .and_then(|v| v.last())
            .map(|v| parse_go_bool(v).unwrap_or(false))
            .unwrap_or(false)
    }
    pub fn str(&self, name: &str) -> Option<String> {
        self.values.get(name).and_then(|v| v.last()).cloned()
    }
    pub fn arr(&self, name: &str) -> Vec<String> {
        self.values.get(name).cloned().unwrap_or_default()
    }
    pub fn int(&self, name: &str) -> Option<i64> {
        self.str(name).and_then(|s| s.parse().ok())
    }
}

fn flag_desc(fl: &Flag) -> String {
    match fl.short {
        Some(c) => format!("-{c}, --{}", fl.name),
        None => format!("--{}", fl.name),
    }
}

fn invocation(msg: String) -> Failure {
    Failure::new(exit::CONFIGURATION, msg)
}

fn set_value(values: &mut HashMap<&'static str, Vec<String>>, fl: &Flag, raw: &str) -> Res<()> {
    match fl.kind {
        Bool => {
            if parse_go_bool(raw).is_none() {
                return Err(invocation(format!(
                    "invalid argument \"{raw}\" for \"{}\" flag: strconv.ParseBool: parsing \"{raw}\": invalid syntax",
                    flag_desc(fl)
                )));
            }
            values.insert(fl.name, vec![raw.to_string()]);
        }
        Int => {
            if raw.parse::<i64>().is_err() {
                return Err(invocation(format!(
                    "invalid argument \"{raw}\" for \"{}\" flag: strconv.ParseInt: parsing \"{raw}\": invalid syntax",
                    flag_desc(fl)
                )));
            }
            values.insert(fl.name, vec![raw.to_string()]);
        }
        Str => {
            values.insert(fl.name, vec![raw.to_string()]);
        }
        Arr => values.entry(fl.name).or_default().push(raw.to_string()),
    }
    Ok(())
}

/// Parses argv (without the program name) like cobra would for the real CLI.
pub fn parse(argv: &[String]) -> Res<Parsed> {
    let globals = global_flags();
    // 1. Find the command path: walk non-flag words, skipping the values of known flags.
    let mut path: Vec<&str> = Vec::new();
    let mut consumed = vec![false; argv.len()];
    let mut i = 0;
    while i < argv.len() {
        let a = argv[i].as_str();
        if a == "--" {
            break;
        }
        if a.starts_with('-') && a.len() > 1 {
            let mut known = globals.clone();
            known.extend(command_flags(&path));
            if !a.contains('=') && needs_value(a, &known) {
                i += 1;
            }
            i += 1;
            continue;
        }
        match subcommands(&path) {
            Some(subs) => {
                let w = canonical(a);
                if let Some(s) = subs.iter().find(|s| **s == w) {
                    path.push(s);
                    consumed[i] = true;
                } else if path.is_empty() || path == ["config"] || path == ["stack"] {
                    let parent = if path.is_empty() {
                        "pulumi".to_string()
                    } else {
                        format!("pulumi {}", path.join(" "))
                    };
                    return Err(invocation(format!(
                        "unknown command \"{a}\" for \"{parent}\""
                    )));
                } else {
                    break;
                }
            }
            None => break,
        }
        i += 1;
    }
    let mut flags = globals;
    flags.extend(command_flags(&path));

    // 2. Parse flags and positional arguments.
    let mut values: HashMap<&'static str, Vec<String>> = HashMap::new();
    let mut args = Vec::new();
    let mut i = 0;
    while i < argv.len() {
        if consumed[i] {
            i += 1;
            continue;
        }
        let a = &argv[i];
        if a == "--" {
            args.extend(argv[i + 1..].iter().cloned());
            break;
        }
        if let Some(long) = a.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let Some(fl) = flags.iter().find(|fl| fl.name == name) else {
                return Err(invocation(format!("unknown flag: --{name}")));
            };
            let value = match inline {
                Some(v) => v,
                None if fl.kind == Bool => "true".to_string(),
                None if fl.no_opt.is_some() => fl.no_opt.unwrap_or_default().to_string(),
                None => {
                    if i + 1 < argv.len() {
                        i += 1;
                        argv[i].clone()
                    } else {
                        return Err(invocation(format!("flag needs an argument: --{name}")));
                    }
                }
            };
            set_value(&mut values, fl, &value)?;
        } else if a.starts_with('-') && a.len() > 1 {
            let chars: Vec<char> = a[1..].chars().collect();
            let mut j = 0;
            while j < chars.len() {
                let c = chars[j];
                let Some(fl) = flags.iter().find(|fl| fl.short == Some(c)) else {
                    return Err(invocation(format!("unknown shorthand flag: '{c}' in {a}")));
                };
                let rest: String = chars[j + 1..].iter().collect();
                if let Some(v) = rest.strip_prefix('=') {
                    set_value(&mut values, fl, v)?;
                    break;
                }
                if fl.kind == Bool {
                    set_value(&mut values, fl, "true")?;
                    j += 1;
                    continue;
                }
                if !rest.is_empty() {
                    set_value(&mut values, fl, &rest)?;
                    break;
                }
                if let Some(d) = fl.no_opt {
                    set_value(&mut values, fl, d)?;
                    break;
                }
                if i + 1 < argv.len() {
                    i += 1;
                    set_value(&mut values, fl, &argv[i].clone())?;
                } else {
                    return Err(invocation(format!("flag needs an argument: '{c}' in -{c}")));
                }
                break;
            }
        } else {
            args.push(a.clone());
        }
        i += 1;
    }

    // 3. PULUMI_OPTION_<FLAG> environment defaults (≥ 3.208); an explicit flag wins.
    if crate::version_at_least(3, 208, 0) {
        for fl in &flags {
            if values.contains_key(fl.name) || fl.name == "help" {
                continue;
            }
            let var = format!(
                "PULUMI_OPTION_{}",
                fl.name.to_ascii_uppercase().replace('-', "_")
            );
            if let Ok(v) = std::env::var(&var) {
                if fl.kind == Arr {
                    for part in v.split(',') {
                        set_value(&mut values, fl, part)?;
                    }
                } else {
                    set_value(&mut values, fl, &v)?;
                }
            }
        }
    }

    Ok(Parsed {
        path: path.iter().map(|s| s.to_string()).collect(),
        args,
        values,
    })
}

fn needs_value(token: &str, known: &[Flag]) -> bool {
    let fl = if let Some(long) = token.strip_prefix("--") {
        known.iter().find(|f| f.name == long)
    } else {
        let c = token[1..].chars().last();
        if token.len() != 2 {
            return false;
        }
        known.iter().find(|f| f.short == c)
    };
    matches!(fl, Some(fl) if fl.kind != Bool && fl.no_opt.is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Res<Parsed> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn globals_before_subcommand() {
        let r = p(&["--non-interactive", "stack", "select", "--stack", "dev"]).unwrap();
        assert_eq!(r.cmd(), vec!["stack", "select"]);
        assert!(r.bool("non-interactive"));
        assert_eq!(r.str("stack").as_deref(), Some("dev"));
        let r = p(&[
            "-C",
            "/tmp",
            "--color",
            "never",
            "config",
            "set-all",
            "--plaintext",
            "a=b",
            "--plaintext=c=d",
        ])
        .unwrap();
        assert_eq!(r.cmd(), vec!["config", "set-all"]);
        assert_eq!(r.arr("plaintext"), vec!["a=b", "c=d"]);
        assert_eq!(r.str("cwd").as_deref(), Some("/tmp"));
    }

    #[test]
    fn shorthand_and_dashdash() {
        let r = p(&[
            "up",
            "-yf",
            "-sdev",
            "-v=3",
            "--message=hi there",
            "--target",
            "u1",
            "-t",
            "u2",
        ])
        .unwrap();
        assert!(r.bool("yes") && r.bool("skip-preview"));
        assert_eq!(r.str("stack").as_deref(), Some("dev"));
        assert_eq!(r.int("verbose"), Some(3));
        assert_eq!(r.arr("target"), vec!["u1", "u2"]);
        let r = p(&["config", "set", "key", "--secret", "--", "-value"]).unwrap();
        assert_eq!(r.args, vec!["key", "-value"]);
        assert!(r.bool("secret"));
        let r = p(&["up", "--refresh", "--suppress-permalink"]).unwrap();
        assert_eq!(r.str("refresh").as_deref(), Some("true"));
        assert_eq!(r.str("suppress-permalink").as_deref(), Some("false"));
    }

    #[test]
    fn unknown_flags_and_commands() {
        let e = p(&["up", "--bogus"]).unwrap_err();
        assert_eq!(e.message.as_deref(), Some("unknown flag: --bogus"));
        assert_eq!(e.code, 2);
        let e = p(&["preview", "--yes"]).unwrap_err();
        assert_eq!(e.message.as_deref(), Some("unknown flag: --yes"));
        let e = p(&["preview", "-y"]).unwrap_err();
        assert_eq!(
            e.message.as_deref(),
            Some("unknown shorthand flag: 'y' in -y")
        );
        let e = p(&["frobnicate"]).unwrap_err();
        assert_eq!(
            e.message.as_deref(),
            Some("unknown command \"frobnicate\" for \"pulumi\"")
        );
        let e = p(&["up", "--parallel", "x"]).unwrap_err();
        assert!(e
            .message
            .unwrap()
            .starts_with("invalid argument \"x\" for \"-p, --parallel\" flag"));
        let e = p(&["up", "--stack"]).unwrap_err();
        assert_eq!(
            e.message.as_deref(),
            Some("flag needs an argument: --stack")
        );
    }
}
