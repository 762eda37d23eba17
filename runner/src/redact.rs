//! Keeping credentials and secret values out of everything the runner emits: the same rules as
//! the operator's (one implementation, in the shared `pulumi-gitauth` crate), applied
//! structurally. One process-wide [`Redactor`] is built at start from everything the runner
//! knows is secret ([`install`]: the plan, the environment, mounted Secrets, `$PULUMI_ENV`)
//! and grows as more is learned (resolved config, secret outputs; [`remember`]). Every byte
//! stream goes through it: Pulumi's forwarded stdout and stderr (`exec`), the runner's own log
//! lines and the termination message (`report`).

use pulumi_gitauth::env as git_env;
pub use pulumi_gitauth::redact::{url_credentials, urls, Redactor, MASK, MIN_SECRET_CHARS};
use pulumi_operator_api::plan::RunPlan;
use std::path::Path;
use std::sync::{Arc, LazyLock, RwLock};

/// Variables whose values are credentials whatever the plan says: Pulumi's own, the `fetch`
/// container's git credentials (as `pulumi_gitauth::Credentials::from_lookup` reads them),
/// and the usual cloud provider secrets.
pub const SECRET_ENV_NAMES: &[&str] = &[
    "PULUMI_ACCESS_TOKEN",
    "PULUMI_CONFIG_PASSPHRASE",
    git_env::TOKEN,
    git_env::PASSWORD,
    git_env::SSH_PRIVATE_KEY,
    git_env::GITHUB_APP_PRIVATE_KEY,
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "ARM_CLIENT_SECRET",
    "AZURE_CLIENT_SECRET",
    "GOOGLE_CREDENTIALS",
    "GITHUB_TOKEN",
];

/// The variable naming a file that holds the passphrase.
pub const PASSPHRASE_FILE_ENV: &str = "PULUMI_CONFIG_PASSPHRASE_FILE";

/// Files bigger than this are not read for secret values (a Secret holds at most 1 MiB).
const MAX_SECRET_FILE_BYTES: u64 = 1024 * 1024;

/// The process-wide redactor. An `Arc` so that a stream takes a cheap snapshot per
/// invocation instead of a lock per line.
static CURRENT: LazyLock<RwLock<Arc<Redactor>>> = LazyLock::new(Default::default);

/// The values known to be secret at start, and where the ones too short to mask came from.
#[derive(Debug, Default)]
pub struct Startup {
    pub redactor: Redactor,
    /// Descriptions (never values) of secret values too short to be masked.
    pub too_short: Vec<String>,
}

impl Startup {
    fn add(&mut self, value: &str, origin: impl FnOnce() -> String) {
        let before = self.redactor.too_short();
        self.redactor.add(value);
        if self.redactor.too_short() > before {
            self.too_short.push(origin());
        }
    }
}

/// Everything known to be secret before anything runs: the variables the plan names
/// (`secretEnv`) and [`SECRET_ENV_NAMES`], the Secrets mounted for `envFrom`
/// (`secretEnvDirs`), the passphrase file, credentials in any URL of the environment or the
/// plan's source, every value of `$PULUMI_ENV` (init containers put credentials there and the
/// runner cannot tell which are not), and the plan's literal secret config.
pub fn startup(
    plan: Option<&RunPlan>,
    env: &[(String, String)],
    dotenv: &[(String, String)],
) -> Startup {
    let mut s = Startup::default();
    let plan_names = plan.map(|p| p.secret_env.as_slice()).unwrap_or_default();
    s.add_secret_variables(env, plan_names);
    s.add_passphrase_file(env);
    s.add_mounted_secrets(
        plan.map(|p| p.secret_env_dirs.as_slice())
            .unwrap_or_default(),
    );
    for (name, value) in env {
        for credential in url_credentials(value) {
            s.add(&credential, || {
                format!("the URL credentials in the environment variable {name}")
            });
        }
    }
    s.add_dotenv(dotenv);
    if let Some(p) = plan {
        s.add_plan(p);
    }
    s
}

/// The value of the last assignment of `name` in `env`.
fn lookup<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a String> {
    env.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v)
}

impl Startup {
    /// The variables of [`SECRET_ENV_NAMES`] and those the plan names.
    fn add_secret_variables(&mut self, env: &[(String, String)], plan_names: &[String]) {
        for name in SECRET_ENV_NAMES
            .iter()
            .copied()
            .chain(plan_names.iter().map(String::as_str))
        {
            if let Some(value) = lookup(env, name) {
                self.add(value, || format!("the environment variable {name}"));
            }
        }
    }

    /// The passphrase in the file [`PASSPHRASE_FILE_ENV`] names.
    fn add_passphrase_file(&mut self, env: &[(String, String)]) {
        if let Some(file) = lookup(env, PASSPHRASE_FILE_ENV).filter(|f| !f.is_empty()) {
            if let Some(value) = read_small(Path::new(file)) {
                self.add(&value, || {
                    format!("the file named by {PASSPHRASE_FILE_ENV}")
                });
            }
        }
    }

