//! The non-engine commands: `version`, `whoami`, `about`, `login`/`logout`, `stack …`,
//! `config …`, `cancel`, `install` and `plugin …`.

use crate::backend::{self, Checkpoint, Snapshot};
use crate::cli::Parsed;
use crate::crypto::{self, Secrets};
use crate::project::{self, StackFile};
use crate::session::{self, Session};
use crate::util::{self, err, exit, Failure, Res};
use crate::value::{Show, Val, SECRET_SIG, SIG_KEY};
use serde_json::{json, Value as J};
use serde_yaml::Value as Y;
use std::io::Read;

fn print_json(v: &J) {
    print!("{}", util::json_pretty(v, 2));
}

pub fn version() -> Res<()> {
    println!("{}", crate::version_tag());
    Ok(())
}

fn user_for(b: &backend::Backend) -> String {
    if b.cloud {
        std::env::var("PULUMI_STANDIN_CLOUD_USER").unwrap_or_else(|_| "standin-user".into())
    } else {
        util::user_name()
    }
}

pub fn whoami(p: &Parsed) -> Res<()> {
    let project = session::load_project().ok();
    let b = backend::open_backend(project.as_ref())?;
    let user = user_for(&b);
    if p.bool("json") {
        #[derive(serde::Serialize)]
        struct WhoAmI {
            user: String,
            #[serde(skip_serializing_if = "Vec::is_empty")]
            organizations: Vec<String>,
            url: String,
        }
        let organizations = if b.cloud { vec![user.clone()] } else { vec![] };
        print!(
            "{}",
            util::json_pretty(
                &WhoAmI {
                    user,
                    organizations,
                    url: b.url
                },
                2
            )
        );
    } else {
        println!("{user}");
    }
    Ok(())
}

pub fn about(p: &Parsed) -> Res<()> {
    let project = session::load_project().ok();
    let b = backend::open_backend(project.as_ref()).ok();
    let current = project.as_ref().and_then(|pr| {
        let s = backend::selected_stack(pr)?;
        let b = b.as_ref()?;
        let chk = b.load_checkpoint(&pr.name, &s).ok()?;
        Some(json!({
            "name": s,
            "fullyQualifiedName": format!("organization/{}/{}", pr.name, s),
            "resources": chk.resource_count(),
            "pendingOps": chk.pending_count(),
        }))
    });
    let v = json!({
        "plugins": [],
        "host": {"os": std::env::consts::OS, "arch": std::env::consts::ARCH},
        "backend": b.as_ref().map(|b| json!({"name": util::host_name(), "url": b.url, "user": user_for(b), "organizations": []})),
        "currentStack": current,
        "cliAbout": {"version": crate::version_tag().trim_start_matches('v'), "goVersion": "standin", "goCompiler": "rustc"},
        "runtime": project.as_ref().map(|p| json!({"language": p.runtime})),
        "dependencies": [],
        "errors": [],
    });
    if p.bool("json") {
        print_json(&v);
    } else {
        println!(
            "CLI\nVersion      {}\nGo Version   standin\n",
            crate::version_tag()
        );
        println!(
            "Backend\nURL          {}",
            b.map(|b| b.url).unwrap_or_default()
        );
    }
    Ok(())
}

fn write_credentials(f: impl FnOnce(&mut J)) -> Res<()> {
    let path = backend::pulumi_home().join("credentials.json");
    let mut j: J = std::fs::read_to_string(&path)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_else(|| json!({}));
    f(&mut j);
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(&path, util::json_pretty(&j, 4))?;
    Ok(())
}

