//! Property values as the engine sees them: JSON-like data plus "secret" and "unknown" marks.

use crate::crypto::Secrets;
use crate::util::Res;
use serde_json::{json, Map as JMap, Value as J};
use std::collections::BTreeMap;

/// The signature key the real engine uses to mark special values in serialized state.
pub const SIG_KEY: &str = "4dabf18193072939515e22adb298388d";
/// The signature of a secret value.
pub const SECRET_SIG: &str = "1b47061264138c4ac30d75fd1eb44270";

#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    List(Vec<Val>),
    Map(BTreeMap<String, Val>),
    /// A secret value: its content is encrypted in state and shown as `[secret]`.
    Secret(Box<Val>),
    /// A value not known until the resource is created (previews).
    Unknown,
}

/// How secrets are rendered when a value is turned into plain JSON.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Show {
    /// Replace every secret by the string `"[secret]"`.
    Blind,
    /// Show the plaintext.
    Plain,
}

impl Val {
    pub fn secret(v: Val) -> Val {
        match v {
            Val::Secret(_) => v,
            other => Val::Secret(Box::new(other)),
        }
    }

    /// True when the value is or contains a secret.
    pub fn contains_secret(&self) -> bool {
        match self {
            Val::Secret(_) => true,
            Val::List(l) => l.iter().any(Val::contains_secret),
            Val::Map(m) => m.values().any(Val::contains_secret),
            _ => false,
        }
    }

    pub fn contains_unknown(&self) -> bool {
        match self {
            Val::Unknown => true,
            Val::Secret(v) => v.contains_unknown(),
            Val::List(l) => l.iter().any(Val::contains_unknown),
            Val::Map(m) => m.values().any(Val::contains_unknown),
            _ => false,
        }
    }

    /// Removes every secret mark, keeping the content.
    pub fn unsecret(&self) -> Val {
        match self {
            Val::Secret(v) => v.unsecret(),
            Val::List(l) => Val::List(l.iter().map(Val::unsecret).collect()),
            Val::Map(m) => Val::Map(m.iter().map(|(k, v)| (k.clone(), v.unsecret())).collect()),
            other => other.clone(),
        }
    }

    pub fn from_json(j: &J) -> Val {
        match j {
            J::Null => Val::Null,
            J::Bool(b) => Val::Bool(*b),
            J::Number(n) => Val::Num(n.as_f64().unwrap_or(0.0)),
            J::String(s) => Val::Str(s.clone()),
            J::Array(a) => Val::List(a.iter().map(Val::from_json).collect()),
            J::Object(o) => Val::Map(
                o.iter()
                    .map(|(k, v)| (k.clone(), Val::from_json(v)))
                    .collect(),
            ),
        }
    }

    pub fn from_yaml(y: &serde_yaml::Value) -> Val {
        use serde_yaml::Value as Y;
        match y {
            Y::Null => Val::Null,
            Y::Bool(b) => Val::Bool(*b),
            Y::Number(n) => Val::Num(n.as_f64().unwrap_or(0.0)),
            Y::String(s) => Val::Str(s.clone()),
            Y::Sequence(s) => Val::List(s.iter().map(Val::from_yaml).collect()),
            Y::Mapping(m) => Val::Map(
                m.iter()
                    .map(|(k, v)| (yaml_key(k), Val::from_yaml(v)))
                    .collect(),
            ),
            Y::Tagged(t) => Val::from_yaml(&t.value),
        }
    }

    /// Plain JSON, with secrets blinded or shown and unknowns as `"[unknown]"`.
    pub fn to_json(&self, show: Show) -> J {
        match self {
            Val::Null => J::Null,
            Val::Bool(b) => J::Bool(*b),
            Val::Num(n) => num_json(*n),
            Val::Str(s) => J::String(s.clone()),
            Val::List(l) => J::Array(l.iter().map(|v| v.to_json(show)).collect()),
            Val::Map(m) => J::Object(
                m.iter()
                    .map(|(k, v)| (k.clone(), v.to_json(show)))
                    .collect::<JMap<_, _>>(),
            ),
            Val::Secret(v) => match show {
                Show::Blind => J::String("[secret]".into()),
                Show::Plain => v.to_json(show),
            },
            Val::Unknown => J::String("[unknown]".into()),
        }
    }

    /// The serialized state form: secrets become `{sig, ciphertext}` objects.
    pub fn to_state(&self, secrets: &Secrets) -> Res<J> {
        Ok(match self {
            Val::Secret(v) => {
                let plain = serde_json::to_string(&v.to_json(Show::Plain))?;
                json!({ SIG_KEY: SECRET_SIG, "ciphertext": secrets.encrypt(&plain)? })
            }
            Val::List(l) => J::Array(
                l.iter()
                    .map(|v| v.to_state(secrets))
                    .collect::<Res<Vec<_>>>()?,
            ),
            Val::Map(m) => {
                let mut o = JMap::new();
                for (k, v) in m {
                    o.insert(k.clone(), v.to_state(secrets)?);
                }
                J::Object(o)
            }
            other => other.to_json(Show::Plain),
        })
    }