    /// Every key of the Secrets mounted for `envFrom`.
    fn add_mounted_secrets(&mut self, dirs: &[String]) {
        for dir in dirs {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let key = entry.file_name().to_string_lossy().into_owned();
                // A Secret volume's bookkeeping (`..data`, `..2026_…`) holds the same files again.
                if key.starts_with("..") {
                    continue;
                }
                if let Some(value) = read_small(&entry.path()) {
                    self.add(&value, || {
                        format!("the key {key} of the Secret mounted at {dir}")
                    });
                }
            }
        }
    }

    /// Every value of `$PULUMI_ENV`, and the credentials of the URLs in them.
    fn add_dotenv(&mut self, dotenv: &[(String, String)]) {
        for (name, value) in dotenv {
            self.add(value, || format!("the $PULUMI_ENV variable {name}"));
            for credential in url_credentials(value) {
                self.add(&credential, || {
                    format!("the URL credentials in the $PULUMI_ENV variable {name}")
                });
            }
        }
    }

    /// The credentials of the source URL and the literal secret config values.
    fn add_plan(&mut self, p: &RunPlan) {
        if let Some(url) = p.source.as_ref().and_then(source_url) {
            for credential in url_credentials(url) {
                self.add(&credential, || {
                    "the credentials in the source URL".to_string()
                });
            }
        }
        for item in &p.stack.config {
            if !item.secret.unwrap_or(false) {
                continue;
            }
            match &item.value {
                Some(serde_json::Value::String(v)) => {
                    self.add(v, || format!("the secret config value {}", item.key))
                }
                Some(other) => self.add(&other.to_string(), || {
                    format!("the secret config value {}", item.key)
                }),
                None => {}
            }
        }
    }
}

fn source_url(source: &pulumi_operator_api::plan::Source) -> Option<&str> {
    use pulumi_operator_api::plan::Source;
    match source {
        Source::Git { url, .. } | Source::Flux { url, .. } => Some(url),
        _ => None,
    }
}

/// A small UTF-8 file's text (secret values in other encodings cannot be in an environment
/// variable either).
fn read_small(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_SECRET_FILE_BYTES {
        return None;
    }
    String::from_utf8(std::fs::read(path).ok()?).ok()
}

/// Builds the process-wide redactor from this process's environment, `$PULUMI_ENV` and the
/// plan (when it could be read). Returns the names of the secret values too short to be masked
/// (the caller reports them).
pub fn install(plan: Option<&RunPlan>) -> Vec<String> {
    let env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let found = startup(plan, &env, &crate::dotenv::load());
    remember(&found.redactor);
    found.too_short
}

/// Adds values to the process-wide redactor.
pub fn remember(more: &Redactor) {
    let mut current = match CURRENT.write() {
        Ok(c) => c,
        Err(poisoned) => poisoned.into_inner(),
    };
    let mut next = Redactor::clone(&current);
    next.extend(more);
    *current = Arc::new(next);
}

/// The process-wide redactor as it is now.
pub fn current() -> Arc<Redactor> {
    match CURRENT.read() {
        Ok(c) => Arc::clone(&c),
        Err(poisoned) => Arc::clone(&poisoned.into_inner()),
    }
}

/// `text` as the runner may emit it: known secret values masked, URL user-info removed.
pub fn mask(text: &str) -> String {
    mask_with(&current(), text)
}

/// [`mask`] with a given redactor.
pub fn mask_with(redactor: &Redactor, text: &str) -> String {
    let masked = redactor.apply(text);
    if masked.contains("://") {
        urls(&masked)
    } else {
        masked
    }
}