pub fn login(p: &Parsed) -> Res<()> {
    let url = if p.bool("local") {
        "file://~".to_string()
    } else if let Some(u) = p.str("cloud-url") {
        u
    } else if let Some(u) = p.args.first() {
        u.clone()
    } else if let Ok(u) = std::env::var("PULUMI_BACKEND_URL") {
        u
    } else {
        "https://api.pulumi.com".to_string()
    };
    if let Ok(env) = std::env::var("PULUMI_BACKEND_URL") {
        if !env.is_empty() && env != url {
            eprintln!("Warning: The PULUMI_BACKEND_URL environment variable is set to '{env}', which conflicts with the login URL '{url}'.");
        }
    }
    if url.starts_with("file://") {
        let root = backend::file_root(&url)?;
        std::fs::create_dir_all(&root)?;
        write_credentials(|j| j["current"] = J::String(url.clone()))?;
        println!(
            "Logged in to {} as {} ({url})",
            util::host_name(),
            util::user_name()
        );
        return Ok(());
    }
    let token = std::env::var("PULUMI_ACCESS_TOKEN")
        .ok()
        .filter(|t| !t.is_empty());
    let Some(token) = token else {
        return Err(Failure::new(
            exit::AUTHENTICATION,
            backend::ACCESS_TOKEN_MISSING,
        ));
    };
    if std::env::var("PULUMI_STANDIN_CLOUD_DIR")
        .map(|d| d.is_empty())
        .unwrap_or(true)
    {
        let host = url
            .split("://")
            .nth(1)
            .unwrap_or(&url)
            .split('/')
            .next()
            .unwrap_or_default()
            .to_string();
        return err(format!(
            "problem logging in: getting user info from {url}: performing HTTP request: Get \"{url}/api/user\": dial tcp: lookup {host}: no such host"
        ));
    }
    write_credentials(|j| {
        j["current"] = J::String(url.clone());
        j["accessTokens"][url.as_str()] = J::String(token.clone());
    })?;
    let user = std::env::var("PULUMI_STANDIN_CLOUD_USER").unwrap_or_else(|_| "standin-user".into());
    println!(
        "Logged in to {} as {user} ({url})",
        url.split("://").nth(1).unwrap_or(&url)
    );
    Ok(())
}

pub fn logout(_p: &Parsed) -> Res<()> {
    let mut url = String::new();
    write_credentials(|j| {
        url = j
            .get("current")
            .and_then(J::as_str)
            .unwrap_or_default()
            .to_string();
        if let Some(o) = j.as_object_mut() {
            o.remove("current");
        }
    })?;
    println!("Logged out of {url}");
    Ok(())
}

// ---------------------------------------------------------------- stack

fn stack_arg(p: &Parsed) -> Option<String> {
    p.args
        .first()
        .cloned()
        .or_else(|| p.str("stack"))
        .filter(|s| !s.is_empty())
}

/// Creates a stack (`stack init`, `stack select --create`).
fn init_stack(p: &Parsed, raw: &str, select: bool) -> Res<()> {
    let project = session::load_project()?;
    let b = backend::open_backend(Some(&project))?;
    let name = backend::parse_stack_ref(raw, &project.name)?;
    if b.stack_exists(&project.name, &name) {
        return err(format!("stack '{raw}' already exists"));
    }
    let provider = p.str("secrets-provider").unwrap_or_default();
    let path = project.stack_file_path(&name, None);
    let mut sf = StackFile::load(&path)?;
    let uses_passphrase = match provider.as_str() {
        "" | "default" => !b.cloud,
        "passphrase" => true,
        "service" if b.cloud => false,
        other => {
            return err(format!(
                "secrets provider '{other}' is not supported by this Pulumi CLI test stand-in (use passphrase)"
            ))
        }
    };
    let mut secrets = if b.cloud && !uses_passphrase {
        let key = format!("service:organization/{}/{}", project.name, name);
        Secrets::Ready(crypto::Crypter::from_passphrase(&key, b"service"))
    } else {
        Secrets::None
    };
    if uses_passphrase {
        sf.secrets_provider = None;
        sf.encrypted_key = None;
        match &sf.encryption_salt {
            Some(salt) => {
                secrets = Secrets::from_salt(Some(salt))?;
                secrets.require_ready()?;
            }
            None => {
                let Some(phrase) = crypto::read_passphrase()? else {
                    return err(crypto::MISSING_PASSPHRASE);
                };
                let (salt, c) = crypto::new_salt_state(&phrase);
                sf.encryption_salt = Some(salt);
                secrets = Secrets::Ready(c);
            }
        }
    }
    if let Some(from) = p.str("copy-config-from") {
        let from_name = backend::parse_stack_ref(&from, &project.name)?;
        let from_file = StackFile::load(&project.stack_file_path(&from_name, None))?;
        let from_secrets = Secrets::from_salt(from_file.encryption_salt.as_deref())?;
        for (k, v) in &from_file.config {
            let nv = if project::has_secure(v) {
                reencrypt(v, &from_secrets, &secrets)?
            } else {
                v.clone()
            };
            sf.config.insert(k.clone(), nv);
        }
    }
    b.create_stack(&project.name, &name)?;
    if uses_passphrase || !sf.config.is_empty() || sf.exists {
        sf.save()?;
    }
    eprintln!("Created stack '{}'", b.display_ref(&project.name, &name));
    if select {
        backend::select_stack(&project, Some(&name))?;
    }
    Ok(())
}

