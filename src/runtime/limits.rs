//! What the operator's administrator allows a tenant to ask for by creating a Stack (or a
//! Workspace/Update): which namespaces and ServiceAccounts operations may run as, which pod
//! fields they may set, which GitHub API hosts the operator may call for them, and which
//! internal git hosts it may contact for them ([`crate::runtime::remote_hosts`]). Pure
//! checks, applied where the objects are built (every Job and workspace pod) and early, on the
//! Stack, for a clear status.

use serde_json::Value;

/// The administrator's limits (from [`crate::runtime::config::Config`]).
#[derive(Clone, Debug, Default)]
pub struct AdminLimits {
    /// The operator's own namespace: operations never run there unless allowed.
    pub operator_namespace: String,
    /// The operator's ServiceAccount (in its namespace): never lent to an operation unless
    /// operations may run in the operator's namespace.
    pub operator_service_account: String,
    pub allow_operator_namespace: bool,
    /// ServiceAccount names operations may run as; empty allows any.
    pub allowed_service_accounts: Vec<String>,
    /// Pod spec fields (top level, e.g. `hostNetwork`) a template may not set.
    pub denied_pod_fields: Vec<String>,
    /// Hosts (`host` or `host:port`) the operator may exchange GitHub App credentials at.
    pub github_api_hosts: Vec<String>,
    /// Whether a GitHub API URL may be plain `http://`.
    pub allow_insecure_github_api: bool,
    /// Internal hosts the operator may contact for a Stack's repository anyway
    /// ([`crate::runtime::remote_hosts`]).
    pub git_allowed_internal_hosts: crate::runtime::remote_hosts::AllowList,
}

/// The ServiceAccount a pod spec runs as (the deprecated `serviceAccount` alias included).
fn service_account(pod_spec: &Value) -> &str {
    ["serviceAccountName", "serviceAccount"]
        .iter()
        .find_map(|k| pod_spec.get(*k).and_then(Value::as_str))
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
}

/// What the administrator's limits refuse, and who can allow it: the message a user sees.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotAllowed(pub String);

/// Whether an operation may run in `namespace` with `pod_spec` (the final one, the user's
/// template merged in). The error says what is refused and who can allow it.
pub fn check_pod(
    namespace: &str,
    pod_spec: &Value,
    limits: &AdminLimits,
) -> Result<(), NotAllowed> {
    let account = service_account(pod_spec);
    if namespace == limits.operator_namespace && !limits.allow_operator_namespace {
        let what = if account == limits.operator_service_account {
            format!(
                "operations may not run as the operator's ServiceAccount {account:?}, nor in its \
                 namespace {namespace:?}"
            )
        } else {
            format!("operations may not run in the operator's namespace {namespace:?}")
        };
        return Err(NotAllowed(format!(
            "{what}; create the Stack in another namespace (the operator's administrator can \
             allow it with ALLOW_OPERATOR_NAMESPACE=true)"
        )));
    }
    if !limits.allowed_service_accounts.is_empty()
        && !limits
            .allowed_service_accounts
            .iter()
            .any(|a| a == account || *a == format!("{namespace}/{account}"))
    {
        return Err(NotAllowed(format!(
            "ServiceAccount {account:?} is not one the operator's administrator allows \
             (ALLOWED_SERVICE_ACCOUNTS={})",
            limits.allowed_service_accounts.join(",")
        )));
    }
    let set: Vec<&str> = limits
        .denied_pod_fields
        .iter()
        .map(String::as_str)
        .filter(|f| {
            pod_spec
                .get(*f)
                .is_some_and(|v| !v.is_null() && *v != Value::Bool(false))
        })
        .collect();
    if !set.is_empty() {
        return Err(NotAllowed(format!(
            "the pod template sets {} which the operator's administrator does not allow \
             (DENIED_POD_FIELDS)",
            set.join(", ")
        )));
    }
    Ok(())
}

