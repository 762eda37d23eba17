//! Git credentials of a Stack, as PKO defines them (`gitAuth`, and the deprecated
//! `gitAuthSecret`):
//!
//! - which Secret keys hold them ([`auth_refs`], PKO's precedence: `gitAuthSecret` when set,
//!   else `gitAuth` with `sshAuth` > `accessToken` > `githubApp` > `basicAuth`);
//! - the Workspace's `spec.git.auth` ([`workspace_git_auth`]): Secret *references* only, which
//!   the Job's `fetch` container receives as `GIT_*` env `secretKeyRef`s;
//! - the values, read by the operator for its own ls-remote ([`read_credentials`]). A missing
//!   Secret or key is an invalid spec (`Stalled` `SpecInvalid`, as in PKO).

use super::ResolveError;
use k8s_openapi::api::core::v1::{Secret, SecretKeySelector};
use kube::api::Api;
use kube::{Client, ResourceExt};
use pulumi_gitauth::{line, Credentials, DEFAULT_GITHUB_API_URL, KNOWN_HOSTS_KEY};
use pulumi_operator_api::{
    GitAuthConfig, GitSource, ResourceRef, Stack, WorkspaceGitAuth, WorkspaceGitHubAppAuth,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Stack (and Workspace) annotation: the GitHub API that GitHub App credentials are exchanged
/// at, e.g. `https://github.example.com/api/v3` for GitHub Enterprise Server. Without it the
/// operator's `GITHUB_API_URL` environment variable applies, else `https://api.github.com`.
pub const GITHUB_API_URL_ANNOTATION: &str = "pulumi.com/github-api-url";
/// The operator's environment variable with the default GitHub API URL.
pub const GITHUB_API_URL_ENV: &str = pulumi_gitauth::env::GITHUB_API_URL;

/// The keys of a `gitAuthSecret` (PKO's names).
pub const LEGACY_SSH_KEY: &str = "sshPrivateKey";
pub const LEGACY_PASSWORD: &str = "password";
pub const LEGACY_USERNAME: &str = "username";
pub const LEGACY_TOKEN: &str = "accessToken";

/// One credential value: a key of a Secret, and the spec field that names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretKey {
    pub field: &'static str,
    pub name: String,
    pub key: String,
}

/// Where a Stack's git credentials live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthRefs {
    None,
    /// `gitAuthSecret`: one Secret, PKO's key precedence applied once it is read.
    Legacy(String),
    Ssh {
        key: SecretKey,
        passphrase: Option<SecretKey>,
    },
    Token(SecretKey),
    GitHubApp {
        app_id: SecretKey,
        installation_id: SecretKey,
        private_key: SecretKey,
        api_url: String,
    },
    Basic {
        username: SecretKey,
        password: SecretKey,
    },
}

fn key(field: &'static str, r: &ResourceRef) -> Option<SecretKey> {
    r.secret.as_ref().map(|s| SecretKey {
        field,
        name: s.name.clone(),
        key: s.key.clone(),
    })
}

/// The GitHub API URL for a Stack: its annotation, else the operator's `GITHUB_API_URL`, else
/// `https://api.github.com`.
pub fn github_api_url(stack: &Stack) -> String {
    stack
        .annotations()
        .get(GITHUB_API_URL_ANNOTATION)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(default_github_api_url)
}

/// The operator's `GITHUB_API_URL`, else `https://api.github.com`.
pub fn default_github_api_url() -> String {
    std::env::var(GITHUB_API_URL_ENV)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| DEFAULT_GITHUB_API_URL.to_string())
}

/// Where the credentials of `git` live. References were validated before (type Secret, same
/// namespace), so a reference without a Secret is skipped here.
pub fn auth_refs(git: &GitSource, api_url: &str) -> AuthRefs {
    if let Some(secret) = git.git_auth_secret.as_ref().filter(|s| !s.is_empty()) {
        return AuthRefs::Legacy(secret.clone());
    }
    match &git.git_auth {
        Some(auth) => config_refs(auth, api_url),
        None => AuthRefs::None,
    }
}