fn reencrypt(v: &Y, from: &Secrets, to: &Secrets) -> Res<Y> {
    if let Some(ct) = project::as_secure(v) {
        return Ok(project::secure(to.encrypt(&from.decrypt(ct)?)?));
    }
    Ok(match v {
        Y::Mapping(m) => {
            let mut out = serde_yaml::Mapping::new();
            for (k, x) in m {
                out.insert(k.clone(), reencrypt(x, from, to)?);
            }
            Y::Mapping(out)
        }
        Y::Sequence(s) => Y::Sequence(
            s.iter()
                .map(|x| reencrypt(x, from, to))
                .collect::<Res<_>>()?,
        ),
        other => other.clone(),
    })
}

pub fn stack_init(p: &Parsed) -> Res<()> {
    let Some(raw) = stack_arg(p) else {
        return Err(Failure::new(
            exit::CONFIGURATION,
            "a stack name is required; pass it as an argument or with --stack when running in non-interactive mode",
        ));
    };
    init_stack(p, &raw, !p.bool("no-select"))
}

pub fn stack_select(p: &Parsed) -> Res<()> {
    let Some(raw) = stack_arg(p) else {
        return Err(Failure::new(
            exit::STACK_NOT_FOUND,
            "no stack selected; specify a stack name with --stack",
        ));
    };
    let project = session::load_project()?;
    let b = backend::open_backend(Some(&project))?;
    let name = backend::parse_stack_ref(&raw, &project.name)?;
    if b.stack_exists(&project.name, &name) {
        return backend::select_stack(&project, Some(&name));
    }
    if p.bool("create") {
        return init_stack(p, &raw, true);
    }
    Err(session::stack_not_found(&raw))
}

/// `stackSummaryJSON`, fields in the CLI's order; optional ones omitted when unset.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct StackSummary {
    name: String,
    current: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_update: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    update_in_progress: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resource_count: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<String>,
}

/// `updateInfoJSON`, fields in the CLI's order.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct UpdateInfo {
    version: usize,
    kind: J,
    start_time: String,
    message: J,
    environment: J,
    config: J,
    result: J,
    #[serde(skip_serializing_if = "Option::is_none")]
    end_time: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resource_changes: Option<J>,
}

pub fn stack_ls(p: &Parsed) -> Res<()> {
    let project = session::load_project()?;
    let b = backend::open_backend(Some(&project))?;
    let current = backend::selected_stack(&project);
    let mut rows = Vec::new();
    for name in b.list_stacks(&project.name)? {
        let chk = b.load_checkpoint(&project.name, &name)?;
        let locked = !b
            .lock_dir(&project.name, &name)
            .read_dir()
            .map(|mut d| d.next().is_none())
            .unwrap_or(true);
        rows.push(StackSummary {
            name: b.display_ref(&project.name, &name),
            current: current.as_deref() == Some(name.as_str()),
            last_update: chk
                .last_update_time()
                .filter(|_| !(b.cloud && locked))
                .map(util::format_time),
            update_in_progress: b.cloud.then_some(locked),
            resource_count: chk.latest.as_ref().map(|_| chk.resource_count()),
            url: b.cloud.then(|| b.console_url(&project.name, &name)),
        });
    }
    if p.bool("json") {
        print!("{}", util::json_pretty(&rows, 2));
        return Ok(());
    }
    println!("{:<24}{:<28}RESOURCE COUNT", "NAME", "LAST UPDATE");
    for r in rows {
        let name = if r.current {
            format!("{}*", r.name)
        } else {
            r.name
        };
        println!(
            "{:<24}{:<28}{}",
            name,
            r.last_update.as_deref().unwrap_or("n/a"),
            r.resource_count
                .map(|c| c.to_string())
                .unwrap_or_else(|| "n/a".into())
        );
    }
    Ok(())
}

/// Removes a stack's state, history and (unless preserved) its `Pulumi.<stack>.yaml`.
pub fn remove_stack(s: &Session, preserve_config: bool) -> Res<()> {
    s.backend.remove_stack(&s.project.name, &s.stack)?;
    if !preserve_config {
        let _ = std::fs::remove_file(&s.stack_file.path);
    }
    if backend::selected_stack(&s.project).as_deref() == Some(s.stack.as_str()) {
        backend::select_stack(&s.project, None)?;
    }
    Ok(())
}

