//! The StackPolicy controller: resolves each pack to a commit (a pinned commit as is, a branch
//! through the shared git poller, with the operator's own view of the repository) and writes
//! the policy's status: each pack's revision or error, `Ready`, and how many Stacks it covers.
//! Operations read the revisions from this status (see [`super::packs_for`]).

use super::{archive, covers, selector_error, Subject};
use crate::runtime::metrics::Metrics;
use crate::source::{git, poll};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use kube::ResourceExt;
use pulumi_gitauth::Credentials;
use pulumi_operator_api::policy::{
    PolicyPackGitSource, PolicyPackSpec, PolicyPackStatus, StackPolicy, StackPolicyStatus,
};
use pulumi_operator_api::Stack;
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

/// The field manager of the StackPolicy status.
pub const FIELD_MANAGER: &str = "pulumi-operator-rs/stackpolicy-status";

/// How old a branch head may be before it is read again.
const BRANCH_MAX_AGE: Duration = Duration::from_secs(60);

/// What the StackPolicy controller reads and writes with.
pub struct PolicyContext {
    pub client: kube::Client,
    pub namespaces: Store<Namespace>,
    /// The Stack caches of every watched namespace.
    pub stacks: Vec<Store<Stack>>,
    pub metrics: Arc<Metrics>,
    /// Where the Secrets of packs' `gitAuth` are read.
    pub operator_namespace: String,
}

/// An error of the StackPolicy controller (the status write).
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("writing the StackPolicy status: {0}")]
    Kube(#[from] kube::Error),
}

/// One pack's answer: its commit, why it has none, or still being read.
#[derive(Debug, Clone, PartialEq)]
pub enum PackAnswer {
    /// A commit, or an artifact's digest with its URL (Flux).
    Revision(String, Option<String>),
    Error(String),
    Pending,
}

fn git_answer(
    url: &str,
    commit: Option<&str>,
    branch: Option<&str>,
    credentials: &Credentials,
    metrics: &Arc<Metrics>,
) -> PackAnswer {
    match (commit, branch) {
        (Some(c), None) => PackAnswer::Revision(c.to_ascii_lowercase(), None),
        (None, Some(b)) => {
            let key = poll::Key {
                url: url.to_string(),
                reference: b.to_string(),
                credentials: credentials.fingerprint(),
            };
            let (u, r, c) = (url.to_string(), b.to_string(), credentials.clone());
            let answer = poll::Poller::shared().lookup(
                key,
                poll::Need::MaxAge(BRANCH_MAX_AGE),
                None,
                Some(metrics.clone()),
                move |cancel| git::ls_remote(&u, &r, &c, cancel),
            );
            match answer {
                poll::Answer::Ready(Ok(sha)) => PackAnswer::Revision(sha, None),
                poll::Answer::Ready(Err(e)) => {
                    PackAnswer::Error(format!("cannot read branch {b:?}: {e}"))
                }
                poll::Answer::Pending => PackAnswer::Pending,
            }
        }
        _ => PackAnswer::Error("must name exactly one of git.commit and git.branch".into()),
    }
}

/// A branch being read again keeps what the status said of it for this generation (its last
/// revision or error): a re-read must not make a resolved pack unusable for a moment.
pub fn carry_over(
    policy: &StackPolicy,
    answers: Vec<(String, PackAnswer)>,
) -> Vec<(String, PackAnswer)> {
    let status = policy
        .status
        .as_ref()
        .filter(|s| s.observed_generation == policy.metadata.generation);
    answers
        .into_iter()
        .map(|(name, answer)| {
            let before = status.and_then(|s| s.packs.iter().find(|p| p.name == name));
            let answer = match (answer, before) {
                (PackAnswer::Pending, Some(p)) if p.revision.is_some() => {
                    PackAnswer::Revision(p.revision.clone().unwrap_or_default(), p.url.clone())
                }
                (PackAnswer::Pending, Some(p)) if p.error.is_some() => {
                    PackAnswer::Error(p.error.clone().unwrap_or_default())
                }
                (answer, _) => answer,
            };
            (name, answer)
        })
        .collect()
}

