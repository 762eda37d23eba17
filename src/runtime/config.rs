//! Operator configuration: flags, each also settable through an environment variable.

use clap::{Parser, ValueEnum};
use std::net::SocketAddr;

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Parser, Debug, Clone)]
#[command(
    name = "pulumi-operator",
    version,
    about = "Deploys Pulumi stacks declared as Kubernetes objects; every stack operation runs as a Kubernetes Job"
)]
pub struct Config {
    /// Log filter: a level (error, warn, info, debug, trace) or a tracing directive list.
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    pub log_level: String,

    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,

    /// Address of the HTTP endpoint serving /healthz, /readyz and /metrics.
    #[arg(long, env = "HTTP_ADDR", default_value = "0.0.0.0:8080")]
    pub http_addr: SocketAddr,

    /// Elect a leader through a Lease so that only one replica reconciles.
    #[arg(long, env = "LEADER_ELECT", default_value_t = false)]
    pub leader_elect: bool,

    /// Name of the leader-election Lease.
    #[arg(
        long,
        env = "LEADER_ELECTION_LEASE_NAME",
        default_value = "pulumi-operator-leader"
    )]
    pub lease_name: String,

    /// Namespace of the leader-election Lease (defaults to the pod's namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "pulumi-operator")]
    pub lease_namespace: String,

    /// How long a Lease is valid without renewal, in seconds; a standby replica takes over
    /// within this time when the leader disappears.
    #[arg(long, env = "LEADER_ELECTION_LEASE_SECONDS", default_value_t = 15)]
    pub lease_seconds: u64,

    /// This replica's identity in the Lease (defaults to the pod name).
    #[arg(long, env = "POD_NAME", default_value = "")]
    pub identity: String,

    /// Image that provides the runner binary to every update Job. When unset, the image of
    /// the init container named `runner` in the operator's own pod is used (that is how the
    /// kustomize install sets it), else the runner image of this operator version.
    #[arg(long, env = "RUNNER_IMAGE", default_value = "")]
    pub runner_image: String,

    /// Pull policy of the runner image.
    #[arg(long, env = "RUNNER_IMAGE_PULL_POLICY", default_value = "IfNotPresent")]
    pub runner_image_pull_policy: String,

    /// Namespaces to watch, comma separated; empty means every namespace.
    #[arg(
        long,
        env = "WATCH_NAMESPACES",
        value_delimiter = ',',
        default_value = ""
    )]
    pub namespaces: Vec<String>,

    /// How many objects of one kind are reconciled at the same time.
    #[arg(long, env = "MAX_CONCURRENT_RECONCILES", default_value_t = 25)]
    pub concurrency: u16,

    /// How many finished Updates (with their Jobs and Secrets) are kept per Stack; older ones
    /// are deleted even before their `ttlAfterCompleted`.
    #[arg(long, env = "UPDATE_HISTORY_LIMIT", default_value_t = 5)]
    pub update_history_limit: usize,

    /// How many git remote calls (ls-remote of a tracked branch, with its GitHub App token
    /// exchange) run at the same time, in the background, never on a reconcile worker.
    #[arg(long, env = "GIT_REMOTE_CONCURRENCY", default_value_t = 8)]
    pub git_remote_concurrency: usize,

    /// How many of those calls may run against one host at the same time, so that one slow
    /// host cannot take every slot.
    #[arg(long, env = "GIT_REMOTE_PER_HOST", default_value_t = 2)]
    pub git_remote_per_host: usize,

    /// The deadline of one git remote call, in seconds; its slot is freed when it passes.
    #[arg(long, env = "GIT_REMOTE_TIMEOUT_SECONDS", default_value_t = 60)]
    pub git_remote_timeout_seconds: u64,

    /// The shortest `resyncFrequencySeconds` this installation honours (PKO's floor, 60, by
    /// default): an administrator raises it to bound how often Stacks poll and re-run; a
    /// development cluster may lower it.
    #[arg(long, env = "MIN_RESYNC_SECONDS", default_value_t = 60)]
    pub min_resync_seconds: u64,

    /// Let operations run in the operator's own namespace (and so possibly as its
    /// ServiceAccount). Off: a Stack there is refused.
    #[arg(long, env = "ALLOW_OPERATOR_NAMESPACE", default_value_t = false)]
    pub allow_operator_namespace: bool,

    /// The operator's ServiceAccount name, never lent to an operation.
    #[arg(
        long,
        env = "OPERATOR_SERVICE_ACCOUNT",
        default_value = "pulumi-operator"
    )]
    pub operator_service_account: String,

    /// ServiceAccounts operations may run as (`name` or `namespace/name`), comma separated;
    /// empty allows any.
    #[arg(
        long,
        env = "ALLOWED_SERVICE_ACCOUNTS",
        value_delimiter = ',',
        default_value = ""
    )]
    pub allowed_service_accounts: Vec<String>,

    /// Pod spec fields a Stack's templates may not set (e.g. `hostNetwork,hostPID,hostIPC`),
    /// comma separated.
    #[arg(
        long,
        env = "DENIED_POD_FIELDS",
        value_delimiter = ',',
        default_value = ""
    )]
    pub denied_pod_fields: Vec<String>,

    /// Hosts (`host` or `host:port`) at which the operator may exchange GitHub App credentials
    /// for a Stack (`pulumi.com/github-api-url`), comma separated. The host of
    /// `GITHUB_API_URL` is always allowed.
    #[arg(
        long,
        env = "GITHUB_API_HOSTS",
        value_delimiter = ',',
        default_value = "api.github.com"
    )]
    pub github_api_hosts: Vec<String>,

    /// Allow plain-http GitHub API URLs.
    #[arg(long, env = "ALLOW_INSECURE_GITHUB_API", default_value_t = false)]
    pub allow_insecure_github_api: bool,

    /// Internal hosts the operator may contact for a Stack's repository (`branch` ls-remote)
    /// although they are loopback, link-local, unspecified or cluster-internal: `host`,
    /// `host:port`, an address or `ADDRESS/BITS`, comma separated. Empty: all refused.
    #[arg(
        long,
        env = "GIT_ALLOWED_INTERNAL_HOSTS",
        value_delimiter = ',',
        default_value = "",
        value_parser = crate::runtime::remote_hosts::entry
    )]
    pub git_allowed_internal_hosts: Vec<String>,
}