    /// Reads the serialized state form. Without a usable decrypter (`decrypt == None`) secrets
    /// come back as `Secret("[secret]")`.
    pub fn from_state(j: &J, secrets: Option<&Secrets>) -> Res<Val> {
        Ok(match j {
            J::Object(o) if o.get(SIG_KEY).and_then(J::as_str) == Some(SECRET_SIG) => {
                if let Some(p) = o.get("plaintext").and_then(J::as_str) {
                    let inner: J = serde_json::from_str(p).unwrap_or(J::String(p.to_string()));
                    return Ok(Val::secret(Val::from_json(&inner)));
                }
                let ct = o.get("ciphertext").and_then(J::as_str).unwrap_or("");
                match secrets {
                    Some(s) => {
                        let p = s.decrypt(ct)?;
                        let inner: J = serde_json::from_str(&p).unwrap_or(J::String(p));
                        Val::secret(Val::from_json(&inner))
                    }
                    None => Val::secret(Val::Str("[secret]".into())),
                }
            }
            J::Array(a) => Val::List(
                a.iter()
                    .map(|v| Val::from_state(v, secrets))
                    .collect::<Res<Vec<_>>>()?,
            ),
            J::Object(o) => {
                let mut m = BTreeMap::new();
                for (k, v) in o {
                    m.insert(k.clone(), Val::from_state(v, secrets)?);
                }
                Val::Map(m)
            }
            other => Val::from_json(other),
        })
    }

    /// String form used by interpolation (`"${a}-${b}"`), secrets and unknowns are handled by the caller.
    pub fn interp_string(&self) -> String {
        match self {
            Val::Null => String::new(),
            Val::Bool(b) => b.to_string(),
            Val::Num(n) => num_string(*n),
            Val::Str(s) => s.clone(),
            Val::Secret(v) => v.interp_string(),
            Val::Unknown => "[unknown]".into(),
            other => serde_json::to_string(&other.to_json(Show::Plain)).unwrap_or_default(),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Val::Str(s) => Some(s),
            Val::Secret(v) => v.as_str(),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Val::Num(n) => Some(*n),
            Val::Str(s) => s.trim().parse().ok(),
            Val::Secret(v) => v.as_f64(),
            _ => None,
        }
    }

    /// The type name for `output<...>` in previews and display.
    pub fn type_name(&self) -> &'static str {
        match self {
            Val::Null => "null",
            Val::Bool(_) => "bool",
            Val::Num(_) => "number",
            Val::Str(_) => "string",
            Val::List(_) => "array",
            Val::Map(_) => "object",
            Val::Secret(v) => v.type_name(),
            Val::Unknown => "string",
        }
    }
}

pub fn yaml_key(k: &serde_yaml::Value) -> String {
    match k {
        serde_yaml::Value::String(s) => s.clone(),
        serde_yaml::Value::Number(n) => n.to_string(),
        serde_yaml::Value::Bool(b) => b.to_string(),
        other => serde_yaml::to_string(other)
            .unwrap_or_default()
            .trim()
            .to_string(),
    }
}

pub fn num_json(n: f64) -> J {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        J::from(n as i64)
    } else {
        serde_json::Number::from_f64(n)
            .map(J::Number)
            .unwrap_or(J::Null)
    }
}

pub fn num_string(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blind_and_plain() {
        let v = Val::Map(BTreeMap::from([
            ("a".into(), Val::Str("x".into())),
            ("b".into(), Val::secret(Val::Num(3.0))),
        ]));
        assert!(v.contains_secret());
        assert_eq!(v.to_json(Show::Blind), json!({"a": "x", "b": "[secret]"}));
        assert_eq!(v.to_json(Show::Plain), json!({"a": "x", "b": 3}));
    }

    #[test]
    fn state_roundtrip() {
        let (_, c) = crate::crypto::new_salt_state("pw");
        let s = Secrets::Ready(c);
        let v = Val::List(vec![
            Val::secret(Val::Str("hidden".into())),
            Val::Bool(true),
        ]);
        let st = v.to_state(&s).unwrap();
        assert_eq!(st[0][SIG_KEY], SECRET_SIG);
        assert!(!st.to_string().contains("hidden"));
        assert_eq!(Val::from_state(&st, Some(&s)).unwrap(), v);
        let blind = Val::from_state(&st, None).unwrap();
        assert_eq!(blind.to_json(Show::Blind), json!(["[secret]", true]));
    }
}