/// Where the credentials of a `gitAuth` live (a Stack's, or a StackPolicy pack's).
pub fn config_refs(auth: &GitAuthConfig, api_url: &str) -> AuthRefs {
    if let Some(ssh) = &auth.ssh_auth {
        if let Some(k) = key("spec.gitAuth.sshAuth.sshPrivateKey", &ssh.ssh_private_key) {
            return AuthRefs::Ssh {
                key: k,
                passphrase: ssh
                    .password
                    .as_ref()
                    .and_then(|p| key("spec.gitAuth.sshAuth.password", p)),
            };
        }
    }
    if let Some(t) = auth
        .access_token
        .as_ref()
        .and_then(|t| key("spec.gitAuth.accessToken", t))
    {
        return AuthRefs::Token(t);
    }
    if let Some(app) = &auth.github_app {
        if let (Some(app_id), Some(installation_id), Some(private_key)) = (
            key("spec.gitAuth.githubApp.appID", &app.app_id),
            key(
                "spec.gitAuth.githubApp.installationID",
                &app.installation_id,
            ),
            key("spec.gitAuth.githubApp.privateKey", &app.private_key),
        ) {
            return AuthRefs::GitHubApp {
                app_id,
                installation_id,
                private_key,
                api_url: api_url.to_string(),
            };
        }
    }
    if let Some(basic) = &auth.basic_auth {
        if let (Some(username), Some(password)) = (
            key("spec.gitAuth.basicAuth.userName", &basic.user_name),
            key("spec.gitAuth.basicAuth.password", &basic.password),
        ) {
            return AuthRefs::Basic { username, password };
        }
    }
    AuthRefs::None
}

/// The Secrets that `refs` reads.
pub fn secret_names(refs: &AuthRefs) -> Vec<String> {
    let mut names: Vec<String> = match refs {
        AuthRefs::None => vec![],
        AuthRefs::Legacy(name) => vec![name.clone()],
        AuthRefs::Ssh { key, passphrase } => std::iter::once(key)
            .chain(passphrase)
            .map(|k| k.name.clone())
            .collect(),
        AuthRefs::Token(k) => vec![k.name.clone()],
        AuthRefs::GitHubApp {
            app_id,
            installation_id,
            private_key,
            ..
        } => [app_id, installation_id, private_key]
            .iter()
            .map(|k| k.name.clone())
            .collect(),
        AuthRefs::Basic { username, password } => {
            vec![username.name.clone(), password.name.clone()]
        }
    };
    names.sort();
    names.dedup();
    names
}

/// Secret contents by name; an absent name is a Secret that does not exist.
pub type SecretData = BTreeMap<String, BTreeMap<String, Vec<u8>>>;

/// Git credentials that cannot be read from their Secrets: the message names the field, the
/// Secret and the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CredentialsError(pub String);

impl From<String> for CredentialsError {
    fn from(message: String) -> CredentialsError {
        CredentialsError(message)
    }
}

fn text(name: &str, key: &str, bytes: &[u8]) -> Result<String, CredentialsError> {
    String::from_utf8(bytes.to_vec())
        .map_err(|_| format!("the key {key:?} of Secret {name:?} is not UTF-8 text").into())
}

fn value(secrets: &SecretData, k: &SecretKey) -> Result<String, CredentialsError> {
    let data = secrets
        .get(&k.name)
        .ok_or_else(|| format!("{}: Secret {:?} not found", k.field, k.name))?;
    let bytes = data
        .get(&k.key)
        .ok_or_else(|| format!("{}: Secret {:?} has no key {:?}", k.field, k.name, k.key))?;
    text(&k.name, &k.key, bytes)
}

fn optional(
    secrets: &SecretData,
    name: &str,
    key: &str,
) -> Result<Option<String>, CredentialsError> {
    match secrets.get(name).and_then(|d| d.get(key)) {
        Some(bytes) => Ok(Some(text(name, key, bytes)?).filter(|v| !v.trim().is_empty())),
        None => Ok(None),
    }
}

