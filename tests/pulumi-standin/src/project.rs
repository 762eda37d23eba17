//! `Pulumi.yaml` (the project) and `Pulumi.<stack>.yaml` (stack settings and config), with the
//! CLI's config key rules: `<namespace>:<name>` keys, `--path` property paths and value coercion.

use crate::crypto::Secrets;
use crate::util::{err, Res};
use crate::value::{yaml_key, Val};
use serde_json::Value as J;
use serde_yaml::{Mapping, Value as Y};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug)]
pub struct Project {
    pub name: String,
    pub dir: PathBuf,
    pub file: PathBuf,
    pub runtime: String,
    pub main: Option<String>,
    pub stack_config_dir: Option<String>,
    pub backend_url: Option<String>,
    pub doc: Mapping,
}

pub const PROJECT_FILES: [&str; 3] = ["Pulumi.yaml", "Pulumi.yml", "Pulumi.json"];

/// Finds `Pulumi.yaml` in `cwd` or its parents.
pub fn find_project(cwd: &Path) -> Res<Project> {
    let mut dir = Some(cwd);
    while let Some(d) = dir {
        for name in PROJECT_FILES {
            let p = d.join(name);
            if p.is_file() {
                return load_project(&p);
            }
        }
        dir = d.parent();
    }
    err(format!(
        "no Pulumi.yaml project file found (searching upwards from {}). If you have not created a project yet, use `pulumi new` to do so: no project file found",
        cwd.display()
    ))
}

pub fn load_project(path: &Path) -> Res<Project> {
    let text = std::fs::read_to_string(path)?;
    let doc: Y = if path.extension().and_then(|e| e.to_str()) == Some("json") {
        serde_json::from_str::<J>(&text)
            .map_err(|e| e.to_string())
            .and_then(|j| serde_yaml::to_value(j).map_err(|e| e.to_string()))
            .or_else(|e| err(format!("could not unmarshal '{}': {e}", path.display())))?
    } else {
        serde_yaml::from_str(&text).or_else(|e| {
            err(format!(
                "could not unmarshal '{}': yaml: {e}",
                path.display()
            ))
        })?
    };
    let doc = match doc {
        Y::Mapping(m) => m,
        Y::Null => Mapping::new(),
        _ => {
            return err(format!(
                "could not unmarshal '{}': project file must be a mapping",
                path.display()
            ))
        }
    };
    let name = match doc.get("name") {
        Some(Y::String(s)) if !s.is_empty() => s.clone(),
        _ => return err("project is missing a 'name' attribute"),
    };
    let runtime = match doc.get("runtime") {
        Some(Y::String(s)) => s.clone(),
        Some(Y::Mapping(m)) => m
            .get("name")
            .and_then(Y::as_str)
            .unwrap_or_default()
            .to_string(),
        _ => String::new(),
    };
    let backend_url = doc
        .get("backend")
        .and_then(|b| b.get("url"))
        .and_then(Y::as_str)
        .map(str::to_string);
    Ok(Project {
        name,
        dir: path.parent().unwrap_or(Path::new(".")).to_path_buf(),
        file: path.to_path_buf(),
        runtime,
        main: doc.get("main").and_then(Y::as_str).map(str::to_string),
        stack_config_dir: doc
            .get("stackConfigDir")
            .and_then(Y::as_str)
            .map(str::to_string),
        backend_url,
        doc,
    })
}

impl Project {
    /// Path of `Pulumi.<stack>.yaml` (honouring `stackConfigDir` and `--config-file`).
    pub fn stack_file_path(&self, stack: &str, config_file: Option<&str>) -> PathBuf {
        if let Some(f) = config_file {
            return std::path::absolute(f).unwrap_or_else(|_| PathBuf::from(f));
        }
        let short = stack.rsplit('/').next().unwrap_or(stack);
        let dir = match &self.stack_config_dir {
            Some(d) => self.dir.join(d),
            None => self.dir.clone(),
        };
        dir.join(format!("Pulumi.{short}.yaml"))
    }
}

/// The content of `Pulumi.<stack>.yaml`.
#[derive(Clone, Debug, Default)]
pub struct StackFile {
    pub path: PathBuf,
    pub secrets_provider: Option<String>,
    pub encrypted_key: Option<String>,
    pub encryption_salt: Option<String>,
    pub config: BTreeMap<String, Y>,
    pub environment: Option<Y>,
    pub other: Mapping,
    pub exists: bool,
}