/// Whether the operator may call `url` as a GitHub API for a tenant: https (unless allowed),
/// and a host the administrator listed. Anything else would let a Stack make the operator
/// send signed credentials to a place of the tenant's choosing, from the operator's network.
pub fn check_github_api_url(url: &str, limits: &AdminLimits) -> Result<(), NotAllowed> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| NotAllowed(format!("invalid GitHub API URL {url:?}: {e}")))?;
    match parsed.scheme() {
        "https" => {}
        "http" if limits.allow_insecure_github_api => {}
        other => {
            return Err(NotAllowed(format!(
                "GitHub API URL {url:?} must use https, not {other} (the operator's \
                 administrator can allow http with ALLOW_INSECURE_GITHUB_API=true)"
            )))
        }
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(NotAllowed(
            "a GitHub API URL may not hold credentials".into(),
        ));
    }
    let host = pulumi_gitauth::authority_of(url).unwrap_or_default();
    let bare = parsed.host_str().unwrap_or_default().to_ascii_lowercase();
    if limits
        .github_api_hosts
        .iter()
        .any(|h| h.eq_ignore_ascii_case(&host) || h.eq_ignore_ascii_case(&bare))
    {
        Ok(())
    } else {
        Err(NotAllowed(format!(
            "GitHub API host {host:?} is not one the operator may call (GITHUB_API_HOSTS={}); \
             ask the operator's administrator to add it",
            limits.github_api_hosts.join(",")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn limits() -> AdminLimits {
        AdminLimits {
            operator_namespace: "pulumi-operator".into(),
            operator_service_account: "pulumi-operator".into(),
            github_api_hosts: vec!["api.github.com".into(), "ghe.example.com:8443".into()],
            ..Default::default()
        }
    }

    #[test]
    fn the_operator_namespace_and_identity_are_not_lent() {
        let p = limits();
        let own = json!({"serviceAccountName": "pulumi-operator"});
        let e = check_pod("pulumi-operator", &own, &p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("operator's ServiceAccount"), "{e}");
        assert!(e.contains("ALLOW_OPERATOR_NAMESPACE"), "{e}");
        // The deprecated alias is the same thing.
        let alias = json!({"serviceAccount": "pulumi-operator"});
        assert!(check_pod("pulumi-operator", &alias, &p).is_err());
        assert!(check_pod("pulumi-operator", &json!({}), &p).is_err());
        // Elsewhere an account of that name is the tenant's own.
        assert!(check_pod("team-a", &own, &p).is_ok());
        let allowed = AdminLimits {
            allow_operator_namespace: true,
            ..limits()
        };
        assert!(check_pod("pulumi-operator", &own, &allowed).is_ok());
    }

    #[test]
    fn service_accounts_and_pod_fields_the_admin_limits() {
        let p = AdminLimits {
            allowed_service_accounts: vec!["pulumi".into(), "team-b/deployer".into()],
            denied_pod_fields: vec!["hostNetwork".into(), "hostPID".into()],
            ..limits()
        };
        assert!(check_pod("a", &json!({"serviceAccountName": "pulumi"}), &p).is_ok());
        assert!(check_pod("team-b", &json!({"serviceAccountName": "deployer"}), &p).is_ok());
        let e = check_pod("a", &json!({"serviceAccountName": "deployer"}), &p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("ALLOWED_SERVICE_ACCOUNTS"), "{e}");
        let host = json!({"serviceAccountName": "pulumi", "hostNetwork": true, "hostPID": true});
        let e = check_pod("a", &host, &p).unwrap_err().to_string();
        assert!(e.contains("hostNetwork, hostPID"), "{e}");
        let off = json!({"serviceAccountName": "pulumi", "hostNetwork": false});
        assert!(check_pod("a", &off, &p).is_ok());
    }

    #[test]
    fn github_api_urls_only_where_allowed() {
        let p = limits();
        assert!(check_github_api_url("https://api.github.com", &p).is_ok());
        assert!(check_github_api_url("https://GHE.example.com:8443/api/v3", &p).is_ok());
        for (bad, why) in [
            ("http://127.0.0.1:9000/x?", "https"),
            ("https://127.0.0.1:9000/x", "GITHUB_API_HOSTS"),
            ("https://ghe.example.com/api/v3", "GITHUB_API_HOSTS"),
            ("https://api.github.com.evil.net", "GITHUB_API_HOSTS"),
            ("https://u:p@api.github.com", "credentials"),
            ("file:///etc/passwd", "https"),
            ("not a url", "invalid"),
        ] {
            let e = check_github_api_url(bad, &p).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
        let insecure = AdminLimits {
            allow_insecure_github_api: true,
            github_api_hosts: vec!["127.0.0.1:9000".into()],
            ..limits()
        };
        assert!(check_github_api_url("http://127.0.0.1:9000/x", &insecure).is_ok());
    }
}