/// The credentials `refs` name, from the Secrets' contents. The error (an invalid spec) names
/// the field, the Secret and the key, never a value.
pub fn credentials_from(
    refs: &AuthRefs,
    secrets: &SecretData,
) -> Result<Credentials, CredentialsError> {
    Ok(match refs {
        AuthRefs::None => Credentials::None,
        AuthRefs::Legacy(name) => {
            let data = secrets
                .get(name)
                .ok_or_else(|| format!("spec.gitAuthSecret: Secret {name:?} not found"))?;
            let get = |k: &str| optional(secrets, name, k);
            if let Some(private_key) = get(LEGACY_SSH_KEY)? {
                Credentials::Ssh {
                    private_key,
                    passphrase: get(LEGACY_PASSWORD)?.map(|p| line(&p)),
                    known_hosts: get(KNOWN_HOSTS_KEY)?,
                }
            } else if let Some(token) = get(LEGACY_TOKEN)? {
                Credentials::token(line(&token))
            } else if let Some(username) = get(LEGACY_USERNAME)? {
                let password = get(LEGACY_PASSWORD)?.ok_or_else(|| {
                    format!("spec.gitAuthSecret: Secret {name:?} has the key \"username\" but no key \"password\"")
                })?;
                Credentials::Basic {
                    username: line(&username),
                    password: line(&password),
                }
            } else {
                let mut keys: Vec<&str> = data.keys().map(String::as_str).collect();
                keys.sort();
                return Err(format!(
                    "spec.gitAuthSecret: Secret {name:?} has none of the keys \"sshPrivateKey\", \
                     \"accessToken\" or \"username\" (it has: {})",
                    if keys.is_empty() {
                        "no keys".to_string()
                    } else {
                        keys.join(", ")
                    }
                )
                .into());
            }
        }
        AuthRefs::Ssh { key, passphrase } => Credentials::Ssh {
            private_key: value(secrets, key)?,
            passphrase: passphrase
                .as_ref()
                .map(|p| value(secrets, p).map(|v| line(&v)))
                .transpose()?
                .filter(|p| !p.is_empty()),
            known_hosts: optional(secrets, &key.name, KNOWN_HOSTS_KEY)?,
        },
        AuthRefs::Token(k) => Credentials::token(line(&value(secrets, k)?)),
        AuthRefs::GitHubApp {
            app_id,
            installation_id,
            private_key,
            api_url,
        } => Credentials::GitHubApp {
            app_id: value(secrets, app_id)?.trim().to_string(),
            installation_id: value(secrets, installation_id)?.trim().to_string(),
            private_key: value(secrets, private_key)?,
            api_url: api_url.clone(),
        },
        AuthRefs::Basic { username, password } => Credentials::Basic {
            username: line(&value(secrets, username)?),
            password: line(&value(secrets, password)?),
        },
    })
}

/// How long a Secret read for git credentials is reused: many Stacks polling with the same
/// credentials cost one GET per Secret per this interval, and a changed or newly created
/// Secret is seen within it.
pub const SECRET_REUSE: Duration = Duration::from_secs(5);

type Cached = (Instant, Option<BTreeMap<String, Vec<u8>>>);

/// Recently read Secrets, by (namespace, name); `None` is a Secret that does not exist.
fn secret_cache() -> &'static Mutex<HashMap<(String, String), Cached>> {
    static CACHE: OnceLock<Mutex<HashMap<(String, String), Cached>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

fn cached_secret(ns: &str, name: &str, now: Instant) -> Option<Option<BTreeMap<String, Vec<u8>>>> {
    let mut cache = secret_cache().lock().unwrap_or_else(|p| p.into_inner());
    cache.retain(|_, (at, _)| now.saturating_duration_since(*at) < SECRET_REUSE);
    cache
        .get(&(ns.to_string(), name.to_string()))
        .map(|(_, data)| data.clone())
}