pub const DEFAULT_RUNNER_IMAGE: &str = concat!(
    "ghcr.io/pulumi-operator-rs/runner:v",
    env!("CARGO_PKG_VERSION")
);

/// The init container of the operator's pod whose image is the runner image.
pub const RUNNER_INIT_CONTAINER: &str = "runner";

fn listed(values: &[String]) -> Vec<String> {
    values
        .iter()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect()
}

impl Config {
    /// What tenants may ask for.
    pub fn limits(&self) -> crate::runtime::limits::AdminLimits {
        let mut github_api_hosts = listed(&self.github_api_hosts);
        if let Some(own) = std::env::var(pulumi_gitauth::env::GITHUB_API_URL)
            .ok()
            .and_then(|u| pulumi_gitauth::authority_of(u.trim()))
        {
            github_api_hosts.push(own);
        }
        crate::runtime::limits::AdminLimits {
            operator_namespace: self.lease_namespace.clone(),
            operator_service_account: self.operator_service_account.clone(),
            allow_operator_namespace: self.allow_operator_namespace,
            allowed_service_accounts: listed(&self.allowed_service_accounts),
            denied_pod_fields: listed(&self.denied_pod_fields),
            github_api_hosts,
            allow_insecure_github_api: self.allow_insecure_github_api,
            // Each value was checked when the flags were parsed.
            git_allowed_internal_hosts: crate::runtime::remote_hosts::AllowList::parse(
                &self.git_allowed_internal_hosts,
            )
            .unwrap_or_default(),
        }
    }

    pub fn watched_namespaces(&self) -> Vec<String> {
        self.namespaces
            .iter()
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect()
    }

    /// The limits of the pool git remote calls run on.
    pub fn git_remote_limits(&self) -> GitRemoteLimits {
        GitRemoteLimits {
            total: self.git_remote_concurrency.max(1),
            per_host: self.git_remote_per_host.max(1),
            deadline: std::time::Duration::from_secs(self.git_remote_timeout_seconds.max(1)),
        }
    }

    pub fn identity(&self) -> String {
        if !self.identity.is_empty() {
            return self.identity.clone();
        }
        std::env::var("HOSTNAME")
            .unwrap_or_else(|_| format!("pulumi-operator-{}", std::process::id()))
    }
}

/// How many git remote calls may run, in all and per host, and how long one may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GitRemoteLimits {
    pub total: usize,
    pub per_host: usize,
    pub deadline: std::time::Duration,
}

impl Default for GitRemoteLimits {
    fn default() -> GitRemoteLimits {
        GitRemoteLimits {
            total: 8,
            per_host: 2,
            deadline: std::time::Duration::from_secs(60),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_namespace_list() {
        let c = Config::try_parse_from(["op"]).unwrap();
        assert!(c.watched_namespaces().is_empty());
        assert_eq!(c.concurrency, 25);
        assert_eq!(c.min_resync_seconds, 60);
        assert_eq!(
            c.git_remote_limits(),
            GitRemoteLimits {
                total: 8,
                per_host: 2,
                deadline: std::time::Duration::from_secs(60)
            }
        );
        let c = Config::try_parse_from(["op", "--namespaces", "a, b,,c", "--log-format", "json"])
            .unwrap();
        assert_eq!(c.watched_namespaces(), vec!["a", "b", "c"]);
        assert_eq!(c.log_format, LogFormat::Json);
        assert!(Config::try_parse_from(["op", "--log-format", "xml"]).is_err());
    }

    #[test]
    fn internal_git_hosts_are_refused_unless_listed() {
        use crate::runtime::remote_hosts::check_url;
        let c = Config::try_parse_from(["op"]).unwrap();
        let refused = c.limits().git_allowed_internal_hosts;
        assert!(check_url("http://127.0.0.1:8080/x.git", &refused).is_err());
        let c = Config::try_parse_from([
            "op",
            "--git-allowed-internal-hosts",
            "127.0.0.1, gitea.gitea.svc:3000,10.0.0.0/8",
        ])
        .unwrap();
        let allowed = c.limits().git_allowed_internal_hosts;
        assert!(check_url("http://127.0.0.1:8080/x.git", &allowed).is_ok());
        assert!(check_url("http://gitea.gitea.svc:3000/x.git", &allowed).is_ok());
        assert!(check_url("http://localhost:8080/x.git", &allowed).is_err());
        // A mistyped entry stops the operator at start-up.
        let e = Config::try_parse_from(["op", "--git-allowed-internal-hosts", "10.0.0.0/33"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("GIT_ALLOWED_INTERNAL_HOSTS"), "{e}");
    }
}
