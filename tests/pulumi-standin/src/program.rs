//! A Pulumi YAML program evaluator: `config` (typed, defaults, secret), `variables`,
//! `resources`, `outputs`, `${...}` interpolation and a few `fn::` functions, with secretness
//! propagating like the real engine (a value derived from a secret is secret).

use crate::project::Project;
use crate::util::{b64_decode, b64_encode};
use crate::value::{yaml_key, Show, Val};
use serde_yaml::{Mapping, Value as Y};
use std::collections::{BTreeMap, HashMap, HashSet};

/// Resource types the stand-in implements (see README.md).
pub const KNOWN_TYPES: [&str; 5] = [
    "standin:index:Record",
    "standin:index:Fail",
    "standin:index:Sleep",
    "time:Sleep",
    "time:index:Sleep",
];

#[derive(Clone, Debug, Default)]
pub struct ConfigDecl {
    pub typ: Option<String>,
    pub default: Option<Y>,
    pub secret: bool,
}

#[derive(Clone, Debug)]
pub struct ResourceDecl {
    pub name: String,
    pub typ: String,
    pub properties: Y,
    pub options: Mapping,
}

#[derive(Clone, Debug, Default)]
pub struct Template {
    pub file: String,
    pub config: Vec<(String, ConfigDecl)>,
    pub variables: Vec<(String, Y)>,
    pub resources: Vec<ResourceDecl>,
    pub outputs: Vec<(String, Y)>,
}

fn entries(v: Option<&Y>) -> Vec<(String, Y)> {
    match v {
        Some(Y::Mapping(m)) => m.iter().map(|(k, v)| (yaml_key(k), v.clone())).collect(),
        _ => vec![],
    }
}

/// Loads the program of a `runtime: yaml` project: `Main.yaml` when present (in `main:` or the
/// project directory), otherwise the sections of `Pulumi.yaml` itself.
pub fn load_template(project: &Project) -> Result<Template, String> {
    let dir = match &project.main {
        Some(m) => project.dir.join(m),
        None => project.dir.clone(),
    };
    let main = dir.join("Main.yaml");
    let (file, doc) = if main.is_file() {
        let text = std::fs::read_to_string(&main).map_err(|e| e.to_string())?;
        let doc: Y = serde_yaml::from_str(&text).map_err(|e| format!("Main.yaml: {e}"))?;
        ("Main.yaml".to_string(), doc)
    } else {
        (
            project
                .file
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_else(|| "Pulumi.yaml".into()),
            Y::Mapping(project.doc.clone()),
        )
    };
    parse_template(&file, &doc, &project.doc)
}

pub fn parse_template(file: &str, doc: &Y, project_doc: &Mapping) -> Result<Template, String> {
    let mut t = Template {
        file: file.to_string(),
        ..Default::default()
    };
    // Config declarations: the project's `config:` plus the program's `config:`/`configuration:`.
    let mut seen = HashSet::new();
    let mut decls = entries(project_doc.get("config"));
    decls.extend(entries(doc.get("config")));
    decls.extend(entries(doc.get("configuration")));
    for (k, v) in decls {
        if !seen.insert(k.clone()) {
            continue;
        }
        let d = match &v {
            Y::Mapping(m)
                if m.keys().all(|k| {
                    matches!(
                        k.as_str(),
                        Some("type" | "default" | "secret" | "description" | "items" | "value")
                    )
                }) && !m.is_empty() =>
            {
                ConfigDecl {
                    typ: m.get("type").and_then(Y::as_str).map(str::to_string),
                    default: m.get("default").or_else(|| m.get("value")).cloned(),
                    secret: m.get("secret").and_then(Y::as_bool).unwrap_or(false),
                }
            }
            other => ConfigDecl {
                typ: None,
                default: Some(other.clone()),
                secret: false,
            },
        };
        t.config.push((k, d));
    }
    t.variables = entries(doc.get("variables"));
    for (name, r) in entries(doc.get("resources")) {
        let Y::Mapping(m) = &r else {
            return Err(format!("{file}: resource \"{name}\" must be an object"));
        };
        let typ = m
            .get("type")
            .and_then(Y::as_str)
            .ok_or_else(|| {
                format!("{file}: resource \"{name}\" is missing the required field \"type\"")
            })?
            .to_string();
        if m.get("get").is_some() {
            return Err(format!(
                "{file}: resource \"{name}\": `get` resources are not supported by this stand-in"
            ));
        }
        let options = match m.get("options") {
            Some(Y::Mapping(o)) => o.clone(),
            None | Some(Y::Null) => Mapping::new(),
            Some(_) => {
                return Err(format!(
                    "{file}: resource \"{name}\": options must be an object"
                ))
            }
        };
        t.resources.push(ResourceDecl {
            name,
            typ,
            properties: m.get("properties").cloned().unwrap_or(Y::Null),
            options,
        });
    }
    t.outputs = entries(doc.get("outputs"));
    Ok(t)
}

// ---- expressions ----