/// Reads the Secrets `refs` names (in `ns`) and returns the credentials. A missing Secret or
/// key is `SpecInvalid`; an API error is returned as such (retried).
pub async fn read_credentials(
    client: &Client,
    ns: &str,
    refs: &AuthRefs,
) -> Result<Credentials, ResolveError> {
    if *refs == AuthRefs::None {
        return Ok(Credentials::None);
    }
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let mut secrets = SecretData::new();
    for name in secret_names(refs) {
        let data = match cached_secret(ns, &name, Instant::now()) {
            Some(data) => data,
            None => {
                let data = match api.get_opt(&name).await {
                    Ok(s) => s.map(|s| {
                        s.data
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(k, v)| (k, v.0))
                            .collect::<BTreeMap<_, _>>()
                    }),
                    Err(e) => {
                        return Err(ResolveError::unavailable(format!(
                            "cannot read the git credentials Secret {name:?}: {e}"
                        )))
                    }
                };
                secret_cache()
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(
                        (ns.to_string(), name.clone()),
                        (Instant::now(), data.clone()),
                    );
                data
            }
        };
        if let Some(data) = data {
            secrets.insert(name, data);
        }
    }
    credentials_from(refs, &secrets).map_err(|e| ResolveError::spec_invalid(e.0))
}

fn selector(name: &str, key: &str, optional: bool) -> SecretKeySelector {
    SecretKeySelector {
        name: name.to_string(),
        key: key.to_string(),
        optional: optional.then_some(true),
    }
}

fn from_ref(r: &ResourceRef) -> Option<SecretKeySelector> {
    r.secret.as_ref().map(|s| selector(&s.name, &s.key, false))
}

/// The Workspace's `spec.git.auth` for a Stack, as PKO builds it: a `gitAuthSecret` gives all
/// four keys as optional references; then each `gitAuth` method sets its own references.
pub fn workspace_git_auth(git: &GitSource) -> Option<WorkspaceGitAuth> {
    let mut auth = WorkspaceGitAuth::default();
    if let Some(secret) = git.git_auth_secret.as_ref().filter(|s| !s.is_empty()) {
        auth.ssh_private_key = Some(selector(secret, LEGACY_SSH_KEY, true));
        auth.password = Some(selector(secret, LEGACY_PASSWORD, true));
        auth.username = Some(selector(secret, LEGACY_USERNAME, true));
        auth.token = Some(selector(secret, LEGACY_TOKEN, true));
    }
    if let Some(g) = &git.git_auth {
        if let Some(ssh) = &g.ssh_auth {
            auth.ssh_private_key = from_ref(&ssh.ssh_private_key);
            if let Some(p) = &ssh.password {
                auth.password = from_ref(p);
            }
        }
        if let Some(basic) = &g.basic_auth {
            auth.username = from_ref(&basic.user_name);
            auth.password = from_ref(&basic.password);
        }
        if let Some(t) = &g.access_token {
            auth.token = from_ref(t);
        }
        if let Some(app) = &g.github_app {
            if let (Some(app_id), Some(installation_id), Some(private_key)) = (
                from_ref(&app.app_id),
                from_ref(&app.installation_id),
                from_ref(&app.private_key),
            ) {
                auth.github_app = Some(WorkspaceGitHubAppAuth {
                    app_id,
                    installation_id,
                    private_key,
                });
            }
        }
    }
    (auth != WorkspaceGitAuth::default()).then_some(auth)
}

/// Whether the Stack authenticates to git as a GitHub App.
fn uses_github_app(stack: &Stack) -> bool {
    stack
        .spec
        .git
        .git_auth
        .as_ref()
        .is_some_and(|a| a.github_app.is_some())
}

/// Whether the operator may exchange this Stack's GitHub App credentials at its GitHub API
/// URL (only checked when the Stack uses a GitHub App).
pub fn github_api_limits(
    stack: &Stack,
    limits: &crate::runtime::limits::AdminLimits,
) -> Result<(), crate::runtime::limits::NotAllowed> {
    if !uses_github_app(stack) {
        return Ok(());
    }
    crate::runtime::limits::check_github_api_url(&github_api_url(stack), limits).map_err(|e| {
        crate::runtime::limits::NotAllowed(format!("annotation {GITHUB_API_URL_ANNOTATION}: {e}"))
    })
}