impl StackFile {
    pub fn load(path: &Path) -> Res<StackFile> {
        let mut sf = StackFile {
            path: path.to_path_buf(),
            ..Default::default()
        };
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(sf),
            Err(e) => return Err(e.into()),
        };
        sf.exists = true;
        let doc: Y = serde_yaml::from_str(&text).or_else(|e| {
            err(format!(
                "could not unmarshal '{}': yaml: {e}",
                path.display()
            ))
        })?;
        let Y::Mapping(m) = doc else {
            return Ok(sf);
        };
        for (k, v) in m {
            match k.as_str().unwrap_or_default() {
                "secretsprovider" => sf.secrets_provider = v.as_str().map(str::to_string),
                "encryptedkey" => sf.encrypted_key = v.as_str().map(str::to_string),
                "encryptionsalt" => sf.encryption_salt = v.as_str().map(str::to_string),
                "config" => {
                    if let Y::Mapping(c) = v {
                        for (ck, cv) in c {
                            sf.config.insert(yaml_key(&ck), cv);
                        }
                    }
                }
                "environment" => sf.environment = Some(v),
                _ => {
                    sf.other.insert(k, v);
                }
            }
        }
        Ok(sf)
    }

    pub fn save(&self) -> Res<()> {
        let mut m = Mapping::new();
        if let Some(s) = &self.secrets_provider {
            m.insert("secretsprovider".into(), s.clone().into());
        }
        if let Some(s) = &self.encrypted_key {
            m.insert("encryptedkey".into(), s.clone().into());
        }
        if let Some(s) = &self.encryption_salt {
            m.insert("encryptionsalt".into(), s.clone().into());
        }
        if !self.config.is_empty() {
            let mut c = Mapping::new();
            for (k, v) in &self.config {
                c.insert(k.clone().into(), v.clone());
            }
            m.insert("config".into(), Y::Mapping(c));
        }
        if let Some(e) = &self.environment {
            m.insert("environment".into(), e.clone());
        }
        for (k, v) in &self.other {
            m.insert(k.clone(), v.clone());
        }
        let text = if m.is_empty() {
            "{}\n".to_string()
        } else {
            serde_yaml::to_string(&Y::Mapping(m))
                .map_err(|e| crate::util::Failure::new(1, e.to_string()))?
        };
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&self.path, text)?;
        Ok(())
    }
}

/// `parseConfigKey`: bare keys get `<project>:`; `ns:config:name` is the legacy form of `ns:name`.
pub fn parse_key(raw: &str, project: &str) -> Res<String> {
    // Keys whose name part is a bracketed path may contain ':' inside brackets.
    let (head, bracket) = match raw.find('[') {
        Some(i) => (&raw[..i], &raw[i..]),
        None => (raw, ""),
    };
    let parts: Vec<&str> = head.split(':').collect();
    let key = match parts.as_slice() {
        [name] => format!("{project}:{name}{bracket}"),
        [ns, name] => format!("{ns}:{name}{bracket}"),
        [ns, "config", name] => format!("{ns}:{name}{bracket}"),
        _ => {
            return err(format!(
                "could not parse {raw} as a configuration key (configuration keys should be of the form `<namespace>:<name>`)"
            ))
        }
    };
    Ok(key)
}

#[derive(Clone, Debug, PartialEq)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// Parses a property path such as `a.b[0]["c.d"]`.
pub fn parse_path(p: &str) -> Res<Vec<Seg>> {
    let bad = || err(format!("invalid config key path: {p}"));
    let chars: Vec<char> = p.chars().collect();
    let mut segs = Vec::new();
    let mut i = 0;
    let mut expect_key = true;
    while i < chars.len() {
        match chars[i] {
            '[' => {
                i += 1;
                if i < chars.len() && chars[i] == '"' {
                    i += 1;
                    let mut s = String::new();
                    while i < chars.len() && chars[i] != '"' {
                        if chars[i] == '\\' && i + 1 < chars.len() {
                            i += 1;
                        }
                        s.push(chars[i]);
                        i += 1;
                    }
                    if i + 1 >= chars.len() || chars[i + 1] != ']' {
                        return bad();
                    }
                    i += 2;
                    segs.push(Seg::Key(s));
                } else {
                    let start = i;
                    while i < chars.len() && chars[i] != ']' {
                        i += 1;
                    }
                    if i >= chars.len() {
                        return bad();
                    }
                    let n: String = chars[start..i].iter().collect();
                    let Ok(idx) = n.parse::<usize>() else {
                        return bad();
                    };
                    segs.push(Seg::Index(idx));
                    i += 1;
                }
                expect_key = false;
            }
            '.' => {
                if segs.is_empty() {
                    return bad();
                }
                i += 1;
                expect_key = true;
            }
            _ => {
                if !expect_key {
                    return bad();
                }
                let start = i;
                while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                    i += 1;
                }
                segs.push(Seg::Key(chars[start..i].iter().collect()));
                expect_key = false;
            }
        }
    }
    if segs.is_empty() || expect_key && !segs.is_empty() && p.ends_with('.') {
        return bad();
    }
    if !matches!(segs[0], Seg::Key(_)) {
        return bad();
    }
    Ok(segs)
}