/// A git pack's commit; one of a private repository (`gitAuth`) is fetched by the operator
/// too (its copy is what operations get), so that a pack that cannot be had says so here.
async fn git_pack_answer(git: &PolicyPackGitSource, ctx: &PolicyContext) -> PackAnswer {
    let credentials = match &git.git_auth {
        None => Credentials::None,
        Some(auth) => {
            match archive::credentials(&ctx.client, &ctx.operator_namespace, auth).await {
                Ok(c) => c,
                Err(e) => return PackAnswer::Error(format!("its credentials cannot be read: {e}")),
            }
        }
    };
    let commit = git.commit.as_deref();
    let answer = git_answer(
        &git.url,
        commit,
        git.branch.as_deref(),
        &credentials,
        &ctx.metrics,
    );
    let PackAnswer::Revision(commit, _) = answer else {
        return answer;
    };
    if git.git_auth.is_none() {
        return PackAnswer::Revision(commit, None);
    }
    let key = archive::ArchiveKey {
        url: git.url.clone(),
        commit: commit.clone(),
        dir: git.dir.clone().filter(|d| !d.is_empty()),
    };
    match archive::ensure(&key, credentials).await {
        Ok(_) => PackAnswer::Revision(commit, None),
        Err(e) => PackAnswer::Error(format!("cannot be fetched at {commit}: {e}")),
    }
}

/// One pack's answer from its source: a git commit or branch head, a packaged pack's digest,
/// or a Flux source's current artifact.
async fn pack_answer(pack: &PolicyPackSpec, ctx: &PolicyContext) -> PackAnswer {
    match (&pack.git, &pack.flux_source, &pack.archive) {
        (Some(g), None, None) => git_pack_answer(g, ctx).await,
        (None, Some(flux), None) => {
            let r = &flux.source_ref;
            match crate::source::flux::artifact(
                &r.api_version,
                &r.kind,
                &r.name,
                &r.namespace,
                &ctx.client,
            )
            .await
            {
                Ok(a) if a.digest.starts_with("sha256:") => {
                    PackAnswer::Revision(a.digest, Some(a.url))
                }
                Ok(a) => PackAnswer::Error(format!(
                    "the Flux source's artifact {} has no sha256 digest",
                    a.url
                )),
                Err(e) => PackAnswer::Error(e.message),
            }
        }
        (None, None, Some(archive)) => PackAnswer::Revision(archive.digest.clone(), None),
        _ => PackAnswer::Error("must name exactly one of git, fluxSource and archive".into()),
    }
}

fn pack_status(name: &str, answer: &PackAnswer) -> PolicyPackStatus {
    let mut status = PolicyPackStatus {
        name: name.to_string(),
        ..Default::default()
    };
    match answer {
        PackAnswer::Revision(r, url) => {
            status.revision = Some(r.clone());
            status.url = url.clone();
        }
        PackAnswer::Error(e) => status.error = Some(e.clone()),
        PackAnswer::Pending => {}
    }
    status
}

