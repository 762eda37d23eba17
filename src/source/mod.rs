//! Where a Stack's program comes from, resolved to a revision: a pinned commit, the head of a
//! branch (ls-remote), a Program's content digest, or a Flux source's artifact.

pub mod flux;
pub mod git;

use crate::controller::program::{digest, render_project};
use crate::stack::objects::ResolvedSource;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use pulumi_operator_api::validation::{GitRevision, StackSource};
use pulumi_operator_api::{Program, Stack};

/// Why a source could not be resolved (becomes `Stalled` `SourceUnavailable`).
#[derive(Debug, Clone, PartialEq)]
pub struct SourceError(pub String);

pub async fn resolve(
    stack: &Stack,
    client: &Client,
    programs: &Store<Program>,
) -> Result<ResolvedSource, SourceError> {
    let ns = stack.namespace().unwrap_or_default();
    match stack.spec.source() {
        StackSource::Git(git) => {
            let url = git.project_repo.clone().unwrap_or_default();
            let dir = git.repo_dir.clone().filter(|d| !d.is_empty());
            let commit = match git.revision() {
                Some(GitRevision::Commit(c)) => c.to_string(),
                Some(GitRevision::Branch(b)) => {
                    git::ls_remote(&url, b).await.map_err(SourceError)?
                }
                None => return Err(SourceError("missing \"commit\" or \"branch\"".into())),
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
                    SourceError(format!("unable to retrieve program {:?} for stack", p.name))
                })?;
            let rendered = render_project(&program.name_any(), program.spec.program.as_ref())
                .map_err(|e| {
                    SourceError(format!("program {:?} cannot be rendered: {e}", p.name))
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
                    return Err(SourceError(format!(
                        "could not resolve sourceRef: {} {:?} not found",
                        r.kind, r.name
                    )))
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {
                    return Err(SourceError(format!(
                    "could not resolve sourceRef: the kind {} ({}) is not installed in the cluster",
                    r.kind, r.api_version
                )))
                }
                Err(kube::Error::Api(e)) if e.code == 403 => {
                    return Err(SourceError(format!(
                        "could not resolve sourceRef: the operator may not read {} objects (group {group}); \
                         grant its ClusterRole get, list and watch on them",
                        r.kind
                    )))
                }
                Err(e) => return Err(SourceError(format!("could not resolve sourceRef: {e}"))),
            };
            let artifact = &obj.data["status"]["artifact"];
            let (Some(url), Some(revision)) =
                (artifact["url"].as_str(), artifact["revision"].as_str())
            else {
                return Err(SourceError("Flux source has no artifact".into()));
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