/// [`mask_with`] for bytes that may not be UTF-8 (Pulumi's output is passed on as it came).
pub fn mask_bytes(redactor: &Redactor, bytes: &[u8]) -> Vec<u8> {
    let masked = redactor.apply_bytes(bytes);
    match std::str::from_utf8(&masked) {
        Ok(text) if text.contains("://") => urls(text).into_bytes(),
        _ => masked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use pulumi_operator_api::plan::{Operation, Source, StackPlan};
    use pulumi_operator_api::workspace::ConfigItem;

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn plan(secret_env: &[&str], dirs: Vec<String>) -> RunPlan {
        RunPlan {
            update_name: "u".into(),
            namespace: "ns".into(),
            update_uid: "uid".into(),
            operation: Operation::Up,
            source: Some(Source::Git {
                url: "https://canary-src-token@git.example/r.git".into(),
                commit: None,
                reference: Some("main".into()),
                shallow: false,
                dir: None,
            }),
            stack: StackPlan {
                name: "dev".into(),
                create: true,
                config: vec![ConfigItem {
                    key: "dbPassword".into(),
                    value: Some(serde_json::json!("canary-literal-config")),
                    secret: Some(true),
                    ..Default::default()
                }],
                ..Default::default()
            },
            options: Default::default(),
            outputs_secret: "u-stack-outputs".into(),
            outputs_labels: Default::default(),
            outputs_key: None,
            apply_plan: None,
            pulumi_log_level: None,
            lock_holder: None,
            secret_env: secret_env.iter().map(|s| s.to_string()).collect(),
            secret_env_dirs: dirs,
            dependency_cache: None,
            conflict_retry_delay_ms: None,
            policy_packs: Vec::new(),
            heartbeat: None,
        }
    }

    /// A canary planted in every source the runner knows of, in every encoding, never
    /// survives; ordinary text does.
    #[test]
    fn canaries_from_every_source_are_masked() {
        let dir = tempfile::tempdir().unwrap();
        let passphrase_file = dir.path().join("passphrase");
        std::fs::write(&passphrase_file, "canary-passphrase-file\n").unwrap();
        let mounted = dir.path().join("env-secret-0");
        std::fs::create_dir_all(mounted.join("..2026_01_01")).unwrap();
        std::fs::write(mounted.join("API_KEY"), "canary-envfrom-secret").unwrap();
        let ssh_key = "-----BEGIN OPENSSH PRIVATE KEY-----\n\
                       b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAAB\n\
                       canaryKeyLineTwoAAAAC3NzaC1lZDI1NTE5AAAAIG\n\
                       -----END OPENSSH PRIVATE KEY-----\n";
        let env = pairs(&[
            ("PULUMI_ACCESS_TOKEN", "pul-canary-access-token"),
            ("PULUMI_CONFIG_PASSPHRASE", "canary-passphrase"),
            (PASSPHRASE_FILE_ENV, passphrase_file.to_str().unwrap()),
            (
                "PULUMI_BACKEND_URL",
                "postgres://u:canary%2Fdb-pw@db:5432/state",
            ),
            ("GIT_TOKEN", "canary-git-token"),
            ("GIT_PASSWORD", "canary-git-password"),
            ("GIT_SSH_PRIVATE_KEY", ssh_key),
            ("MY_SECRET_ENV", "canary-env-ref-secret"),
            ("REGION", "eu-west-1"),
            ("SHORT", "ab1"),
        ]);
        let dotenv = pairs(&[("DYNAMIC_TOKEN", "canary-dotenv-value")]);
        let p = plan(
            &["MY_SECRET_ENV", "SHORT"],
            vec![mounted.to_str().unwrap().to_string()],
        );
        let found = startup(Some(&p), &env, &dotenv);
        assert_eq!(found.too_short, ["the environment variable SHORT"]);
        let r = found.redactor;
        let canaries = [
            "pul-canary-access-token",
            "canary-passphrase",
            "canary-passphrase-file",
            "canary/db-pw",
            "canary%2Fdb-pw",
            "canary-git-token",
            "canary-git-password",
            "canaryKeyLineTwoAAAAC3NzaC1lZDI1NTE5AAAAIG",
            "canary-env-ref-secret",
            "canary-envfrom-secret",
            "canary-dotenv-value",
            "canary-src-token",
            "canary-literal-config",
        ];
        for c in canaries {
            let json = serde_json::to_string(&serde_json::json!({ "v": c })).unwrap();
            let b64 = base64::engine::general_purpose::STANDARD.encode(c);
            let b64_in_blob =
                base64::engine::general_purpose::STANDARD.encode(format!("xy{json}").as_bytes());
            for spelling in [c.to_string(), json, b64, b64_in_blob] {
                let line = format!("error: {spelling} was rejected");
                let out = mask_with(&r, &line);
                assert!(!out.contains(c), "{c} leaked: {out}");
                assert!(out.starts_with("error: "), "{out}");
                assert!(out.ends_with(" was rejected"), "{out}");
            }
        }
        // The whole SSH key, as JSON in an event, leaves no key line.
        let out = mask_with(&r, &serde_json::to_string(ssh_key).unwrap());
        assert!(!out.contains("b3BlbnNzaC1rZXktdjE"), "{out}");
        // Ordinary text, and values that are not secret, stay readable.
        let plain = "Updating (dev) in eu-west-1: + aws:s3:Bucket b created";
        assert_eq!(mask_with(&r, plain), plain);
        // URL user-info is removed even for credentials nobody declared.
        assert_eq!(
            mask_with(&r, "cloning https://someone:unknown-pw@h/r.git"),
            "cloning https://***@h/r.git"
        );
    }

    #[test]
    fn bytes_that_are_not_utf8_are_masked_and_kept() {
        let mut r = Redactor::default();
        r.add("canary-bytes");
        let out = mask_bytes(&r, b"\xff\xfe canary-bytes \x1b[31m");
        assert_eq!(out, b"\xff\xfe [secret] \x1b[31m");
    }
}