#[derive(Clone, Debug, PartialEq)]
pub enum Accessor {
    Prop(String),
    Index(usize),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Ref {
    pub root: String,
    pub path: Vec<Accessor>,
    pub text: String,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Part {
    Lit(String),
    Ref(Ref),
}

fn parse_ref(s: &str) -> Result<Ref, String> {
    let chars: Vec<char> = s.trim().chars().collect();
    let is_name = |c: char| c.is_alphanumeric() || matches!(c, '_' | '-' | ':' | '$');
    let mut i = 0;
    let mut root = String::new();
    while i < chars.len() && is_name(chars[i]) {
        root.push(chars[i]);
        i += 1;
    }
    if root.is_empty() {
        return Err(format!("invalid expression \"${{{s}}}\""));
    }
    let mut path = Vec::new();
    while i < chars.len() {
        match chars[i] {
            '.' => {
                i += 1;
                let mut p = String::new();
                while i < chars.len() && is_name(chars[i]) {
                    p.push(chars[i]);
                    i += 1;
                }
                if p.is_empty() {
                    return Err(format!("invalid property access in \"${{{s}}}\""));
                }
                path.push(Accessor::Prop(p));
            }
            '[' => {
                i += 1;
                if i < chars.len() && chars[i] == '"' {
                    i += 1;
                    let mut p = String::new();
                    while i < chars.len() && chars[i] != '"' {
                        p.push(chars[i]);
                        i += 1;
                    }
                    i += 1;
                    path.push(Accessor::Prop(p));
                } else {
                    let mut n = String::new();
                    while i < chars.len() && chars[i] != ']' {
                        n.push(chars[i]);
                        i += 1;
                    }
                    let idx = n
                        .trim()
                        .parse()
                        .map_err(|_| format!("invalid index \"{n}\" in \"${{{s}}}\""))?;
                    path.push(Accessor::Index(idx));
                }
                if i >= chars.len() || chars[i] != ']' {
                    return Err(format!("missing ']' in \"${{{s}}}\""));
                }
                i += 1;
            }
            _ => return Err(format!("invalid expression \"${{{s}}}\"")),
        }
    }
    Ok(Ref {
        root,
        path,
        text: s.to_string(),
    })
}

/// Splits a string into literal parts and `${...}` references (`$${` escapes a literal `${`).
pub fn parse_interp(s: &str) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut lit = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        lit.push_str(&rest[..i]);
        let after = &rest[i..];
        if let Some(r) = after.strip_prefix("$${") {
            lit.push_str("${");
            rest = r;
        } else if let Some(body) = after.strip_prefix("${") {
            let end = body
                .find('}')
                .ok_or_else(|| format!("unterminated interpolation in \"{s}\""))?;
            if !lit.is_empty() {
                parts.push(Part::Lit(std::mem::take(&mut lit)));
            }
            parts.push(Part::Ref(parse_ref(&body[..end])?));
            rest = &body[end + 1..];
        } else {
            lit.push('$');
            rest = &after[1..];
        }
    }
    lit.push_str(rest);
    if !lit.is_empty() || parts.is_empty() {
        parts.push(Part::Lit(lit));
    }
    Ok(parts)
}

/// Root names referenced anywhere in an expression.
pub fn refs_of(y: &Y, out: &mut Vec<String>) -> Result<(), String> {
    match y {
        Y::String(s) => {
            for p in parse_interp(s)? {
                if let Part::Ref(r) = p {
                    out.push(r.root);
                }
            }
        }
        Y::Sequence(s) => {
            for v in s {
                refs_of(v, out)?;
            }
        }
        Y::Mapping(m) => {
            for v in m.values() {
                refs_of(v, out)?;
            }
        }
        Y::Tagged(t) => refs_of(&t.value, out)?,
        _ => {}
    }
    Ok(())
}

/// Resource options the engine cares about.
#[derive(Clone, Debug, Default)]
pub struct ResOptions {
    pub protect: bool,
    pub retain_on_delete: bool,
    pub delete_before_replace: bool,
    pub depends_on: Vec<String>,
    pub parent: Option<String>,
    pub replace_on_changes: Vec<String>,
    pub ignore_changes: Vec<String>,
    pub additional_secret_outputs: Vec<String>,
}

/// One resource registration handed to the engine.
#[derive(Clone, Debug)]
pub struct Registration {
    pub name: String,
    pub typ: String,
    pub inputs: BTreeMap<String, Val>,
    pub options: ResOptions,
    /// URNs of the resources this one references or depends on.
    pub dependencies: Vec<String>,
}

/// What the engine answers to a registration.
pub enum RegResult {
    /// The resource's outputs (including `id` and `urn`).
    Ok(BTreeMap<String, Val>),
    /// The resource failed; with continue-on-error the program goes on without its dependents.
    Failed,
    /// The resource was not operated on (not targeted and not in state); dependents are skipped.
    Skipped,
    /// Stop running the program (failure without continue-on-error, or cancellation).
    Stop,
}

pub trait Monitor {
    fn register(&mut self, reg: Registration) -> RegResult;
}

/// The context of one program run.
pub struct Context {
    pub project: String,
    pub stack: String,
    pub cwd: String,
    /// Stack config, `ns:key` → decoded value (secrets marked).
    pub config: BTreeMap<String, Val>,
}

#[derive(Debug)]
pub struct RunResult {
    pub outputs: BTreeMap<String, Val>,
    /// Some resources failed or were skipped.
    pub failed: bool,
    /// The program was stopped early.
    pub stopped: bool,
}