/// `coerce` for multi-segment paths: `true`/`false` and canonical decimal integers.
pub fn coerce(s: &str) -> Y {
    match s {
        "true" => return Y::Bool(true),
        "false" => return Y::Bool(false),
        _ => {}
    }
    if let Ok(i) = s.parse::<i64>() {
        if i.to_string() == s {
            return Y::Number(i.into());
        }
    }
    Y::String(s.to_string())
}

pub fn secure(ct: String) -> Y {
    let mut m = Mapping::new();
    m.insert("secure".into(), ct.into());
    Y::Mapping(m)
}

pub fn as_secure(v: &Y) -> Option<&str> {
    match v {
        Y::Mapping(m) if m.len() == 1 => m.get("secure").and_then(Y::as_str),
        _ => None,
    }
}

/// Splits `ns:name` + path mode into the top-level config key and the remaining path.
fn split_key(key: &str, path: bool) -> Res<(String, Vec<Seg>)> {
    let (ns, name) = key.split_once(':').unwrap_or(("", key));
    if !path {
        return Ok((key.to_string(), vec![]));
    }
    let segs = parse_path(name)?;
    let Seg::Key(first) = &segs[0] else {
        return err(format!("invalid config key path: {name}"));
    };
    Ok((format!("{ns}:{first}"), segs[1..].to_vec()))
}

/// Sets a config value. `leaf` is the plain string, or the `{secure: …}` map for secrets.
pub fn config_set(cfg: &mut BTreeMap<String, Y>, key: &str, path: bool, leaf: Y) -> Res<()> {
    let (top, rest) = split_key(key, path)?;
    if rest.is_empty() {
        cfg.insert(top, leaf);
        return Ok(());
    }
    let leaf = match leaf {
        Y::String(s) => coerce(&s),
        other => other,
    };
    let root = cfg.entry(top.clone()).or_insert(Y::Null);
    let mut cur = root;
    for (i, seg) in rest.iter().enumerate() {
        let last = i == rest.len() - 1;
        let next_is_index = !last && matches!(rest[i + 1], Seg::Index(_));
        let fresh = || {
            if next_is_index {
                Y::Sequence(vec![])
            } else {
                Y::Mapping(Mapping::new())
            }
        };
        match seg {
            Seg::Key(k) => {
                if !matches!(cur, Y::Mapping(_)) || as_secure(cur).is_some() {
                    if matches!(cur, Y::Sequence(_)) {
                        return err(format!("an existing value at {key} is not an object"));
                    }
                    *cur = Y::Mapping(Mapping::new());
                }
                let Y::Mapping(m) = cur else { unreachable!() };
                let kk = Y::String(k.clone());
                if last {
                    m.insert(kk, leaf);
                    return Ok(());
                }
                if !m.contains_key(&kk) {
                    m.insert(kk.clone(), fresh());
                }
                cur = m.get_mut(&kk).expect("inserted");
            }
            Seg::Index(idx) => {
                if !matches!(cur, Y::Sequence(_)) {
                    if matches!(cur, Y::Null) {
                        *cur = Y::Sequence(vec![]);
                    } else {
                        return err(format!("an existing value at {key} is not an array"));
                    }
                }
                let Y::Sequence(s) = cur else { unreachable!() };
                if *idx > s.len() {
                    return err(format!("array index {idx} out of range for key {key}"));
                }
                if *idx == s.len() {
                    s.push(fresh());
                }
                if last {
                    s[*idx] = leaf;
                    return Ok(());
                }
                if matches!(s[*idx], Y::Null) {
                    s[*idx] = fresh();
                }
                cur = &mut s[*idx];
            }
        }
    }
    Ok(())
}