pub fn stack_rm(p: &Parsed) -> Res<()> {
    let s = Session::open(p, p.args.first().cloned())?;
    if !p.bool("yes") && !session::interactive(p) {
        return err("--yes must be passed in to proceed when running in non-interactive mode");
    }
    if !p.bool("force") && s.checkpoint.resource_count() > 0 {
        let r = s.display_ref();
        return err(format!(
            "'{r}' still has resources; removal rejected. Possible actions:\n- Make sure that '{r}' is the stack that you want to destroy\n- Run `pulumi destroy` to delete the resources, then run `pulumi stack rm`\n- Run `pulumi stack rm --force` to override this error"
        ));
    }
    remove_stack(&s, p.bool("preserve-config"))?;
    println!("Stack '{}' has been removed!", s.display_ref());
    Ok(())
}

fn stack_outputs(s: &Session, show: bool) -> Res<std::collections::BTreeMap<String, Val>> {
    let secrets = if show {
        let sec = s.secrets()?;
        sec.require_ready()?;
        Some(sec)
    } else {
        None
    };
    let snap = s.checkpoint.snapshot(secrets.as_ref())?;
    Ok(snap
        .resources
        .iter()
        .find(|r| r.typ == "pulumi:pulumi:Stack")
        .map(|r| r.outputs.clone())
        .unwrap_or_default())
}

pub fn stack_output(p: &Parsed) -> Res<()> {
    let s = Session::open(p, None)?;
    let show = p.bool("show-secrets");
    let outs = stack_outputs(&s, show)?;
    let mode = if show { Show::Plain } else { Show::Blind };
    if let Some(name) = p.args.first() {
        let Some(v) = outs.get(name) else {
            return err(format!(
                "current stack does not have output property '{name}'"
            ));
        };
        if p.bool("json") {
            print_json(&v.to_json(mode));
        } else {
            match v.to_json(mode) {
                J::String(s) => println!("{s}"),
                other => println!("{other}"),
            }
        }
        return Ok(());
    }
    if p.bool("json") {
        let o: serde_json::Map<String, J> = outs
            .iter()
            .map(|(k, v)| (k.clone(), v.to_json(mode)))
            .collect();
        print_json(&J::Object(o));
        return Ok(());
    }
    if p.bool("shell") {
        for (k, v) in &outs {
            let text = match v.to_json(mode) {
                J::String(s) => s,
                other => other.to_string(),
            };
            println!("{k}='{}'", text.replace('\'', "'\\''"));
        }
        return Ok(());
    }
    if outs.is_empty() {
        println!("Current stack outputs (0):");
        println!("    No output values currently in this stack");
        return Ok(());
    }
    println!("Current stack outputs ({}):", outs.len());
    let w = outs.keys().map(|k| k.len()).max().unwrap_or(0).max(6);
    println!("    {:<w$}  VALUE", "OUTPUT");
    for (k, v) in &outs {
        let text = match v.to_json(mode) {
            J::String(s) => s,
            other => other.to_string(),
        };
        println!("    {k:<w$}  {text}");
    }
    Ok(())
}

