//! Where a Stack's program comes from, resolved to a revision: a pinned commit, the head of a
//! branch (ls-remote, shared by every Stack tracking it: [`poll`]), a Program's content digest,
//! or a Flux source's artifact. Git credentials: [`auth`].

use crate::program::{digest, render_project, too_large};
use crate::runtime::context::Context;
use crate::runtime::metrics::Metrics;
use crate::runtime::remote_hosts::{self, AllowList};
pub use crate::source::ResolveError;
use crate::source::{auth, flux, git, poll};
use crate::stack::objects::ResolvedSource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use pulumi_operator_api::names;
use pulumi_operator_api::validation::{GitRevision, StackSource};
use pulumi_operator_api::{FluxSource, GitSource, Program, Stack};
use std::time::{Duration, Instant};

/// A resolved source, or a branch head being read in the background.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved {
    Ready(ResolvedSource),
    /// The Stack is reconciled again when the answer arrives ([`poll::Poller::answers`]).
    Pending {
        message: String,
    },
}

/// Resolves the Stack's source with the branch poller shared by all Stacks: the head of a
/// tracked branch is re-read when the shared answer is older than `resync` (the Stack's
/// resync period), or at once for a new `pulumi.com/reconciliation-request` value. Never waits
/// for a git remote.
pub async fn resolve_source(
    stack: &Stack,
    ctx: &Context,
    resync: Duration,
) -> Result<Resolved, ResolveError> {
    resolve_with(
        stack,
        &ctx.client,
        &ctx.stores.programs,
        Some(ctx.metrics.clone()),
        &ctx.limits.git_allowed_internal_hosts,
        resync,
    )
    .await
}

/// When each reconciliation request was first seen, per Stack UID: a request is satisfied by
/// an answer read after that instant, however many reconciles it takes for the answer to
/// arrive (using the reconcile's own "now" would never be satisfied by a background read).
#[derive(Default)]
pub struct Requests(std::sync::Mutex<std::collections::HashMap<String, (String, Instant)>>);

impl Requests {
    fn shared() -> &'static Requests {
        static REQUESTS: std::sync::OnceLock<Requests> = std::sync::OnceLock::new();
        REQUESTS.get_or_init(Requests::default)
    }

    /// The instant `request` was first seen for `uid` (now if it is new).
    pub fn first_seen(&self, uid: &str, request: &str, now: Instant) -> Instant {
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        // Requests are observed within minutes; an hour-old entry is a deleted Stack's.
        seen.retain(|_, (_, at)| now.saturating_duration_since(*at) < Duration::from_secs(3600));
        match seen.get(uid) {
            Some((r, at)) if r == request => *at,
            _ => {
                seen.insert(uid.to_string(), (request.to_string(), now));
                now
            }
        }
    }
}

/// How fresh a branch head a reconcile needs: a new reconciliation-request value (not yet
/// observed in status) wants one read after the request was first seen (`first_seen`);
/// otherwise one younger than the resync period.
pub fn need(
    stack: &Stack,
    resync: Duration,
    first_seen: impl FnOnce(&str) -> Instant,
) -> poll::Need {
    let requested = stack
        .annotations()
        .get(names::RECONCILIATION_REQUEST_ANNOTATION)
        .filter(|v| !v.is_empty());
    let observed = stack
        .status
        .as_ref()
        .and_then(|s| s.observed_reconcile_request.as_ref());
    match requested {
        Some(r) if Some(r) != observed => poll::Need::Since(first_seen(r)),
        _ => poll::Need::MaxAge(resync),
    }
}

/// A tracked branch of a tenant's repository, and the internal hosts the operator may contact
/// anyway (`GIT_ALLOWED_INTERNAL_HOSTS`).
pub struct Branch<'a> {
    pub url: &'a str,
    pub branch: &'a str,
    pub credentials: pulumi_gitauth::Credentials,
    pub allowed: &'a AllowList,
}

/// The reconcile-facing branch lookup: the head of the branch from the shared poller, or
/// `Pending` while it is read in the background for `waiter` (where its host's addresses are
/// checked too: [`git::tenant_ls_remote`]).
pub fn branch_head(
    poller: &poll::Poller,
    branch: Branch<'_>,
    need: poll::Need,
    waiter: Option<poll::Waiter>,
    metrics: Option<std::sync::Arc<Metrics>>,
) -> poll::Answer {
    let key = poll::Key {
        url: branch.url.to_string(),
        reference: branch.branch.to_string(),
        credentials: branch.credentials.fingerprint(),
    };
    let (url, reference) = (branch.url.to_string(), branch.branch.to_string());
    let (credentials, allowed) = (branch.credentials, branch.allowed.clone());
    poller.lookup(key, need, waiter, metrics, move |cancel| {
        git::tenant_ls_remote(&url, &reference, &credentials, &allowed, cancel)
    })
}

async fn resolve_with(
    stack: &Stack,
    client: &Client,
    programs: &Store<Program>,
    metrics: Option<std::sync::Arc<Metrics>>,
    allowed: &AllowList,
    resync: Duration,
) -> Result<Resolved, ResolveError> {
    let ns = stack.namespace().unwrap_or_default();
    match stack.spec.source() {
        StackSource::Git(git) => {
            let reader = Reader {
                client,
                metrics,
                allowed,
            };
            resolve_git(stack, git, reader, resync).await
        }
        StackSource::Program(p) => resolve_program(&p.name, &ns, programs),
        StackSource::Flux(flux) => resolve_flux(flux, &ns, client).await,
        StackSource::None => Ok(Resolved::Ready(ResolvedSource::None)),
    }
}