enum Node {
    Var(usize),
    Res(usize),
}

pub struct Evaluator<'a> {
    t: &'a Template,
    ctx: &'a Context,
    values: HashMap<String, Val>,
    resources: HashMap<String, BTreeMap<String, Val>>,
    failed: HashSet<String>,
}

/// Types a raw config value according to a declared type.
pub fn type_config(v: Val, typ: Option<&str>) -> Result<Val, String> {
    let Some(typ) = typ else {
        return Ok(v);
    };
    if let Val::Secret(inner) = v {
        return type_config(*inner, Some(typ)).map(Val::secret);
    }
    let t = typ.to_ascii_lowercase();
    let bad = || Err(format!("must be of type '{typ}'"));
    match t.as_str() {
        "string" => match v {
            Val::Str(_) => Ok(v),
            Val::Num(_) | Val::Bool(_) => Ok(Val::Str(v.interp_string())),
            _ => bad(),
        },
        "integer" | "int" => match &v {
            Val::Num(n) if n.fract() == 0.0 => Ok(v),
            Val::Str(s) => s
                .trim()
                .parse::<i64>()
                .map(|i| Val::Num(i as f64))
                .or_else(|_| bad()),
            _ => bad(),
        },
        "number" => match &v {
            Val::Num(_) => Ok(v),
            Val::Str(s) => s.trim().parse::<f64>().map(Val::Num).or_else(|_| bad()),
            _ => bad(),
        },
        "boolean" | "bool" => match &v {
            Val::Bool(_) => Ok(v),
            Val::Str(s) if s == "true" => Ok(Val::Bool(true)),
            Val::Str(s) if s == "false" => Ok(Val::Bool(false)),
            _ => bad(),
        },
        t if t == "array" || t.starts_with("list<") => match &v {
            Val::List(_) => Ok(v),
            Val::Str(s) => match serde_json::from_str::<serde_json::Value>(s) {
                Ok(j @ serde_json::Value::Array(_)) => Ok(Val::from_json(&j)),
                _ => bad(),
            },
            _ => bad(),
        },
        t if t == "object" || t.starts_with("map<") => match &v {
            Val::Map(_) => Ok(v),
            Val::Str(s) => match serde_json::from_str::<serde_json::Value>(s) {
                Ok(j @ serde_json::Value::Object(_)) => Ok(Val::from_json(&j)),
                _ => bad(),
            },
            _ => bad(),
        },
        _ => Ok(v),
    }
}

/// Resolves the program's config: stack values, declared defaults and types. Errors use the
/// CLI's project-config validation texts.
pub fn resolve_config(t: &Template, ctx: &Context) -> Result<BTreeMap<String, Val>, String> {
    let mut out = ctx.config.clone();
    for (k, d) in &t.config {
        let full = if k.contains(':') {
            k.clone()
        } else {
            format!("{}:{k}", ctx.project)
        };
        let raw = match out.get(&full) {
            Some(v) => v.clone(),
            None => match &d.default {
                Some(y) => Val::from_yaml(y),
                None => {
                    return Err(format!(
                        "Stack '{}' is missing configuration value '{}'",
                        ctx.stack, k
                    ))
                }
            },
        };
        let mut v = type_config(raw, d.typ.as_deref()).map_err(|_| {
            format!(
                "Stack '{}' with configuration key '{}' must be of type '{}'",
                ctx.stack,
                k,
                d.typ.clone().unwrap_or_default()
            )
        })?;
        if d.secret {
            v = Val::secret(v);
        }
        out.insert(full, v);
    }
    Ok(out)
}

impl<'a> Evaluator<'a> {
    pub fn new(t: &'a Template, ctx: &'a Context) -> Self {
        Evaluator {
            t,
            ctx,
            values: HashMap::new(),
            resources: HashMap::new(),
            failed: HashSet::new(),
        }
    }

    fn err(&self, msg: impl std::fmt::Display) -> String {
        format!("{}: {msg}", self.t.file)
    }