pub fn stack_history(p: &Parsed) -> Res<()> {
    let s = Session::open(p, None)?;
    let json_out = p.bool("json") || p.str("output").as_deref() == Some("json");
    let show = p.bool("show-secrets");
    let secrets = if show {
        let sec = s.secrets()?;
        sec.require_ready()?;
        Some(sec)
    } else {
        None
    };
    let page_size = p.int("page-size").unwrap_or(10).max(0) as usize;
    let page = p.int("page").unwrap_or(1).max(1) as usize;
    let all = s.backend.history(&s.project.name, &s.stack);
    let slice: Vec<&(usize, J)> = if page_size == 0 {
        all.iter().collect()
    } else {
        all.iter()
            .skip((page - 1) * page_size)
            .take(page_size)
            .collect()
    };
    let mut out = Vec::new();
    for (version, h) in slice {
        let mut cfg = serde_json::Map::new();
        if let Some(J::Object(c)) = h.get("config") {
            for (k, v) in c {
                let y: Y = serde_yaml::to_value(v).unwrap_or(Y::Null);
                let j = match project::value_json(&y, secrets.as_ref(), show) {
                    Ok(j) => j,
                    Err(_) => json!({"value": "ERROR_UNABLE_TO_DECRYPT", "secret": true}),
                };
                cfg.insert(k.clone(), j);
            }
        }
        out.push(UpdateInfo {
            version: *version,
            kind: h.get("kind").cloned().unwrap_or(J::Null),
            start_time: util::format_time(h.get("startTime").and_then(J::as_i64).unwrap_or(0)),
            message: h
                .get("message")
                .cloned()
                .unwrap_or(J::String(String::new())),
            environment: h.get("environment").cloned().unwrap_or(json!({})),
            config: J::Object(cfg),
            result: h.get("result").cloned().unwrap_or(J::Null),
            end_time: h.get("endTime").and_then(J::as_i64).map(util::format_time),
            resource_changes: h.get("resourceChanges").cloned(),
        });
    }
    if json_out {
        print!("{}", util::json_pretty(&out, 2));
        return Ok(());
    }
    let out: Vec<J> = out
        .iter()
        .map(|u| serde_json::to_value(u).unwrap_or(J::Null))
        .collect();
    if out.is_empty() {
        println!("Stack {} has never been updated", s.display_ref());
        return Ok(());
    }
    println!("Showing {} of {} updates", out.len(), all.len());
    for e in out {
        println!("UpdateKind: {}", e["kind"].as_str().unwrap_or_default());
        println!("Status: {}", e["result"].as_str().unwrap_or_default());
        println!("Message: {}", e["message"].as_str().unwrap_or_default());
        if let Some(J::Object(rc)) = e.get("resourceChanges") {
            let parts: Vec<String> = rc.iter().map(|(k, v)| format!("{k}: {v}")).collect();
            println!("Changes: {}", parts.join(", "));
        }
        println!("Started: {}", e["startTime"].as_str().unwrap_or_default());
        println!(
            "Ended: {}",
            e.get("endTime").and_then(J::as_str).unwrap_or_default()
        );
        println!();
    }
    Ok(())
}

fn reveal(j: &J, secrets: &Secrets) -> Res<J> {
    Ok(match j {
        J::Object(o) if o.get(SIG_KEY).and_then(J::as_str) == Some(SECRET_SIG) => {
            match o.get("ciphertext").and_then(J::as_str) {
                Some(ct) => json!({SIG_KEY: SECRET_SIG, "plaintext": secrets.decrypt(ct)?}),
                None => j.clone(),
            }
        }
        J::Object(o) => {
            let mut m = serde_json::Map::new();
            for (k, v) in o {
                m.insert(k.clone(), reveal(v, secrets)?);
            }
            J::Object(m)
        }
        J::Array(a) => J::Array(a.iter().map(|v| reveal(v, secrets)).collect::<Res<_>>()?),
        other => other.clone(),
    })
}

pub fn stack_export(p: &Parsed) -> Res<()> {
    let s = Session::open(p, None)?;
    let mut d = match &s.checkpoint.latest {
        Some(d) => d.clone(),
        None => {
            let sec = s.secrets()?;
            Snapshot::default().to_json(&sec, s.salt().as_deref())?
        }
    };
    if p.bool("show-secrets") {
        let sec = s.secrets()?;
        sec.require_ready()?;
        d = reveal(&d, &sec)?;
    }
    let text = util::json_pretty(&json!({"version": 3, "deployment": d}), 4);
    match p.str("file") {
        Some(f) => std::fs::write(f, text)?,
        None => print!("{text}"),
    }
    Ok(())
}

pub fn stack_import(p: &Parsed) -> Res<()> {
    let s = Session::open(p, None)?;
    let text = match p.str("file") {
        Some(f) => std::fs::read_to_string(&f)
            .map_err(|e| Failure::new(exit::ERROR, format!("could not open file: {e}")))?,
        None => {
            let mut t = String::new();
            std::io::stdin().read_to_string(&mut t)?;
            t
        }
    };
    let j: J = serde_json::from_str(&text)
        .map_err(|e| Failure::new(exit::ERROR, format!("could not read deployment: {e}")))?;
    let version = j.get("version").and_then(J::as_i64).unwrap_or(0);
    if !(1..=3).contains(&version) {
        return err(format!("the deployment version {version} is not supported"));
    }
    let mut d = j.get("deployment").cloned().unwrap_or(json!({}));
    if let Some(ps) = d.get("pending_operations").and_then(J::as_array) {
        for op in ps {
            eprintln!(
                "warning: removing pending operation '{}' on '{}' from snapshot",
                op.get("type").and_then(J::as_str).unwrap_or_default(),
                op.pointer("/resource/urn")
                    .and_then(J::as_str)
                    .unwrap_or_default()
            );
        }
    }
    if let Some(o) = d.as_object_mut() {
        o.remove("pending_operations");
    }
    // Re-encrypt plaintext secrets (from `export --show-secrets`) with the stack's secrets.
    if d.to_string().contains("\"plaintext\"") {
        let sec = s.secrets()?;
        sec.require_ready()?;
        let snap = Snapshot::from_json(&d, Some(&sec))?;
        d = snap.to_json(&sec, s.salt().as_deref())?;
    }
    let lock = s.backend.lock(&s.project.name, &s.stack)?;
    let chk = Checkpoint {
        stack: s.checkpoint.stack.clone(),
        latest: Some(d),
    };
    let r = s.backend.save_checkpoint(&s.project.name, &s.stack, &chk);
    s.backend.unlock(&lock);
    r?;
    println!("Import complete.");
    Ok(())
}