/// `name@revision` of each pack (12 characters of the commit or digest), for `kubectl get`.
fn pack_names(packs: &[PolicyPackStatus]) -> String {
    packs
        .iter()
        .map(|p| match &p.revision {
            Some(r) => {
                let r = r.strip_prefix("sha256:").unwrap_or(r);
                format!("{}@{}", p.name, &r[..r.len().min(12)])
            }
            None => p.name.clone(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The status for `answers` (one per pack, in spec order) and the count of covered Stacks.
pub fn fold_status(
    policy: &StackPolicy,
    answers: &[(String, PackAnswer)],
    covered: i64,
    now: &Time,
) -> StackPolicyStatus {
    let packs: Vec<PolicyPackStatus> = answers.iter().map(|(n, a)| pack_status(n, a)).collect();
    let first_error = packs.iter().find_map(|p| {
        p.error
            .as_ref()
            .map(|e| format!("policy pack {:?}: {e}", p.name))
    });
    let pending = answers.iter().find(|(_, a)| *a == PackAnswer::Pending);
    let (status, reason, message) = match (&first_error, pending, selector_error(policy)) {
        (Some(e), _, _) => ("False", "PackUnavailable", e.clone()),
        (None, Some((name, _)), _) => (
            "False",
            "Resolving",
            format!("reading the branch of policy pack {name:?}"),
        ),
        (None, None, Some(e)) => ("True", "InvalidSelector", e),
        (None, None, None) => (
            "True",
            "Resolved",
            format!("{} policy packs resolved", packs.len()),
        ),
    };
    let names = pack_names(&packs);
    let generation = policy.metadata.generation;
    let transition = policy
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| {
            c.iter()
                .find(|c| c.type_ == "Ready" && c.status == status && c.reason == reason)
        })
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.clone());
    StackPolicyStatus {
        observed_generation: generation,
        conditions: Some(vec![Condition {
            type_: "Ready".into(),
            status: status.into(),
            reason: reason.into(),
            message,
            last_transition_time: transition,
            observed_generation: generation,
        }]),
        packs,
        pack_names: Some(names),
        covered_stacks: Some(covered),
        last_error: first_error
            .or_else(|| policy.status.as_ref().and_then(|s| s.last_error.clone())),
    }
}

/// How many cached Stacks `policy` covers.
fn covered_stacks(policy: &StackPolicy, ctx: &PolicyContext) -> i64 {
    let empty = Default::default();
    let mut count = 0;
    for store in &ctx.stacks {
        for stack in store.state() {
            let ns = stack.namespace().unwrap_or_default();
            let ns_labels = ctx
                .namespaces
                .get(&kube::runtime::reflector::ObjectRef::new(&ns))
                .map(|n| n.labels().clone())
                .unwrap_or_default();
            let subject = Subject {
                namespace_labels: &ns_labels,
                stack_labels: Some(stack.metadata.labels.as_ref().unwrap_or(&empty)),
            };
            if covers(policy, &subject) {
                count += 1;
            }
        }
    }
    count
}

pub async fn reconcile(
    policy: Arc<StackPolicy>,
    ctx: Arc<PolicyContext>,
) -> Result<Action, PolicyError> {
    let mut answers: Vec<(String, PackAnswer)> = Vec::new();
    for pack in &policy.spec.packs {
        answers.push((pack.name.clone(), pack_answer(pack, &ctx).await));
    }
    let next = next_look(&policy, &answers);
    let answers = carry_over(&policy, answers);
    let now = Time(jiff::Timestamp::now());
    let status = fold_status(&policy, &answers, covered_stacks(&policy, &ctx), &now);
    if policy.status.as_ref() != Some(&status) {
        let api: Api<StackPolicy> = Api::all(ctx.client.clone());
        crate::runtime::status::apply_status(
            &api,
            &policy.name_any(),
            FIELD_MANAGER,
            &status,
            None,
        )
        .await?;
        info!(policy = %policy.name_any(), packs = ?status.pack_names, "stack policy status written");
    }
    Ok(Action::requeue(next))
}

/// When the policy is looked at again, from the answers before the status carried anything
/// over: soon while a lookup is in flight (its answer is used as soon as it lands, not one
/// poll period later, when it would already be about to expire), every [`BRANCH_MAX_AGE`] for
/// packs that follow a branch or a Flux source, else now and then (the covered count follows
/// Stacks and namespaces).
pub fn next_look(policy: &StackPolicy, answers: &[(String, PackAnswer)]) -> Duration {
    let moving = policy
        .spec
        .packs
        .iter()
        .any(|p| p.flux_source.is_some() || p.git.as_ref().is_some_and(|g| g.branch.is_some()));
    if answers.iter().any(|(_, a)| *a == PackAnswer::Pending) {
        Duration::from_secs(2)
    } else if moving {
        BRANCH_MAX_AGE
    } else {
        Duration::from_secs(300)
    }
}

pub fn error_policy(
    policy: Arc<StackPolicy>,
    error: &PolicyError,
    _ctx: Arc<PolicyContext>,
) -> Action {
    warn!(policy = %policy.name_any(), %error, "stack policy reconcile failed");
    Action::requeue(Duration::from_secs(15))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use pulumi_operator_api::policy::StackPolicySpec;

    fn policy() -> StackPolicy {
        let mut p = StackPolicy::new(
            "limits",
            StackPolicySpec {
                packs: vec![],
                namespace_selector: LabelSelector::default(),
                stack_selector: None,
            },
        );
        p.metadata.generation = Some(3);
        p
    }

    fn now() -> Time {
        Time(jiff::Timestamp::from_second(1_800_000_000).unwrap())
    }

    #[test]
    fn resolved_packs_make_the_policy_ready_with_their_revisions() {
        let sha = "0123456789abcdef0123456789abcdef01234567";
        let answers = vec![
            ("limits".to_string(), PackAnswer::Revision(sha.into(), None)),
            ("labels".to_string(), PackAnswer::Revision(sha.into(), None)),
        ];
        let st = fold_status(&policy(), &answers, 7, &now());
        assert_eq!(st.observed_generation, Some(3));
        assert_eq!(
            st.pack_names.as_deref(),
            Some("limits@0123456789ab,labels@0123456789ab")
        );
        assert_eq!(st.covered_stacks, Some(7));
        let ready = &st.conditions.unwrap()[0];
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "Resolved")
        );
        assert_eq!(st.packs[1].revision.as_deref(), Some(sha));
    }

    #[test]
    fn an_unreadable_pack_is_named_in_the_condition_and_the_last_error() {
        let answers = vec![
            (
                "limits".to_string(),
                PackAnswer::Error("cannot read branch \"main\": connection refused".into()),
            ),
            ("labels".to_string(), PackAnswer::Pending),
        ];
        let st = fold_status(&policy(), &answers, 0, &now());
        let ready = &st.conditions.clone().unwrap()[0];
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "PackUnavailable")
        );
        assert!(
            ready
                .message
                .starts_with("policy pack \"limits\": cannot read branch"),
            "{}",
            ready.message
        );
        assert_eq!(st.last_error.as_deref(), Some(ready.message.as_str()));
        assert_eq!(
            st.packs[1],
            PolicyPackStatus {
                name: "labels".into(),
                ..Default::default()
            }
        );
        // Only pending: resolving.
        let st = fold_status(&policy(), &answers[1..], 0, &now());
        assert_eq!(st.conditions.unwrap()[0].reason, "Resolving");
    }

    #[test]
    fn a_branch_read_again_keeps_its_last_answer_for_the_generation() {
        let mut p = policy();
        let first = vec![
            ("limits".to_string(), PackAnswer::Error("gone".into())),
            (
                "labels".to_string(),
                PackAnswer::Revision("a".repeat(40), None),
            ),
        ];
        p.status = Some(fold_status(&p, &first, 0, &now()));
        let again = vec![
            ("limits".to_string(), PackAnswer::Pending),
            ("labels".to_string(), PackAnswer::Pending),
        ];
        assert_eq!(carry_over(&p, again.clone()), first);
        // But the read in flight is looked for again soon, not a poll period later: a head
        // read at one look would be just as old as the limit at the next one, and read again.
        assert_eq!(next_look(&p, &again), Duration::from_secs(2));
        assert_eq!(next_look(&p, &first), Duration::from_secs(300));
        p.spec.packs = serde_json::from_value(serde_json::json!([
            {"name": "limits", "git": {"url": "https://git.example/p.git", "branch": "main"}}
        ]))
        .unwrap();
        assert_eq!(next_look(&p, &first), BRANCH_MAX_AGE);
        // A new generation starts afresh.
        p.metadata.generation = Some(4);
        assert_eq!(carry_over(&p, again.clone()), again);
    }
}