    /// Checks the program (types, references, cycles) and returns the evaluation order.
    fn check(&self, config: &BTreeMap<String, Val>) -> Result<Vec<Node>, String> {
        let mut names: HashMap<String, Node> = HashMap::new();
        for (i, (n, _)) in self.t.variables.iter().enumerate() {
            names.insert(n.clone(), Node::Var(i));
        }
        for (i, r) in self.t.resources.iter().enumerate() {
            if names.contains_key(&r.name) {
                return Err(self.err(format!("duplicate node name \"{}\"", r.name)));
            }
            if !KNOWN_TYPES.contains(&r.typ.as_str()) {
                return Err(self.err(format!(
                    "resource \"{}\" has an unknown type \"{}\"; this stand-in implements {}",
                    r.name,
                    r.typ,
                    KNOWN_TYPES.join(", ")
                )));
            }
            names.insert(r.name.clone(), Node::Res(i));
        }
        let known = |root: &str| {
            root == "pulumi"
                || names.contains_key(root)
                || self.config_lookup(config, root).is_some()
        };
        let deps_of = |y: &Y| -> Result<Vec<String>, String> {
            let mut v = Vec::new();
            refs_of(y, &mut v)?;
            for r in &v {
                if !known(r) {
                    return Err(self.err(format!(
                        "resource or variable named \"{r}\" could not be found"
                    )));
                }
            }
            Ok(v.into_iter().filter(|r| names.contains_key(r)).collect())
        };
        let mut deps: HashMap<String, Vec<String>> = HashMap::new();
        for (n, y) in &self.t.variables {
            deps.insert(n.clone(), deps_of(y)?);
        }
        for r in &self.t.resources {
            let mut d = deps_of(&r.properties)?;
            d.extend(deps_of(&Y::Mapping(r.options.clone()))?);
            deps.insert(r.name.clone(), d);
        }
        for (_, y) in &self.t.outputs {
            deps_of(y)?;
        }
        // Depth-first topological order in declaration order; report cycles.
        let mut order = Vec::new();
        let mut state: HashMap<String, u8> = HashMap::new();
        fn visit(
            n: &str,
            deps: &HashMap<String, Vec<String>>,
            state: &mut HashMap<String, u8>,
            order: &mut Vec<String>,
            stack: &mut Vec<String>,
        ) -> Result<(), String> {
            match state.get(n) {
                Some(2) => return Ok(()),
                Some(1) => {
                    stack.push(n.to_string());
                    let start = stack.iter().position(|s| s == n).unwrap_or(0);
                    return Err(format!(
                        "circular reference detected: {}",
                        stack[start..].join(" -> ")
                    ));
                }
                _ => {}
            }
            state.insert(n.to_string(), 1);
            stack.push(n.to_string());
            for d in deps.get(n).into_iter().flatten() {
                visit(d, deps, state, order, stack)?;
            }
            stack.pop();
            state.insert(n.to_string(), 2);
            order.push(n.to_string());
            Ok(())
        }
        let all: Vec<String> = self
            .t
            .variables
            .iter()
            .map(|(n, _)| n.clone())
            .chain(self.t.resources.iter().map(|r| r.name.clone()))
            .collect();
        for n in &all {
            visit(n, &deps, &mut state, &mut order, &mut Vec::new()).map_err(|e| self.err(e))?;
        }
        Ok(order.into_iter().filter_map(|n| names.remove(&n)).collect())
    }