pub fn stack_show(p: &Parsed) -> Res<()> {
    let s = Session::open(p, None)?;
    let snap = s.checkpoint.snapshot(None)?;
    println!("Current stack is {}:", s.display_ref());
    println!("    Owner: {}", util::user_name());
    match s.checkpoint.last_update_time() {
        Some(t) => println!("    Last updated: {}", util::format_time(t)),
        None => println!("    Last update: n/a"),
    }
    println!("    Pulumi version used: {}", crate::version_tag());
    println!();
    println!("Current stack resources ({}):", snap.resources.len());
    for r in &snap.resources {
        println!("    {} {}", r.typ, r.name());
        if p.bool("show-urns") {
            println!("        URN: {}", r.urn);
        }
        if p.bool("show-ids") && !r.id.is_empty() {
            println!("        ID: {}", r.id);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- config

fn open_config_session(p: &Parsed) -> Res<Session> {
    let mut s = Session::open(p, None)?;
    s.ensure_salt_in_stack_file()?;
    Ok(s)
}

/// The secrets manager for writing secrets; creates a salt if the stack has none yet.
fn writable_secrets(s: &mut Session) -> Res<Secrets> {
    s.writable_secrets()
}

fn display_key(key: &str, project: &str) -> String {
    key.strip_prefix(&format!("{project}:"))
        .map(str::to_string)
        .unwrap_or_else(|| key.to_string())
}

pub fn config_list(p: &Parsed) -> Res<()> {
    let s = open_config_session(p)?;
    let show = p.bool("show-secrets");
    let secrets = if show && s.stack_file.config.values().any(project::has_secure) {
        let sec = s.secrets()?;
        sec.require_ready()?;
        Some(sec)
    } else {
        None
    };
    if p.bool("json") {
        let mut o = serde_json::Map::new();
        for (k, v) in &s.stack_file.config {
            o.insert(k.clone(), project::value_json(v, secrets.as_ref(), show)?);
        }
        print_json(&J::Object(o));
        return Ok(());
    }
    if s.stack_file.config.is_empty() {
        println!("KEY  VALUE");
        return Ok(());
    }
    let rows: Vec<(String, String)> = s
        .stack_file
        .config
        .iter()
        .map(|(k, v)| {
            let shown = if project::has_secure(v) && !show {
                "[secret]".to_string()
            } else {
                project::decode_value(v, secrets.as_ref())
                    .map(|x| x.unsecret().interp_string())
                    .unwrap_or_default()
            };
            (display_key(k, &s.project.name), shown)
        })
        .collect();
    let w = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(3).max(3);
    println!("{:<w$}  VALUE", "KEY");
    for (k, v) in rows {
        println!("{k:<w$}  {v}");
    }
    Ok(())
}

fn key_of(p: &Parsed, s: &Session) -> Res<String> {
    let Some(raw) = p.args.first() else {
        return Err(Failure::new(
            exit::CONFIGURATION,
            "accepts 1 arg(s), received 0",
        ));
    };
    project::parse_key(raw, &s.project.name)
}

pub fn config_get(p: &Parsed) -> Res<()> {
    let s = open_config_session(p)?;
    let key = key_of(p, &s)?;
    let Some(v) = project::config_get(&s.stack_file.config, &key, p.bool("path"))? else {
        return err(format!(
            "configuration key '{key}' not found for stack '{}'",
            s.display_ref()
        ));
    };
    let secrets = if project::has_secure(v) {
        let sec = s.secrets()?;
        sec.require_ready()?;
        Some(sec)
    } else {
        None
    };
    if p.bool("json") {
        print_json(&project::value_json(v, secrets.as_ref(), true)?);
    } else {
        let val = project::decode_value(v, secrets.as_ref())?.unsecret();
        match val {
            Val::Map(_) | Val::List(_) => {
                println!("{}", serde_json::to_string(&val.to_json(Show::Plain))?)
            }
            other => println!("{}", other.interp_string()),
        }
    }
    Ok(())
}

pub fn config_set(p: &Parsed) -> Res<()> {
    let mut s = open_config_session(p)?;
    let key = key_of(p, &s)?;
    if p.bool("secret") && p.bool("plaintext") {
        return Err(Failure::new(
            exit::CONFIGURATION,
            "only one of --secret or --plaintext may be specified",
        ));
    }
    let value = match p.args.get(1) {
        Some(v) => v.clone(),
        None => {
            if session::interactive(p) {
                return err("value must be specified");
            }
            let mut t = String::new();
            std::io::stdin().read_to_string(&mut t)?;
            t.trim_end_matches('\n').to_string()
        }
    };
    let leaf = if p.bool("secret") {
        let sec = writable_secrets(&mut s)?;
        project::secure(sec.encrypt(&value)?)
    } else {
        Y::String(value)
    };
    project::config_set(&mut s.stack_file.config, &key, p.bool("path"), leaf)?;
    s.stack_file.save()
}

pub fn config_set_all(p: &Parsed) -> Res<()> {
    let mut s = open_config_session(p)?;
    let path = p.bool("path");
    if let Some(doc) = p.str("json") {
        if !p.arr("plaintext").is_empty() || !p.arr("secret").is_empty() || path {
            return Err(Failure::new(
                exit::CONFIGURATION,
                "the --json flag cannot be used with --plaintext, --secret, or --path",
            ));
        }
        let j: J = serde_json::from_str(&doc).map_err(|e| {
            Failure::new(
                exit::CONFIGURATION,
                format!("could not parse --json value: {e}"),
            )
        })?;
        let J::Object(items) = j else {
            return Err(Failure::new(
                exit::CONFIGURATION,
                "--json must be a JSON object of config keys",
            ));
        };
        let mut secrets: Option<Secrets> = None;
        for (k, item) in items {
            let key = project::parse_key(&k, &s.project.name)?;
            let secret = item.get("secret").and_then(J::as_bool).unwrap_or(false);
            let Some(value) = item.get("value") else {
                return Err(Failure::new(
                    exit::CONFIGURATION,
                    format!("config value for '{k}' must have a \"value\""),
                ));
            };
            let text = match value {
                J::String(s) => s.clone(),
                other => other.to_string(),
            };
            let leaf = match (item.get("objectValue"), secret) {
                (Some(obj), false) if !obj.is_null() => {
                    serde_yaml::to_value(obj).unwrap_or(Y::Null)
                }
                (Some(obj), true) if !obj.is_null() => {
                    if secrets.is_none() {
                        secrets = Some(writable_secrets(&mut s)?);
                    }
                    project::secure(
                        secrets
                            .as_ref()
                            .expect("secrets")
                            .encrypt(&obj.to_string())?,
                    )
                }
                (_, true) => {
                    if secrets.is_none() {
                        secrets = Some(writable_secrets(&mut s)?);
                    }
                    project::secure(secrets.as_ref().expect("secrets").encrypt(&text)?)
                }
                (_, false) => Y::String(text),
            };
            project::config_set(&mut s.stack_file.config, &key, false, leaf)?;
        }
        return s.stack_file.save();
    }
    for pair in p.arr("plaintext") {
        let (k, v) = project::split_pair(&pair)?;
        let key = project::parse_key(&k, &s.project.name)?;
        project::config_set(&mut s.stack_file.config, &key, path, Y::String(v))?;
    }
    let secret_pairs = p.arr("secret");
    if !secret_pairs.is_empty() {
        let sec = writable_secrets(&mut s)?;
        for pair in secret_pairs {
            let (k, v) = project::split_pair(&pair)?;
            let key = project::parse_key(&k, &s.project.name)?;
            project::config_set(
                &mut s.stack_file.config,
                &key,
                path,
                project::secure(sec.encrypt(&v)?),
            )?;
        }
    }
    s.stack_file.save()
}

pub fn config_rm(p: &Parsed, all: bool) -> Res<()> {
    let mut s = open_config_session(p)?;
    if p.args.is_empty() {
        return Err(Failure::new(
            exit::CONFIGURATION,
            "accepts at least 1 arg(s), received 0",
        ));
    }
    let keys: Vec<String> = if all {
        p.args.clone()
    } else {
        vec![p.args[0].clone()]
    };
    for raw in keys {
        let key = project::parse_key(&raw, &s.project.name)?;
        project::config_rm(&mut s.stack_file.config, &key, p.bool("path"))?;
    }
    s.stack_file.save()
}

pub fn config_refresh(p: &Parsed) -> Res<()> {
    let mut s = Session::open(p, None)?;
    if s.stack_file.exists && !p.bool("force") {
        return err(format!(
            "{} already exists; use --force to overwrite",
            s.stack_file.path.display()
        ));
    }
    let hist = s.backend.history(&s.project.name, &s.stack);
    let Some((_, latest)) = hist.first() else {
        return err(format!(
            "no previous deployment of stack '{}' to refresh the config from",
            s.display_ref()
        ));
    };
    s.stack_file.config.clear();
    if let Some(J::Object(c)) = latest.get("config") {
        for (k, v) in c {
            s.stack_file
                .config
                .insert(k.clone(), serde_yaml::to_value(v).unwrap_or(Y::Null));
        }
    }
    if s.stack_file.encryption_salt.is_none() {
        s.stack_file.encryption_salt = s.checkpoint.salt();
    }
    s.stack_file.save()
}

pub fn config_env(p: &Parsed, sub: &str) -> Res<()> {
    if sub != "ls" && !p.bool("yes") && !session::interactive(p) {
        return err("non-interactive mode requires --yes flag");
    }
    let mut s = Session::open(p, None)?;
    if !s.backend.cloud {
        return err(format!(
            "backend {} does not support environments; Pulumi ESC environments require the Pulumi Cloud backend",
            s.backend.url
        ));
    }
    let mut envs: Vec<String> = match &s.stack_file.environment {
        Some(Y::Sequence(l)) => l
            .iter()
            .filter_map(|x| x.as_str().map(str::to_string))
            .collect(),
        Some(Y::Mapping(m)) => m
            .get("imports")
            .and_then(Y::as_sequence)
            .map(|l| {
                l.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default(),
        _ => vec![],
    };
    match sub {
        "ls" => {
            if p.bool("json") {
                print_json(&json!(envs));
            } else {
                for e in &envs {
                    println!("{e}");
                }
            }
            return Ok(());
        }
        "add" => envs.extend(p.args.iter().cloned()),
        _ => envs.retain(|e| !p.args.contains(e)),
    }
    s.stack_file.environment = if envs.is_empty() {
        None
    } else {
        Some(Y::Sequence(envs.into_iter().map(Y::String).collect()))
    };
    s.stack_file.save()?;
    println!("KEY  VALUE");
    for (k, v) in &s.stack_file.config {
        let shown = if project::has_secure(v) {
            "[secret]".to_string()
        } else {
            project::decode_value(v, None)
                .map(|x| x.interp_string())
                .unwrap_or_default()
        };
        println!("{}  {shown}", display_key(k, &s.project.name));
    }
    Ok(())
}

// ---------------------------------------------------------------- misc

pub fn cancel(p: &Parsed) -> Res<()> {
    let s = Session::open(p, p.args.first().cloned())?;
    if !p.bool("yes") && !session::interactive(p) {
        return err("--yes must be passed in to proceed when running in non-interactive mode");
    }
    let n = s.backend.cancel(&s.project.name, &s.stack);
    if s.backend.cloud && n == 0 {
        return err(format!("stack {} has never been updated", s.display_ref()));
    }
    println!(
        "The currently running update for '{}' has been canceled!",
        s.display_ref()
    );
    Ok(())
}

pub fn install(_p: &Parsed) -> Res<()> {
    let project = session::load_project()?;
    println!("Installing dependencies...");
    println!();
    if project.runtime != "yaml" {
        println!(
            "(the Pulumi CLI test stand-in installs nothing for runtime '{}')",
            project.runtime
        );
    }
    println!("Finished installing dependencies");
    Ok(())
}

pub fn plugin(p: &Parsed, sub: &str) -> Res<()> {
    match sub {
        "ls" => {
            if p.bool("json") {
                print_json(&json!([]));
            } else {
                println!("NAME  KIND  VERSION  SIZE  INSTALLED  LAST USED");
            }
        }
        "install" => {
            // A no-op: the stand-in's resource types are built in.
            if let (Some(kind), Some(name)) = (p.args.first(), p.args.get(1)) {
                let v = p.args.get(2).cloned().unwrap_or_default();
                eprintln!(
                    "[{kind}plugin {name}-{v}] installing (no-op in the Pulumi CLI test stand-in)"
                );
            }
        }
        _ => {}
    }
    Ok(())
}