/// The Workspace annotation recording a non-default GitHub API URL for a Stack that uses a
/// GitHub App (the Job's `fetch` container gets it as `GITHUB_API_URL`).
pub fn workspace_annotations(stack: &Stack) -> Option<(String, String)> {
    let url = github_api_url(stack);
    (uses_github_app(stack) && url != DEFAULT_GITHUB_API_URL)
        .then(|| (GITHUB_API_URL_ANNOTATION.to_string(), url))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn git(v: serde_json::Value) -> GitSource {
        serde_json::from_value(v).unwrap()
    }

    fn sref(name: &str, key: &str) -> serde_json::Value {
        json!({"type": "Secret", "secret": {"name": name, "key": key}})
    }

    fn data(pairs: &[(&str, &[(&str, &str)])]) -> SecretData {
        pairs
            .iter()
            .map(|(n, kv)| {
                (
                    n.to_string(),
                    kv.iter()
                        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                        .collect(),
                )
            })
            .collect()
    }

    #[test]
    fn precedence_is_pkos() {
        let all = git(json!({
            "gitAuth": {
                "basicAuth": {"userName": sref("b", "u"), "password": sref("b", "p")},
                "githubApp": {"appID": sref("a", "id"), "installationID": sref("a", "inst"), "privateKey": sref("a", "key")},
                "accessToken": sref("t", "token"),
                "sshAuth": {"sshPrivateKey": sref("s", "key")},
            }
        }));
        assert!(matches!(auth_refs(&all, "u"), AuthRefs::Ssh { .. }));
        let mut g = all.clone();
        g.git_auth.as_mut().unwrap().ssh_auth = None;
        assert!(matches!(auth_refs(&g, "u"), AuthRefs::Token(_)));
        g.git_auth.as_mut().unwrap().access_token = None;
        assert!(
            matches!(auth_refs(&g, "https://ghe/api/v3"), AuthRefs::GitHubApp { api_url, .. } if api_url == "https://ghe/api/v3")
        );
        g.git_auth.as_mut().unwrap().github_app = None;
        assert!(matches!(auth_refs(&g, "u"), AuthRefs::Basic { .. }));
        // The deprecated gitAuthSecret wins when both are set (PKO reads it first).
        let mut legacy = all;
        legacy.git_auth_secret = Some("old".into());
        assert_eq!(auth_refs(&legacy, "u"), AuthRefs::Legacy("old".into()));
        assert_eq!(auth_refs(&GitSource::default(), "u"), AuthRefs::None);
    }

    #[test]
    fn legacy_secret_key_precedence() {
        let refs = AuthRefs::Legacy("g".into());
        let creds = |kv: &[(&str, &str)]| credentials_from(&refs, &data(&[("g", kv)]));
        assert_eq!(
            creds(&[("username", "u\n"), ("password", "p\n")]).unwrap(),
            Credentials::Basic {
                username: "u".into(),
                password: "p".into()
            }
        );
        assert_eq!(
            creds(&[("username", "u"), ("password", "p"), ("accessToken", "t")]).unwrap(),
            Credentials::token("t")
        );
        assert_eq!(
            creds(&[
                ("sshPrivateKey", "K"),
                ("password", "pp"),
                ("accessToken", "t"),
                ("known_hosts", "h ssh-ed25519 A")
            ])
            .unwrap(),
            Credentials::Ssh {
                private_key: "K".into(),
                passphrase: Some("pp".into()),
                known_hosts: Some("h ssh-ed25519 A".into())
            }
        );
        let e = creds(&[("username", "u")]).unwrap_err().to_string();
        assert!(e.contains("no key \"password\""), "{e}");
        let e = creds(&[("other", "x")]).unwrap_err().to_string();
        assert!(e.contains("none of the keys") && e.contains("other"), "{e}");
        let e = credentials_from(&refs, &SecretData::new())
            .unwrap_err()
            .to_string();
        assert_eq!(e, "spec.gitAuthSecret: Secret \"g\" not found");
    }

    #[test]
    fn missing_secrets_and_keys_name_the_field_never_a_value() {
        let refs = auth_refs(
            &git(
                json!({"gitAuth": {"basicAuth": {"userName": sref("b", "user"), "password": sref("c", "pw")}}}),
            ),
            "u",
        );
        assert_eq!(secret_names(&refs), ["b", "c"]);
        let e = credentials_from(&refs, &data(&[("b", &[("user", "alice")])]))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "spec.gitAuth.basicAuth.password: Secret \"c\" not found");
        let e = credentials_from(
            &refs,
            &data(&[("b", &[("user", "alice")]), ("c", &[("other", "hunter2")])]),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "spec.gitAuth.basicAuth.password: Secret \"c\" has no key \"pw\""
        );
        assert!(!e.contains("hunter2"));
        let ok = credentials_from(
            &refs,
            &data(&[("b", &[("user", "alice")]), ("c", &[("pw", "hunter2\n")])]),
        )
        .unwrap();
        assert_eq!(
            ok,
            Credentials::Basic {
                username: "alice".into(),
                password: "hunter2".into()
            }
        );
        // SSH: known_hosts comes from the key's Secret.
        let refs = auth_refs(
            &git(
                json!({"gitAuth": {"sshAuth": {"sshPrivateKey": sref("s", "id"), "password": sref("s", "pass")}}}),
            ),
            "u",
        );
        let c = credentials_from(
            &refs,
            &data(&[("s", &[("id", "KEY"), ("pass", "pp"), ("known_hosts", "kh")])]),
        )
        .unwrap();
        assert_eq!(
            c,
            Credentials::Ssh {
                private_key: "KEY".into(),
                passphrase: Some("pp".into()),
                known_hosts: Some("kh".into())
            }
        );
    }

    #[test]
    fn workspace_auth_is_references_only_in_pkos_shape() {
        let legacy = git(json!({"gitAuthSecret": "old"}));
        let a = serde_json::to_value(workspace_git_auth(&legacy).unwrap()).unwrap();
        assert_eq!(
            a,
            json!({
                "sshPrivateKey": {"name": "old", "key": "sshPrivateKey", "optional": true},
                "username": {"name": "old", "key": "username", "optional": true},
                "password": {"name": "old", "key": "password", "optional": true},
                "token": {"name": "old", "key": "accessToken", "optional": true},
            })
        );
        let app = git(
            json!({"gitAuth": {"githubApp": {"appID": sref("a", "id"), "installationID": sref("a", "inst"), "privateKey": sref("k", "pem")}}}),
        );
        let a = serde_json::to_value(workspace_git_auth(&app).unwrap()).unwrap();
        assert_eq!(
            a,
            json!({"githubApp": {
                "appID": {"name": "a", "key": "id"},
                "installationID": {"name": "a", "key": "inst"},
                "privateKey": {"name": "k", "key": "pem"},
            }})
        );
        let ssh = git(
            json!({"gitAuth": {"sshAuth": {"sshPrivateKey": sref("s", "id"), "password": sref("s", "pass")}}}),
        );
        let a = serde_json::to_value(workspace_git_auth(&ssh).unwrap()).unwrap();
        assert_eq!(
            a,
            json!({"sshPrivateKey": {"name": "s", "key": "id"}, "password": {"name": "s", "key": "pass"}})
        );
        assert!(workspace_git_auth(&GitSource::default()).is_none());
    }

    #[test]
    fn github_api_url_from_the_annotation() {
        let mut stack: Stack = serde_json::from_value(json!({
            "apiVersion": "pulumi.com/v1", "kind": "Stack",
            "metadata": {"name": "s", "namespace": "n", "annotations": {"pulumi.com/github-api-url": " https://ghe.example.com/api/v3 "}},
            "spec": {"stack": "dev", "projectRepo": "https://ghe.example.com/o/r", "branch": "main",
                     "gitAuth": {"githubApp": {"appID": sref("a", "id"), "installationID": sref("a", "inst"), "privateKey": sref("k", "pem")}}}
        }))
        .unwrap();
        assert_eq!(github_api_url(&stack), "https://ghe.example.com/api/v3");
        assert_eq!(
            workspace_annotations(&stack),
            Some((
                GITHUB_API_URL_ANNOTATION.to_string(),
                "https://ghe.example.com/api/v3".to_string()
            ))
        );
        stack.metadata.annotations = None;
        if std::env::var_os(GITHUB_API_URL_ENV).is_none() {
            assert_eq!(github_api_url(&stack), DEFAULT_GITHUB_API_URL);
            assert_eq!(workspace_annotations(&stack), None);
        }
    }
}