    fn config_lookup<'c>(&self, config: &'c BTreeMap<String, Val>, root: &str) -> Option<&'c Val> {
        if root.contains(':') {
            config.get(root)
        } else {
            config.get(&format!("{}:{root}", self.ctx.project))
        }
    }

    /// Runs the program against the engine.
    pub fn run(&mut self, monitor: &mut dyn Monitor) -> Result<RunResult, String> {
        let config = resolve_config(self.t, self.ctx)?;
        let order = self.check(&config)?;
        for (k, v) in &config {
            self.values.insert(format!("config:{k}"), v.clone());
        }
        let mut result = RunResult {
            outputs: BTreeMap::new(),
            failed: false,
            stopped: false,
        };
        for node in order {
            match node {
                Node::Var(i) => {
                    let (name, y) = &self.t.variables[i];
                    let mut d = Vec::new();
                    refs_of(y, &mut d)?;
                    if d.iter().any(|r| self.failed.contains(r)) {
                        self.failed.insert(name.clone());
                        continue;
                    }
                    let v = self.eval(y)?;
                    self.values.insert(name.clone(), v);
                }
                Node::Res(i) => {
                    let r = &self.t.resources[i];
                    let mut d = Vec::new();
                    refs_of(&r.properties, &mut d)?;
                    refs_of(&Y::Mapping(r.options.clone()), &mut d)?;
                    if d.iter().any(|x| self.failed.contains(x)) {
                        self.failed.insert(r.name.clone());
                        result.failed = true;
                        continue;
                    }
                    let inputs = match self.eval(&r.properties)? {
                        Val::Map(m) => m,
                        Val::Null => BTreeMap::new(),
                        _ => {
                            return Err(self.err(format!(
                                "resource \"{}\": properties must be an object",
                                r.name
                            )))
                        }
                    };
                    let options = self.options(&r.name, &r.options)?;
                    let mut dependencies: Vec<String> = Vec::new();
                    for name in &d {
                        if let Some(u) = self
                            .resources
                            .get(name)
                            .and_then(|o| o.get("urn"))
                            .and_then(|u| u.as_str())
                        {
                            if !dependencies.iter().any(|x| x == u) {
                                dependencies.push(u.to_string());
                            }
                        }
                    }
                    match monitor.register(Registration {
                        name: r.name.clone(),
                        typ: r.typ.clone(),
                        inputs,
                        options,
                        dependencies,
                    }) {
                        RegResult::Ok(outs) => {
                            self.resources.insert(r.name.clone(), outs);
                        }
                        RegResult::Failed => {
                            self.failed.insert(r.name.clone());
                            result.failed = true;
                        }
                        RegResult::Skipped => {
                            self.failed.insert(r.name.clone());
                        }
                        RegResult::Stop => {
                            result.failed = true;
                            result.stopped = true;
                            return Ok(result);
                        }
                    }
                }
            }
        }
        for (name, y) in &self.t.outputs {
            let mut d = Vec::new();
            refs_of(y, &mut d)?;
            if d.iter().any(|x| self.failed.contains(x)) {
                continue;
            }
            let v = self.eval(y)?;
            result.outputs.insert(name.clone(), v);
        }
        Ok(result)
    }

    fn str_list(&self, name: &str, opt: &str, y: Option<&Y>) -> Result<Vec<String>, String> {
        match y {
            None | Some(Y::Null) => Ok(vec![]),
            Some(Y::Sequence(s)) => s
                .iter()
                .map(|x| {
                    x.as_str().map(str::to_string).ok_or_else(|| {
                        self.err(format!(
                            "resource \"{name}\": {opt} must be a list of strings"
                        ))
                    })
                })
                .collect(),
            Some(_) => Err(self.err(format!("resource \"{name}\": {opt} must be a list"))),
        }
    }

    fn resource_ref(&self, name: &str, y: &Y) -> Result<String, String> {
        let s = y.as_str().ok_or_else(|| {
            self.err(format!(
                "resource \"{name}\": expected a resource reference"
            ))
        })?;
        match parse_interp(s)?.as_slice() {
            [Part::Ref(r)] if r.path.is_empty() => {
                let outs = self.resources.get(&r.root).ok_or_else(|| {
                    self.err(format!(
                        "resource \"{name}\": \"{}\" is not a resource",
                        r.root
                    ))
                })?;
                Ok(outs
                    .get("urn")
                    .and_then(|u| u.as_str().map(str::to_string))
                    .unwrap_or_default())
            }
            _ => Err(self.err(format!(
                "resource \"{name}\": expected a resource reference like ${{other}}"
            ))),
        }
    }

    fn options(&self, name: &str, o: &Mapping) -> Result<ResOptions, String> {
        let mut r = ResOptions {
            protect: o.get("protect").and_then(Y::as_bool).unwrap_or(false),
            retain_on_delete: o
                .get("retainOnDelete")
                .and_then(Y::as_bool)
                .unwrap_or(false),
            delete_before_replace: o
                .get("deleteBeforeReplace")
                .and_then(Y::as_bool)
                .unwrap_or(false),
            replace_on_changes: self.str_list(
                name,
                "replaceOnChanges",
                o.get("replaceOnChanges"),
            )?,
            ignore_changes: self.str_list(name, "ignoreChanges", o.get("ignoreChanges"))?,
            additional_secret_outputs: self.str_list(
                name,
                "additionalSecretOutputs",
                o.get("additionalSecretOutputs"),
            )?,
            ..Default::default()
        };
        match o.get("dependsOn") {
            Some(Y::Sequence(s)) => {
                for d in s {
                    r.depends_on.push(self.resource_ref(name, d)?);
                }
            }
            Some(y @ Y::String(_)) => r.depends_on.push(self.resource_ref(name, y)?),
            _ => {}
        }
        if let Some(p) = o.get("parent") {
            r.parent = Some(self.resource_ref(name, p)?);
        }
        Ok(r)
    }

    fn lookup(&self, r: &Ref) -> Result<Val, String> {
        let root = if r.root == "pulumi" {
            Val::Map(BTreeMap::from([
                ("stack".to_string(), Val::Str(self.ctx.stack.clone())),
                ("project".to_string(), Val::Str(self.ctx.project.clone())),
                ("organization".to_string(), Val::Str("organization".into())),
                ("cwd".to_string(), Val::Str(self.ctx.cwd.clone())),
                ("rootDirectory".to_string(), Val::Str(self.ctx.cwd.clone())),
            ]))
        } else if let Some(v) = self.values.get(&r.root) {
            v.clone()
        } else if let Some(outs) = self.resources.get(&r.root) {
            Val::Map(outs.clone())
        } else {
            let key = if r.root.contains(':') {
                r.root.clone()
            } else {
                format!("{}:{}", self.ctx.project, r.root)
            };
            match self.values.get(&format!("config:{key}")) {
                Some(v) => v.clone(),
                None => {
                    return Err(self.err(format!(
                        "resource or variable named \"{}\" could not be found",
                        r.root
                    )))
                }
            }
        };
        let mut cur = root;
        let mut secret = false;
        for a in &r.path {
            if let Val::Secret(inner) = cur {
                secret = true;
                cur = *inner;
            }
            cur = match (a, cur) {
                (_, Val::Unknown) => Val::Unknown,
                (Accessor::Prop(p), Val::Map(mut m)) => match m.remove(p) {
                    Some(v) => v,
                    None if self.resources.contains_key(&r.root) => {
                        return Err(self.err(format!(
                            "unable to evaluate ${{{}}}: resource \"{}\" has no property \"{p}\"",
                            r.text, r.root
                        )))
                    }
                    None => {
                        return Err(self.err(format!(
                            "unable to evaluate ${{{}}}: no property \"{p}\"",
                            r.text
                        )))
                    }
                },
                (Accessor::Index(i), Val::List(mut l)) if *i < l.len() => l.swap_remove(*i),
                (Accessor::Index(i), Val::List(_)) => {
                    return Err(self.err(format!(
                        "unable to evaluate ${{{}}}: index {i} out of range",
                        r.text
                    )))
                }
                (_, other) => {
                    return Err(self.err(format!(
                        "unable to evaluate ${{{}}}: cannot access a property of a {}",
                        r.text,
                        other.type_name()
                    )))
                }
            };
        }
        Ok(if secret { Val::secret(cur) } else { cur })
    }

    /// Evaluates an expression.
    pub fn eval(&self, y: &Y) -> Result<Val, String> {
        match y {
            Y::String(s) => {
                let parts = parse_interp(s)?;
                if let [Part::Ref(r)] = parts.as_slice() {
                    return self.lookup(r);
                }
                let mut out = String::new();
                let mut secret = false;
                for p in parts {
                    match p {
                        Part::Lit(l) => out.push_str(&l),
                        Part::Ref(r) => {
                            let v = self.lookup(&r)?;
                            if v.contains_unknown() {
                                return Ok(Val::Unknown);
                            }
                            secret |= v.contains_secret();
                            out.push_str(&v.unsecret().interp_string());
                        }
                    }
                }
                Ok(if secret {
                    Val::secret(Val::Str(out))
                } else {
                    Val::Str(out)
                })
            }
            Y::Mapping(m) => {
                if m.len() == 1 {
                    if let Some((Y::String(k), arg)) = m.iter().next() {
                        if let Some(f) = k.strip_prefix("fn::") {
                            return self.call(f, arg);
                        }
                    }
                }
                let mut out = BTreeMap::new();
                for (k, v) in m {
                    out.insert(yaml_key(k), self.eval(v)?);
                }
                Ok(Val::Map(out))
            }
            Y::Sequence(s) => Ok(Val::List(
                s.iter().map(|v| self.eval(v)).collect::<Result<_, _>>()?,
            )),
            Y::Tagged(t) => self.eval(&t.value),
            other => Ok(Val::from_yaml(other)),
        }
    }

    fn args(&self, f: &str, arg: &Y, n: usize) -> Result<Vec<Val>, String> {
        match self.eval(arg)? {
            Val::List(l) if l.len() == n => Ok(l),
            _ => Err(self.err(format!("fn::{f} takes a list of {n} arguments"))),
        }
    }

    fn call(&self, f: &str, arg: &Y) -> Result<Val, String> {
        // Helper: unwrap a secret, remembering it.
        fn open(v: Val, secret: &mut bool) -> Val {
            match v {
                Val::Secret(inner) => {
                    *secret = true;
                    open(*inner, secret)
                }
                other => other,
            }
        }
        let wrap = |v: Val, secret: bool| if secret { Val::secret(v) } else { v };
        let mut secret = false;
        match f {
            "secret" => Ok(Val::secret(self.eval(arg)?)),
            "join" => {
                let a = self.args(f, arg, 2)?;
                let sep = open(a[0].clone(), &mut secret);
                let list = open(a[1].clone(), &mut secret);
                let Val::List(items) = list else {
                    return Err(self.err("fn::join: the second argument must be a list"));
                };
                let mut parts = Vec::new();
                for it in items {
                    let it = open(it, &mut secret);
                    if it.contains_unknown() {
                        return Ok(Val::Unknown);
                    }
                    secret |= it.contains_secret();
                    parts.push(it.unsecret().interp_string());
                }
                Ok(wrap(Val::Str(parts.join(&sep.interp_string())), secret))
            }
            "split" => {
                let a = self.args(f, arg, 2)?;
                let sep = open(a[0].clone(), &mut secret).interp_string();
                let s = open(a[1].clone(), &mut secret);
                if s.contains_unknown() {
                    return Ok(Val::Unknown);
                }
                let items = s
                    .interp_string()
                    .split(sep.as_str())
                    .map(|p| wrap(Val::Str(p.to_string()), secret))
                    .collect();
                Ok(wrap(Val::List(items), secret))
            }
            "select" => {
                let a = self.args(f, arg, 2)?;
                let idx = open(a[0].clone(), &mut secret)
                    .as_f64()
                    .ok_or_else(|| self.err("fn::select: the index must be a number"))?;
                let Val::List(items) = open(a[1].clone(), &mut secret) else {
                    return Err(self.err("fn::select: the second argument must be a list"));
                };
                let v = items
                    .get(idx as usize)
                    .cloned()
                    .ok_or_else(|| self.err(format!("fn::select: index {idx} out of range")))?;
                Ok(wrap(v, secret))
            }
            "toJSON" => {
                let v = self.eval(arg)?;
                if v.contains_unknown() {
                    return Ok(Val::Unknown);
                }
                let s = serde_json::to_string(&v.to_json(Show::Plain)).map_err(|e| e.to_string())?;
                Ok(wrap(Val::Str(s), v.contains_secret()))
            }
            "toBase64" => {
                let v = open(self.eval(arg)?, &mut secret);
                if v.contains_unknown() {
                    return Ok(Val::Unknown);
                }
                Ok(wrap(Val::Str(b64_encode(v.interp_string().as_bytes())), secret))
            }
            "fromBase64" => {
                let v = open(self.eval(arg)?, &mut secret);
                if v.contains_unknown() {
                    return Ok(Val::Unknown);
                }
                let bytes = b64_decode(&v.interp_string())
                    .ok_or_else(|| self.err("fn::fromBase64: invalid base64"))?;
                Ok(wrap(
                    Val::Str(String::from_utf8_lossy(&bytes).into_owned()),
                    secret,
                ))
            }
            "readFile" => {
                let v = open(self.eval(arg)?, &mut secret);
                let p = std::path::Path::new(&self.ctx.cwd).join(v.interp_string());
                let s = std::fs::read_to_string(&p)
                    .map_err(|e| self.err(format!("fn::readFile: {}: {e}", p.display())))?;
                Ok(wrap(Val::Str(s), secret))
            }
            other => Err(self.err(format!(
                "unknown function fn::{other} (this stand-in implements fn::secret, fn::join, fn::split, fn::select, fn::toJSON, fn::toBase64, fn::fromBase64, fn::readFile)"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Echo {
        seen: Vec<Registration>,
        fail: Option<&'static str>,
    }

    impl Monitor for Echo {
        fn register(&mut self, reg: Registration) -> RegResult {
            if Some(reg.name.as_str()) == self.fail {
                self.seen.push(reg);
                return RegResult::Failed;
            }
            let mut outs = reg.inputs.clone();
            outs.insert("id".into(), Val::Str(format!("id-{}", reg.name)));
            outs.insert(
                "urn".into(),
                Val::Str(format!("urn:pulumi:dev::proj::{}::{}", reg.typ, reg.name)),
            );
            self.seen.push(reg);
            RegResult::Ok(outs)
        }
    }

    fn ctx(config: &[(&str, Val)]) -> Context {
        Context {
            project: "proj".into(),
            stack: "dev".into(),
            cwd: "/tmp".into(),
            config: config
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        }
    }

    fn run(src: &str, c: &Context) -> Result<(RunResult, Vec<Registration>), String> {
        let doc: Y = serde_yaml::from_str(src).unwrap();
        let pm = match &doc {
            Y::Mapping(m) => m.clone(),
            _ => Mapping::new(),
        };
        let t = parse_template("Pulumi.yaml", &doc, &pm)?;
        let mut m = Echo {
            seen: vec![],
            fail: None,
        };
        let r = Evaluator::new(&t, c).run(&mut m)?;
        Ok((r, m.seen))
    }

    #[test]
    fn interpolation_parsing() {
        assert_eq!(
            parse_interp("a-${b.c[0]}-$${lit}").unwrap(),
            vec![
                Part::Lit("a-".into()),
                Part::Ref(Ref {
                    root: "b".into(),
                    path: vec![Accessor::Prop("c".into()), Accessor::Index(0)],
                    text: "b.c[0]".into()
                }),
                Part::Lit("-${lit}".into())
            ]
        );
        assert!(parse_interp("${unterminated").is_err());
    }

    #[test]
    fn config_variables_resources_outputs() {
        let src = r#"
name: proj
runtime: yaml
config:
  greeting: {type: string, default: hello}
  count: {type: integer}
  enabled: {type: boolean, default: false}
variables:
  msg: ${greeting}, ${pulumi.stack}/${pulumi.project}
resources:
  second:
    type: standin:index:Record
    properties:
      from: ${first.value}
      n: ${count}
  first:
    type: standin:index:Record
    properties:
      value: ${msg}
outputs:
  msg: ${msg}
  n: ${count}
  on: ${enabled}
  id: ${second.id}
  whole: "${count}"
"#;
        let c = ctx(&[("proj:count", Val::Str("3".into()))]);
        let (r, seen) = run(src, &c).unwrap();
        // `first` is registered before `second` because `second` depends on it.
        assert_eq!(seen[0].name, "first");
        assert_eq!(seen[1].inputs["from"], Val::Str("hello, dev/proj".into()));
        assert_eq!(seen[1].inputs["n"], Val::Num(3.0));
        assert_eq!(r.outputs["n"], Val::Num(3.0));
        assert_eq!(r.outputs["whole"], Val::Num(3.0));
        assert_eq!(r.outputs["on"], Val::Bool(false));
        assert_eq!(r.outputs["id"], Val::Str("id-second".into()));
    }

    #[test]
    fn config_typing_errors() {
        let src = "name: proj\nruntime: yaml\nconfig:\n  count: {type: integer}\n";
        let e = run(src, &ctx(&[("proj:count", Val::Str("abc".into()))])).unwrap_err();
        assert_eq!(
            e,
            "Stack 'dev' with configuration key 'count' must be of type 'integer'"
        );
        let e = run(src, &ctx(&[])).unwrap_err();
        assert_eq!(e, "Stack 'dev' is missing configuration value 'count'");
        assert_eq!(
            type_config(Val::Str("[1,2]".into()), Some("List<Number>")).unwrap(),
            Val::List(vec![Val::Num(1.0), Val::Num(2.0)])
        );
    }

    #[test]
    fn secrets_propagate() {
        let src = r#"
name: proj
runtime: yaml
config:
  password: {type: string, secret: true, default: pw}
  plain: {type: string, default: x}
variables:
  conn: user:${password}@host
  joined:
    fn::join: [",", ["${plain}", "${stackSecret}"]]
  wrapped:
    fn::secret: literal
  json:
    fn::toJSON: {a: "${password}"}
resources:
  rec:
    type: standin:index:Record
    properties:
      conn: ${conn}
      plain: ${plain}
outputs:
  conn: ${rec.conn}
  plain: ${rec.plain}
  joined: ${joined}
  wrapped: ${wrapped}
  json: ${json}
  obj:
    inner: ${password}
"#;
        let c = ctx(&[("proj:stackSecret", Val::secret(Val::Str("s".into())))]);
        let (r, seen) = run(src, &c).unwrap();
        assert_eq!(
            seen[0].inputs["conn"],
            Val::secret(Val::Str("user:pw@host".into()))
        );
        assert!(!seen[0].inputs["plain"].contains_secret());
        assert!(r.outputs["conn"].contains_secret());
        assert!(!r.outputs["plain"].contains_secret());
        assert_eq!(r.outputs["joined"], Val::secret(Val::Str("x,s".into())));
        assert_eq!(
            r.outputs["wrapped"],
            Val::secret(Val::Str("literal".into()))
        );
        assert_eq!(
            r.outputs["json"],
            Val::secret(Val::Str("{\"a\":\"pw\"}".into()))
        );
        assert!(r.outputs["obj"].contains_secret());
        assert_eq!(
            r.outputs["obj"].to_json(Show::Blind),
            serde_json::json!({"inner": "[secret]"})
        );
    }

    #[test]
    fn functions_and_escapes() {
        let src = r#"
name: proj
runtime: yaml
variables:
  parts:
    fn::split: [",", "a,b,c"]
  second:
    fn::select: [1, "${parts}"]
  b64:
    fn::toBase64: hi
  back:
    fn::fromBase64: ${b64}
outputs:
  second: ${second}
  back: ${back}
  lit: "$${notARef} and ${pulumi.organization}"
  idx: ${parts[2]}
"#;
        let (r, _) = run(src, &ctx(&[])).unwrap();
        assert_eq!(r.outputs["second"], Val::Str("b".into()));
        assert_eq!(r.outputs["back"], Val::Str("hi".into()));
        assert_eq!(
            r.outputs["lit"],
            Val::Str("${notARef} and organization".into())
        );
        assert_eq!(r.outputs["idx"], Val::Str("c".into()));
    }

    #[test]
    fn unknowns_propagate_in_previews() {
        struct Planner;
        impl Monitor for Planner {
            fn register(&mut self, reg: Registration) -> RegResult {
                let mut outs = reg.inputs.clone();
                outs.insert("id".into(), Val::Unknown);
                RegResult::Ok(outs)
            }
        }
        let src = "name: p\nruntime: yaml\nresources:\n  a: {type: standin:index:Record}\noutputs:\n  x: pre-${a.id}\n  j:\n    fn::toJSON: [\"${a.id}\"]\n";
        let doc: Y = serde_yaml::from_str(src).unwrap();
        let Y::Mapping(pm) = doc.clone() else {
            panic!()
        };
        let t = parse_template("Pulumi.yaml", &doc, &pm).unwrap();
        let c = ctx(&[]);
        let r = Evaluator::new(&t, &c).run(&mut Planner).unwrap();
        assert_eq!(r.outputs["x"], Val::Unknown);
        assert_eq!(r.outputs["j"], Val::Unknown);
    }

    #[test]
    fn unknown_references_and_cycles() {
        let e = run(
            "name: p\nruntime: yaml\noutputs:\n  x: ${nope}\n",
            &ctx(&[]),
        )
        .unwrap_err();
        assert_eq!(
            e,
            "Pulumi.yaml: resource or variable named \"nope\" could not be found"
        );
        let e = run(
            "name: p\nruntime: yaml\nvariables:\n  a: ${b}\n  b: ${a}\n",
            &ctx(&[]),
        )
        .unwrap_err();
        assert!(
            e.contains("circular reference detected: a -> b -> a"),
            "{e}"
        );
        let e = run(
            "name: p\nruntime: yaml\nresources:\n  r: {type: aws:s3:Bucket}\n",
            &ctx(&[]),
        )
        .unwrap_err();
        assert!(e.contains("unknown type \"aws:s3:Bucket\""), "{e}");
    }

    #[test]
    fn failed_resources_skip_dependents() {
        let src = r#"
name: proj
runtime: yaml
resources:
  a: {type: standin:index:Fail}
  b: {type: standin:index:Record, properties: {x: "${a.id}"}}
  c: {type: standin:index:Record, properties: {x: 1}}
outputs:
  b: ${b.x}
  c: ${c.x}
"#;
        let doc: Y = serde_yaml::from_str(src).unwrap();
        let Y::Mapping(pm) = doc.clone() else {
            panic!()
        };
        let t = parse_template("Pulumi.yaml", &doc, &pm).unwrap();
        let c = ctx(&[]);
        let mut m = Echo {
            seen: vec![],
            fail: Some("a"),
        };
        let r = Evaluator::new(&t, &c).run(&mut m).unwrap();
        assert!(r.failed);
        assert_eq!(m.seen.len(), 2); // a (failed) and c
        assert!(!r.outputs.contains_key("b"));
        assert_eq!(r.outputs["c"], Val::Num(1.0));
    }
}