/// What resolving a git source reads with.
struct Reader<'a> {
    client: &'a Client,
    metrics: Option<std::sync::Arc<Metrics>>,
    allowed: &'a AllowList,
}

/// A git source: a pinned commit, or the head of a tracked branch from the shared poller.
async fn resolve_git(
    stack: &Stack,
    git: &GitSource,
    reader: Reader<'_>,
    resync: Duration,
) -> Result<Resolved, ResolveError> {
    let ns = stack.namespace().unwrap_or_default();
    let url = git.project_repo.clone().unwrap_or_default();
    let dir = git.repo_dir.clone().filter(|d| !d.is_empty());
    if let Some(GitRevision::Branch(_)) = git.revision() {
        // Only a tracked branch makes the operator contact the repository (the Job clones it
        // from the tenant's own namespace): refused before credentials or a call.
        remote_hosts::check_url(&url, reader.allowed)
            .map_err(|e| ResolveError::not_allowed(e.0))?;
    }
    let refs = auth::auth_refs(git, &auth::github_api_url(stack));
    // Read even for a pinned commit: a missing Secret must stall the Stack here, not leave its
    // Job's pod waiting for a Secret that does not exist.
    let credentials = auth::read_credentials(reader.client, &ns, &refs).await?;
    let commit = match git.revision() {
        Some(GitRevision::Commit(c)) => c.to_string(),
        Some(GitRevision::Branch(b)) => {
            let uid = stack.uid().unwrap_or_default();
            let need = need(stack, resync, |r| {
                Requests::shared().first_seen(&uid, r, Instant::now())
            });
            let waiter = Some((ns.clone(), stack.name_any()));
            let poller = poll::Poller::shared();
            let branch = Branch {
                url: &url,
                branch: b,
                credentials,
                allowed: reader.allowed,
            };
            match branch_head(poller, branch, need, waiter, reader.metrics) {
                poll::Answer::Ready(r) => r.map_err(ResolveError::from)?,
                poll::Answer::Pending => {
                    return Ok(Resolved::Pending {
                        message: format!(
                            "waiting for the head of branch {b:?} of {}",
                            pulumi_gitauth::redact::urls(&url)
                        ),
                    })
                }
            }
        }
        None => {
            return Err(ResolveError::unavailable(
                "missing \"commit\" or \"branch\"",
            ))
        }
    };
    Ok(Resolved::Ready(ResolvedSource::Git {
        url,
        commit,
        dir,
        shallow: git.shallow,
    }))
}

/// A Program source: its rendered content's digest, from the cache.
fn resolve_program(
    name: &str,
    ns: &str,
    programs: &Store<Program>,
) -> Result<Resolved, ResolveError> {
    let program = programs
        .get(&ObjectRef::new(name).within(ns))
        .ok_or_else(|| {
            ResolveError::unavailable(format!("unable to retrieve program {name:?} for stack"))
        })?;
    let rendered =
        render_project(&program.name_any(), program.spec.program.as_ref()).map_err(|e| {
            ResolveError::unavailable(format!("program {name:?} cannot be rendered: {e}"))
        })?;
    if let Some(message) = too_large(name, &rendered) {
        // Not a passing condition: only a change to the Program helps.
        return Err(ResolveError::spec_invalid(message));
    }
    Ok(Resolved::Ready(ResolvedSource::Program {
        name: name.to_string(),
        digest: digest(&rendered),
    }))
}

/// A Flux source: the artifact its status advertises.
async fn resolve_flux(
    flux: &FluxSource,
    ns: &str,
    client: &Client,
) -> Result<Resolved, ResolveError> {
    let r = &flux.source_ref;
    let artifact = flux::artifact(&r.api_version, &r.kind, &r.name, ns, client).await?;
    Ok(Resolved::Ready(ResolvedSource::Flux {
        url: artifact.url,
        digest: artifact.digest,
        dir: flux.dir.clone().filter(|d| !d.is_empty()),
        revision: artifact.revision,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_reconciliation_request_reads_the_branch_at_once() {
        let mut stack: Stack = serde_json::from_value(serde_json::json!({
            "apiVersion": "pulumi.com/v1", "kind": "Stack",
            "metadata": {"name": "s", "namespace": "n"},
            "spec": {"stack": "dev", "projectRepo": "https://h/r.git", "branch": "main"}
        }))
        .unwrap();
        let now = Instant::now();
        let period = Duration::from_secs(60);
        let at = |_: &str| now;
        assert_eq!(need(&stack, period, at), poll::Need::MaxAge(period));
        stack.metadata.annotations = Some(
            [(
                names::RECONCILIATION_REQUEST_ANNOTATION.to_string(),
                "1".to_string(),
            )]
            .into(),
        );
        assert_eq!(need(&stack, period, at), poll::Need::Since(now));
        stack.status = Some(pulumi_operator_api::StackStatus {
            observed_reconcile_request: Some("1".into()),
            ..Default::default()
        });
        assert_eq!(need(&stack, period, at), poll::Need::MaxAge(period));
    }

    #[test]
    fn a_request_is_dated_when_first_seen() {
        let requests = Requests::default();
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(5);
        assert_eq!(requests.first_seen("u", "1", t0), t0);
        // Reconciles while the branch head is read keep the first instant.
        assert_eq!(requests.first_seen("u", "1", later), t0);
        // A new value is a new request.
        assert_eq!(requests.first_seen("u", "2", later), later);
        assert_eq!(requests.first_seen("v", "1", later), later);
    }
}
