//! Where a Stack's program comes from, resolved to a revision: a pinned commit, the head of a
//! branch (ls-remote, shared by every Stack tracking it: [`poll`]), a Program's content digest,
//! or a Flux source's artifact. Git credentials: [`auth`].

pub mod auth;
pub mod flux;
pub mod git;
pub mod poll;

use crate::context::Context;
use crate::controller::program::{digest, render_project};
use crate::metrics::Metrics;
use crate::stack::objects::ResolvedSource;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use pulumi_operator_api::names;
use pulumi_operator_api::validation::{GitRevision, StackSource};
use pulumi_operator_api::{Program, Stack};
use std::time::{Duration, Instant};

/// Why a source could not be resolved, with the `Stalled` reason: `SpecInvalid` (a missing
/// git credentials Secret or key, as in PKO) or `SourceUnavailable` (anything else).
#[derive(Debug, Clone, PartialEq)]
pub struct ResolveError {
    pub reason: &'static str,
    pub message: String,
}

impl ResolveError {
    pub fn unavailable(message: impl Into<String>) -> ResolveError {
        ResolveError {
            reason: names::REASON_SOURCE_UNAVAILABLE,
            message: message.into(),
        }
    }

    pub fn spec_invalid(message: impl Into<String>) -> ResolveError {
        ResolveError {
            reason: names::REASON_SPEC_INVALID,
            message: message.into(),
        }
    }
}

/// Resolves the Stack's source with the branch poller shared by all Stacks: the head of a
/// tracked branch is re-read when the shared answer is older than `resync` (the Stack's
/// resync period), or at once for a new `pulumi.com/reconciliation-request` value.
pub async fn resolve_source(
    stack: &Stack,
    ctx: &Context,
    resync: Duration,
) -> Result<ResolvedSource, ResolveError> {
    resolve_with(
        stack,
        &ctx.client,
        &ctx.stores.programs,
        Some(&ctx.metrics),
        resync,
    )
    .await
}

/// How fresh a branch head a reconcile needs: a new reconciliation-request value (not yet
/// observed in status) wants one read after now; otherwise one younger than the resync period.
pub fn need(stack: &Stack, resync: Duration, now: Instant) -> poll::Need {
    let requested = stack
        .annotations()
        .get(names::RECONCILIATION_REQUEST_ANNOTATION)
        .filter(|v| !v.is_empty());
    let observed = stack
        .status
        .as_ref()
        .and_then(|s| s.observed_reconcile_request.as_ref());
    match requested {
        Some(r) if Some(r) != observed => poll::Need::Since(now),
        _ => poll::Need::MaxAge(resync),
    }
}

async fn resolve_with(
    stack: &Stack,
    client: &Client,
    programs: &Store<Program>,
    metrics: Option<&Metrics>,
    resync: Duration,
) -> Result<ResolvedSource, ResolveError> {
    let ns = stack.namespace().unwrap_or_default();
    match stack.spec.source() {
        StackSource::Git(git) => {
            let url = git.project_repo.clone().unwrap_or_default();
            let dir = git.repo_dir.clone().filter(|d| !d.is_empty());
            let refs = auth::auth_refs(git, &auth::github_api_url(stack));
            // Read even for a pinned commit: a missing Secret must stall the Stack here, not
            // leave its Job's pod waiting for a Secret that does not exist.
            let credentials = auth::read_credentials(client, &ns, &refs).await?;
            let commit = match git.revision() {
                Some(GitRevision::Commit(c)) => c.to_string(),
                Some(GitRevision::Branch(b)) => {
                    let key = poll::Key {
                        url: url.clone(),
                        reference: b.to_string(),
                        credentials: credentials.fingerprint(),
                    };
                    let need = need(stack, resync, Instant::now());
                    poll::Poller::shared()
                        .head(key, need, metrics, || git::ls_remote(&url, b, credentials))
                        .await
                        .map_err(ResolveError::unavailable)?
                }
                None => {
                    return Err(ResolveError::unavailable(
                        "missing \"commit\" or \"branch\"",
                    ))
                }
            };
            Ok(ResolvedSource::Git {
                url,
                commit,
                dir,
                shallow: git.shallow,
            })
        }
        StackSource::Program(p) => {
            let program = programs
                .get(&ObjectRef::new(&p.name).within(&ns))
                .ok_or_else(|| {
                    ResolveError::unavailable(format!(
                        "unable to retrieve program {:?} for stack",
                        p.name
                    ))
                })?;
            let rendered = render_project(&program.name_any(), program.spec.program.as_ref())
                .map_err(|e| {
                    ResolveError::unavailable(format!(
                        "program {:?} cannot be rendered: {e}",
                        p.name
                    ))
                })?;
            Ok(ResolvedSource::Program {
                name: p.name.clone(),
                digest: digest(&rendered),
            })
        }
        StackSource::Flux(flux) => {
            let r = &flux.source_ref;
            let (group, version) = match r.api_version.split_once('/') {
                Some((g, v)) => (g.to_string(), v.to_string()),
                None => (String::new(), r.api_version.clone()),
            };
            let gvk = GroupVersionKind::gvk(&group, &version, &r.kind);
            let resource = ApiResource::from_gvk(&gvk);
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
            let obj = match api.get_opt(&r.name).await {
                Ok(Some(o)) => o,
                Ok(None) => {
                    return Err(ResolveError::unavailable(format!(
                        "could not resolve sourceRef: {} {:?} not found",
                        r.kind, r.name
                    )))
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {
                    return Err(ResolveError::unavailable(format!(
                    "could not resolve sourceRef: the kind {} ({}) is not installed in the cluster",
                    r.kind, r.api_version
                )))
                }
                Err(kube::Error::Api(e)) if e.code == 403 => {
                    return Err(ResolveError::unavailable(format!(
                        "could not resolve sourceRef: the operator may not read {} objects (group {group}); \
                         grant its ClusterRole get, list and watch on them",
                        r.kind
                    )))
                }
                Err(e) => return Err(ResolveError::unavailable(format!("could not resolve sourceRef: {e}"))),
            };
            flux::source_seen();
            let artifact = &obj.data["status"]["artifact"];
            let (Some(url), Some(revision)) =
                (artifact["url"].as_str(), artifact["revision"].as_str())
            else {
                return Err(ResolveError::unavailable("Flux source has no artifact"));
            };
            Ok(ResolvedSource::Flux {
                url: url.to_string(),
                digest: artifact["digest"].as_str().unwrap_or_default().to_string(),
                dir: flux.dir.clone().filter(|d| !d.is_empty()),
                revision: revision.to_string(),
            })
        }
        StackSource::None => Ok(ResolvedSource::None),
    }
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
        assert_eq!(need(&stack, period, now), poll::Need::MaxAge(period));
        stack.metadata.annotations = Some(
            [(
                names::RECONCILIATION_REQUEST_ANNOTATION.to_string(),
                "1".to_string(),
            )]
            .into(),
        );
        assert_eq!(need(&stack, period, now), poll::Need::Since(now));
        stack.status = Some(pulumi_operator_api::StackStatus {
            observed_reconcile_request: Some("1".into()),
            ..Default::default()
        });
        assert_eq!(need(&stack, period, now), poll::Need::MaxAge(period));
    }
}