pub fn config_get<'a>(cfg: &'a BTreeMap<String, Y>, key: &str, path: bool) -> Res<Option<&'a Y>> {
    let (top, rest) = split_key(key, path)?;
    let mut cur = match cfg.get(&top) {
        Some(v) => v,
        None => return Ok(None),
    };
    for seg in rest {
        cur = match (seg, cur) {
            (Seg::Key(k), Y::Mapping(m)) => match m.get(k.as_str()) {
                Some(v) => v,
                None => return Ok(None),
            },
            (Seg::Index(i), Y::Sequence(s)) => match s.get(i) {
                Some(v) => v,
                None => return Ok(None),
            },
            _ => return Ok(None),
        };
    }
    Ok(Some(cur))
}

pub fn config_rm(cfg: &mut BTreeMap<String, Y>, key: &str, path: bool) -> Res<()> {
    let (top, rest) = split_key(key, path)?;
    if rest.is_empty() {
        cfg.remove(&top);
        return Ok(());
    }
    let Some(mut cur) = cfg.get_mut(&top) else {
        return Ok(());
    };
    for (i, seg) in rest.iter().enumerate() {
        let last = i == rest.len() - 1;
        match (seg, cur) {
            (Seg::Key(k), Y::Mapping(m)) => {
                if last {
                    m.remove(k.as_str());
                    return Ok(());
                }
                match m.get_mut(k.as_str()) {
                    Some(v) => cur = v,
                    None => return Ok(()),
                }
            }
            (Seg::Index(idx), Y::Sequence(s)) => {
                if last {
                    if *idx < s.len() {
                        s.remove(*idx);
                    }
                    return Ok(());
                }
                match s.get_mut(*idx) {
                    Some(v) => cur = v,
                    None => return Ok(()),
                }
            }
            _ => return Ok(()),
        }
    }
    Ok(())
}

/// True when a stored config value is or contains a `secure:` leaf.
pub fn has_secure(v: &Y) -> bool {
    if as_secure(v).is_some() {
        return true;
    }
    match v {
        Y::Mapping(m) => m.values().any(has_secure),
        Y::Sequence(s) => s.iter().any(has_secure),
        _ => false,
    }
}

/// Decodes a stored config value into a [`Val`], decrypting `secure:` leaves. With
/// `secrets == None`, secrets become `Secret("[secret]")` without decryption.
pub fn decode_value(v: &Y, secrets: Option<&Secrets>) -> Res<Val> {
    if let Some(ct) = as_secure(v) {
        return Ok(Val::secret(match secrets {
            Some(s) => Val::Str(s.decrypt(ct)?),
            None => Val::Str("[secret]".into()),
        }));
    }
    Ok(match v {
        Y::Mapping(m) => {
            let mut out = BTreeMap::new();
            for (k, v) in m {
                out.insert(yaml_key(k), decode_value(v, secrets)?);
            }
            Val::Map(out)
        }
        Y::Sequence(s) => Val::List(
            s.iter()
                .map(|x| decode_value(x, secrets))
                .collect::<Res<Vec<_>>>()?,
        ),
        other => Val::from_yaml(other),
    })
}

/// The JSON shape `{"value"?, "objectValue"?, "secret"}` used by `config --json`, `config get
/// --json` and history. `show` decides whether secret values are included.
pub fn value_json(v: &Y, secrets: Option<&Secrets>, show: bool) -> Res<J> {
    let secret = has_secure(v);
    let mut o = serde_json::Map::new();
    if !secret || show {
        let val = decode_value(v, if show { secrets } else { None })?;
        let plain = val.unsecret();
        match &plain {
            Val::Map(_) | Val::List(_) => {
                let j = plain.to_json(crate::value::Show::Plain);
                o.insert("value".into(), J::String(serde_json::to_string(&j)?));
                o.insert("objectValue".into(), j);
            }
            other => {
                let s = other.interp_string();
                // Secret objects set with `set-all --json` are stored as one encrypted JSON text.
                if secret && (s.starts_with('{') || s.starts_with('[')) {
                    if let Ok(j) = serde_json::from_str::<J>(&s) {
                        o.insert("value".into(), J::String(s.clone()));
                        o.insert("objectValue".into(), j);
                        o.insert("secret".into(), J::Bool(true));
                        return Ok(J::Object(o));
                    }
                }
                o.insert("value".into(), J::String(s));
            }
        }
    }
    o.insert("secret".into(), J::Bool(secret));
    Ok(J::Object(o))
}

/// Splits a `key=value` pair like `parseKeyValuePair`: on the first `=`, unless the key starts
/// with a quote, in which case it ends at the matching quote followed by `=`.
pub fn split_pair(pair: &str) -> Res<(String, String)> {
    let bad = || {
        err(format!(
            "could not parse key-value pair {pair}: config must be specified in the form `key=value`"
        ))
    };
    if let Some(q) = pair.chars().next().filter(|c| *c == '"' || *c == '\'') {
        let pat = format!("{q}=");
        match pair[1..].find(&pat) {
            Some(i) => {
                let key = &pair[1..1 + i];
                let value = &pair[1 + i + 2..];
                return Ok((key.to_string(), value.to_string()));
            }
            None => return bad(),
        }
    }
    match pair.split_once('=') {
        Some((k, v)) => Ok((k.to_string(), v.to_string())),
        None => bad(),
    }
}

/// Config as `{"ns:key": "value"}` strings for the prelude event (secrets blinded).
pub fn prelude_config(cfg: &BTreeMap<String, Y>) -> J {
    let mut o = serde_json::Map::new();
    for (k, v) in cfg {
        let s = if has_secure(v) {
            "[secret]".to_string()
        } else {
            match decode_value(v, None) {
                Ok(Val::Map(_)) | Ok(Val::List(_)) => decode_value(v, None)
                    .map(|x| {
                        serde_json::to_string(&x.to_json(crate::value::Show::Plain))
                            .unwrap_or_default()
                    })
                    .unwrap_or_default(),
                Ok(x) => x.interp_string(),
                Err(_) => String::new(),
            }
        };
        o.insert(k.clone(), J::String(s));
    }
    J::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys() {
        assert_eq!(parse_key("foo", "proj").unwrap(), "proj:foo");
        assert_eq!(parse_key("aws:region", "proj").unwrap(), "aws:region");
        assert_eq!(
            parse_key("aws:config:region", "proj").unwrap(),
            "aws:region"
        );
        assert_eq!(parse_key("proj:[\"a:b\"]", "x").unwrap(), "proj:[\"a:b\"]");
        assert!(parse_key("a:b:c:d", "p").is_err());
    }

    #[test]
    fn paths() {
        assert_eq!(
            parse_path("a.b[0][\"c.d\"]").unwrap(),
            vec![
                Seg::Key("a".into()),
                Seg::Key("b".into()),
                Seg::Index(0),
                Seg::Key("c.d".into())
            ]
        );
        assert_eq!(
            parse_path("[\"x.y\"]").unwrap(),
            vec![Seg::Key("x.y".into())]
        );
    }

    #[test]
    fn set_with_path_coerces() {
        let mut cfg = BTreeMap::new();
        config_set(&mut cfg, "proj:a.b[0]", true, Y::String("x".into())).unwrap();
        config_set(&mut cfg, "proj:a.c", true, Y::String("true".into())).unwrap();
        config_set(&mut cfg, "proj:a.n", true, Y::String("42".into())).unwrap();
        config_set(&mut cfg, "proj:a.z", true, Y::String("042".into())).unwrap();
        config_set(&mut cfg, "proj:[\"x.y\"]", true, Y::String("true".into())).unwrap();
        let y = serde_yaml::to_string(&cfg).unwrap();
        assert_eq!(
            y,
            "proj:a:\n  b:\n  - x\n  c: true\n  n: 42\n  z: '042'\nproj:x.y: 'true'\n"
        );
        assert_eq!(
            config_get(&cfg, "proj:a.b[0]", true).unwrap(),
            Some(&Y::String("x".into()))
        );
        config_rm(&mut cfg, "proj:a.c", true).unwrap();
        assert!(config_get(&cfg, "proj:a.c", true).unwrap().is_none());
    }

    #[test]
    fn pairs() {
        assert_eq!(split_pair("a=b=c").unwrap(), ("a".into(), "b=c".into()));
        assert_eq!(split_pair("\"a=b\"=c").unwrap(), ("a=b".into(), "c".into()));
        assert!(split_pair("novalue").is_err());
    }

    #[test]
    fn value_json_shapes() {
        let v: Y = serde_yaml::from_str("{inner: my_value, count: 3}").unwrap();
        let j = value_json(&v, None, false).unwrap();
        assert_eq!(j["objectValue"]["count"], 3);
        assert_eq!(j["secret"], false);
        let s = secure("v1:abc:def".into());
        let j = value_json(&s, None, false).unwrap();
        assert_eq!(j, json!({"secret": true}));
    }
}
