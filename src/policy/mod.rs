//! The administrator's policy packs (`StackPolicy`): which policies cover an operation and the
//! packs its plan carries (pure, here), and the StackPolicy controller that resolves each
//! pack's revision and reports what it covers (`reconcile`). An operation never runs without
//! the packs that cover it: a pack without a revision fails it before it starts.

pub mod archive;
pub mod reconcile;

use crate::runtime::context::Stores;
use kube::core::{Selector, SelectorExt};
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;
use pulumi_operator_api::plan::{PolicyPackPlan, Source};
use pulumi_operator_api::policy::{
    PolicyPackGitSource, PolicyPackSpec, PolicyPackStatus, StackPolicy,
};
use pulumi_operator_api::{Stack, Update};
use sha2::Digest as _;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Why an operation cannot have one of its policy packs (it must not run without it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("policy pack {pack:?} of StackPolicy {policy:?} {why}")]
pub struct PackUnavailable {
    pub policy: String,
    pub pack: String,
    pub why: String,
    /// The StackPolicy controller has not resolved the pack yet (no revision and no error for
    /// the policy's current generation): this ends by itself, and the operation waits for it.
    /// `false`: the pack failed to resolve or is misconfigured (a person must act).
    pub pending: bool,
}

/// Why a pack has no exact source.
#[derive(Debug, Clone, PartialEq, Eq)]
enum NoSource {
    /// Not resolved yet by the StackPolicy controller.
    Pending(String),
    /// It could not be resolved, or the spec is wrong.
    Failed(String),
}

impl From<&str> for NoSource {
    fn from(why: &str) -> Self {
        NoSource::Failed(why.to_string())
    }
}

/// Labels, as selectors match them.
pub type Labels = BTreeMap<String, String>;

/// What an operation is matched with: its namespace's labels, and its Stack's labels (`None`
/// for an Update created without a Stack, which every namespace-matching policy covers).
pub struct Subject<'a> {
    pub namespace_labels: &'a Labels,
    pub stack_labels: Option<&'a Labels>,
}

/// Whether `selector` matches `labels`. A selector that does not parse (an unknown operator)
/// matches everything: a policy the administrator got wrong covers too much, never too little
/// (its status says why).
fn selects(
    selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    labels: &Labels,
) -> bool {
    match Selector::try_from(selector.clone()) {
        Ok(s) => s.matches(labels),
        Err(_) => true,
    }
}

/// Whether `policy` covers the subject.
pub fn covers(policy: &StackPolicy, subject: &Subject) -> bool {
    if !selects(&policy.spec.namespace_selector, subject.namespace_labels) {
        return false;
    }
    match (&policy.spec.stack_selector, subject.stack_labels) {
        (Some(selector), Some(labels)) => selects(selector, labels),
        _ => true,
    }
}

/// Whether the selectors of `policy` parse (for its status).
pub fn selector_error(policy: &StackPolicy) -> Option<String> {
    let spec = &policy.spec;
    [Some(&spec.namespace_selector), spec.stack_selector.as_ref()]
        .into_iter()
        .flatten()
        .find_map(|s| Selector::try_from(s.clone()).err())
        .map(|e| format!("invalid label selector ({e}): it covers every Stack until fixed"))
}

fn is_full_sha(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// What the StackPolicy's status says of `pack` for the current generation.
fn resolved<'a>(
    policy: &'a StackPolicy,
    pack: &PolicyPackSpec,
) -> Result<&'a PolicyPackStatus, NoSource> {
    let status = policy.status.as_ref();
    let current = status.and_then(|s| s.observed_generation) == policy.metadata.generation;
    match status
        .filter(|_| current)
        .and_then(|s| s.packs.iter().find(|p| p.name == pack.name))
    {
        Some(p) if p.revision.is_some() => Ok(p),
        Some(p) => Err(match &p.error {
            Some(e) => NoSource::Failed(e.clone()),
            None => NoSource::Pending("is still being resolved".into()),
        }),
        None => Err(NoSource::Pending("is not resolved yet".into())),
    }
}

fn git_source(
    policy: &StackPolicy,
    pack: &PolicyPackSpec,
    git: &PolicyPackGitSource,
) -> Result<Source, NoSource> {
    let commit = match (git.commit.as_deref(), git.branch.as_deref()) {
        (Some(c), None) if is_full_sha(c) => c.to_ascii_lowercase(),
        (Some(c), None) => {
            let why = format!("names commit {c:?}, which is not a full SHA");
            return Err(NoSource::Failed(why));
        }
        (None, Some(_)) => resolved(policy, pack)?.revision.clone().unwrap_or_default(),
        _ => return Err("must name exactly one of git.commit and git.branch".into()),
    };
    Ok(Source::Git {
        url: git.url.clone(),
        commit: Some(commit),
        reference: None,
        shallow: false,
        dir: git.dir.clone().filter(|d| !d.is_empty()),
    })
}

/// Where a pack comes from, exactly: a git commit, or an artifact with its digest (a packaged
/// pack as given; a Flux source's artifact as the StackPolicy's status resolved it).
fn pack_source(policy: &StackPolicy, pack: &PolicyPackSpec) -> Result<Source, NoSource> {
    match (&pack.git, &pack.flux_source, &pack.archive) {
        (Some(git), None, None) => git_source(policy, pack, git),
        (None, Some(flux), None) => {
            let seen = resolved(policy, pack)?;
            Ok(Source::Flux {
                url: seen.url.clone().unwrap_or_default(),
                digest: seen.revision.clone().unwrap_or_default(),
                dir: flux.dir.clone().filter(|d| !d.is_empty()),
            })
        }
        (None, None, Some(archive)) => Ok(Source::Flux {
            url: archive.url.clone(),
            digest: archive.digest.clone(),
            dir: archive.dir.clone().filter(|d| !d.is_empty()),
        }),
        _ => Err("must name exactly one of git, fluxSource and archive".into()),
    }
}

/// The plan of one pack of `policy`.
pub fn pack_plan(
    policy: &StackPolicy,
    pack: &PolicyPackSpec,
) -> Result<PolicyPackPlan, PackUnavailable> {
    let unavailable = |no: NoSource| {
        let (why, pending) = match no {
            NoSource::Pending(why) => (why, true),
            NoSource::Failed(why) => (why, false),
        };
        PackUnavailable {
            policy: policy.name_any(),
            pack: pack.name.clone(),
            why,
            pending,
        }
    };
    Ok(PolicyPackPlan {
        name: pack.name.clone(),
        policy: policy.name_any(),
        source: pack_source(policy, pack).map_err(unavailable)?,
        config: pack
            .config
            .as_ref()
            .map(|c| serde_json::Value::Object(c.clone().into_iter().collect())),
    })
}

/// Every pack of every policy covering the subject, by policy name then pack order; the first
/// pack that has no revision fails the whole set.
pub fn packs_for(
    policies: &[Arc<StackPolicy>],
    subject: &Subject,
) -> Result<Vec<PolicyPackPlan>, PackUnavailable> {
    let mut covering: Vec<&Arc<StackPolicy>> =
        policies.iter().filter(|p| covers(p, subject)).collect();
    covering.sort_by_key(|p| p.name_any());
    let mut packs = Vec::new();
    for policy in covering {
        for pack in &policy.spec.packs {
            packs.push(pack_plan(policy, pack)?);
        }
    }
    Ok(packs)
}

/// A namespace's labels from the cache; `None` while the cache has not seen it.
/// The namespace label that turns the stack identity guard on
/// (`kustomize/components/stack-identity-guard`), and its value.
pub const GUARD_LABEL: (&str, &str) = ("pulumi-operator-rs.dev/stack-identity-guard", "enforced");

/// Whether the namespace is under the stack identity guard, by its cached labels (`false`
/// while it is not cached: the packs' own check already waits for the namespace).
pub fn guarded(stores: &Stores, ns: &str) -> bool {
    namespace_labels(stores, ns)
        .is_some_and(|l| l.get(GUARD_LABEL.0).map(String::as_str) == Some(GUARD_LABEL.1))
}

fn namespace_labels(stores: &Stores, ns: &str) -> Option<Labels> {
    let namespace = stores.namespaces.get(&ObjectRef::new(ns))?;
    Some(namespace.metadata.labels.clone().unwrap_or_default())
}

/// The packs an Update must run with, from the caches: `Ok(None)` while its namespace is not
/// in the namespace cache yet (its labels decide; never guessed). The Stack that controls the
/// Update (matched by UID) gives the labels a policy's Stack selector matches; an Update
/// without one is covered by every policy whose namespace selector matches.
pub fn packs_for_update(
    update: &Update,
    stores: &Stores,
) -> Result<Option<Vec<PolicyPackPlan>>, PackUnavailable> {
    let ns = update.namespace().unwrap_or_default();
    let Some(namespace_labels) = namespace_labels(stores, &ns) else {
        return Ok(None);
    };
    let stack = update
        .owner_references()
        .iter()
        .find(|o| o.kind == "Stack" && o.controller == Some(true))
        .and_then(|o| {
            stores
                .stacks
                .get(&ObjectRef::new(&o.name).within(&ns))
                .filter(|s| s.uid().as_deref() == Some(o.uid.as_str()))
        });
    let empty = Labels::new();
    let subject = Subject {
        namespace_labels: &namespace_labels,
        stack_labels: stack
            .as_ref()
            .map(|s| s.metadata.labels.as_ref().unwrap_or(&empty)),
    };
    packs_for(&stores.policies.state(), &subject).map(Some)
}

/// The packs a Stack's next operation would run with, from the caches (as for its Updates).
pub fn packs_for_stack(
    stack: &Stack,
    stores: &Stores,
) -> Result<Option<Vec<PolicyPackPlan>>, PackUnavailable> {
    let Some(namespace_labels) = namespace_labels(stores, &stack.namespace().unwrap_or_default())
    else {
        return Ok(None);
    };
    let empty = Labels::new();
    let subject = Subject {
        namespace_labels: &namespace_labels,
        stack_labels: Some(stack.metadata.labels.as_ref().unwrap_or(&empty)),
    };
    packs_for(&stores.policies.state(), &subject).map(Some)
}

/// A short digest of what `packs` are (policy, name, exact source, configuration); `None` for
/// no packs.
pub fn digest(packs: &[PolicyPackPlan]) -> Option<String> {
    if packs.is_empty() {
        return None;
    }
    let text = serde_json::to_string(packs).unwrap_or_default();
    let hash = sha2::Sha256::digest(text.as_bytes());
    Some(hash.iter().take(8).map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
    use pulumi_operator_api::policy::{
        PolicyPackArchive, PolicyPackFluxReference, PolicyPackFluxSource, StackPolicySpec,
        StackPolicyStatus,
    };

    const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn selector(pairs: &[(&str, &str)]) -> LabelSelector {
        LabelSelector {
            match_labels: Some(labels(pairs)),
            match_expressions: None,
        }
    }

    fn pack(name: &str, commit: Option<&str>, branch: Option<&str>) -> PolicyPackSpec {
        PolicyPackSpec {
            name: name.into(),
            git: Some(PolicyPackGitSource {
                url: "https://git.example/packs.git".into(),
                commit: commit.map(str::to_string),
                branch: branch.map(str::to_string),
                dir: Some("limits".into()),
                git_auth: None,
            }),
            config: None,
            ..Default::default()
        }
    }

    fn policy(
        name: &str,
        ns: LabelSelector,
        stacks: Option<LabelSelector>,
        packs: Vec<PolicyPackSpec>,
    ) -> Arc<StackPolicy> {
        let mut p = StackPolicy::new(
            name,
            StackPolicySpec {
                packs,
                namespace_selector: ns,
                stack_selector: stacks,
            },
        );
        p.metadata.generation = Some(2);
        Arc::new(p)
    }

    #[test]
    fn namespaces_and_stacks_are_selected_by_label() {
        let p = policy(
            "limits",
            selector(&[("tier", "prod")]),
            Some(selector(&[("team", "a")])),
            vec![],
        );
        let prod = labels(&[("tier", "prod")]);
        let dev = labels(&[("tier", "dev")]);
        let team_a = labels(&[("team", "a")]);
        let team_b = labels(&[("team", "b")]);
        let subject = |ns, stack| Subject {
            namespace_labels: ns,
            stack_labels: stack,
        };
        assert!(covers(&p, &subject(&prod, Some(&team_a))));
        assert!(!covers(&p, &subject(&prod, Some(&team_b))));
        assert!(!covers(&p, &subject(&dev, Some(&team_a))));
        // An Update without a Stack: the namespace decides.
        assert!(covers(&p, &subject(&prod, None)));
        assert!(!covers(&p, &subject(&dev, None)));
        // `{}` covers every namespace.
        let all = policy("all", LabelSelector::default(), None, vec![]);
        assert!(covers(&all, &subject(&dev, Some(&team_b))));
    }

    #[test]
    fn a_selector_that_does_not_parse_covers_everything_and_says_so() {
        let bad = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "Resembles".into(),
                values: Some(vec!["prod".into()]),
            }]),
        };
        let p = policy("limits", bad, None, vec![]);
        let dev = labels(&[("tier", "dev")]);
        assert!(covers(
            &p,
            &Subject {
                namespace_labels: &dev,
                stack_labels: None
            }
        ));
        assert!(selector_error(&p).unwrap().contains("covers every Stack"));
        assert_eq!(
            selector_error(&policy("ok", LabelSelector::default(), None, vec![])),
            None
        );
    }

    #[test]
    fn packs_come_at_their_commit_or_their_resolved_branch_head() {
        let mut branch = (*policy(
            "b-policy",
            LabelSelector::default(),
            None,
            vec![pack("tracking", None, Some("main"))],
        ))
        .clone();
        let pinned = policy(
            "a-policy",
            LabelSelector::default(),
            None,
            vec![pack("pinned", Some(&SHA.to_uppercase()), None)],
        );
        let ns = labels(&[]);
        let subject = Subject {
            namespace_labels: &ns,
            stack_labels: None,
        };
        // The branch is not resolved yet: nothing runs.
        let err = packs_for(&[Arc::new(branch.clone()), pinned.clone()], &subject).unwrap_err();
        assert_eq!(
            err.to_string(),
            "policy pack \"tracking\" of StackPolicy \"b-policy\" is not resolved yet"
        );
        // Resolved for an older generation: still not usable.
        branch.status = Some(StackPolicyStatus {
            observed_generation: Some(1),
            packs: vec![PolicyPackStatus {
                name: "tracking".into(),
                revision: Some(SHA.into()),
                ..Default::default()
            }],
            ..Default::default()
        });
        assert!(packs_for(&[Arc::new(branch.clone())], &subject).is_err());
        branch.status.as_mut().unwrap().observed_generation = Some(2);
        let packs = packs_for(&[Arc::new(branch.clone()), pinned], &subject).unwrap();
        let names: Vec<String> = packs
            .iter()
            .map(|p| format!("{}/{}", p.policy, p.name))
            .collect();
        assert_eq!(names, ["a-policy/pinned", "b-policy/tracking"]);
        assert_eq!(
            packs[0].dir(),
            "/var/run/pulumi-operator/policy-packs/a-policy/pinned"
        );
        assert!(
            matches!(&packs[0].source, Source::Git { commit: Some(c), dir: Some(d), .. } if c == SHA && d == "limits")
        );
        // A resolution error is the reason.
        branch.status.as_mut().unwrap().packs[0] = PolicyPackStatus {
            name: "tracking".into(),
            error: Some("cannot read branch main: connection refused".into()),
            ..Default::default()
        };
        let err = packs_for(&[Arc::new(branch)], &subject).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("cannot read branch main: connection refused"),
            "{err}"
        );
    }

    #[test]
    fn a_pack_not_resolved_yet_is_pending_and_one_that_failed_is_not() {
        let ns = labels(&[]);
        let subject = Subject {
            namespace_labels: &ns,
            stack_labels: None,
        };
        let mut p = (*policy(
            "limits",
            LabelSelector::default(),
            None,
            vec![pack("tracking", None, Some("main"))],
        ))
        .clone();
        let unavailable =
            |p: &StackPolicy| packs_for(&[Arc::new(p.clone())], &subject).unwrap_err();
        // Never resolved, resolved for an older generation, or being read: it ends by itself.
        assert!(unavailable(&p).pending);
        p.status = Some(StackPolicyStatus {
            observed_generation: Some(2),
            packs: vec![PolicyPackStatus {
                name: "tracking".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        let err = unavailable(&p);
        assert!(err.pending);
        assert!(
            err.to_string().ends_with("is still being resolved"),
            "{err}"
        );
        // Failed to resolve: a person must act.
        p.status.as_mut().unwrap().packs[0].error = Some("cannot read branch main".into());
        let err = unavailable(&p);
        assert!(!err.pending);
        assert!(
            err.to_string().ends_with("cannot read branch main"),
            "{err}"
        );
        // A spec that cannot work is not pending either.
        let bad = policy(
            "p",
            LabelSelector::default(),
            None,
            vec![pack("x", None, None)],
        );
        assert!(!unavailable(&bad).pending);
    }

    #[test]
    fn packaged_and_flux_packs_come_as_artifacts_with_their_digest() {
        let digest = format!("sha256:{}", "d".repeat(64));
        let archive = PolicyPackSpec {
            name: "packaged".into(),
            archive: Some(PolicyPackArchive {
                url: "https://packs.example/limits.tar.gz".into(),
                digest: digest.clone(),
                dir: Some("limits".into()),
            }),
            ..Default::default()
        };
        let flux = PolicyPackSpec {
            name: "from-flux".into(),
            flux_source: Some(PolicyPackFluxSource {
                source_ref: PolicyPackFluxReference {
                    api_version: "source.toolkit.fluxcd.io/v1".into(),
                    kind: "GitRepository".into(),
                    name: "packs".into(),
                    namespace: "flux-system".into(),
                },
                dir: None,
            }),
            ..Default::default()
        };
        let mut p = (*policy("p", LabelSelector::default(), None, vec![archive, flux])).clone();
        let ns = labels(&[]);
        let subject = Subject {
            namespace_labels: &ns,
            stack_labels: None,
        };
        // The packaged pack needs nothing resolved; the Flux one waits for its artifact.
        let err = packs_for(&[Arc::new(p.clone())], &subject).unwrap_err();
        assert_eq!(err.pack, "from-flux");
        p.status = Some(StackPolicyStatus {
            observed_generation: Some(2),
            packs: vec![PolicyPackStatus {
                name: "from-flux".into(),
                revision: Some(digest.clone()),
                url: Some("http://source-controller.flux-system/gitrepository/packs.tar.gz".into()),
                error: None,
            }],
            ..Default::default()
        });
        let packs = packs_for(&[Arc::new(p)], &subject).unwrap();
        assert_eq!(
            packs[0].source,
            Source::Flux {
                url: "https://packs.example/limits.tar.gz".into(),
                digest: digest.clone(),
                dir: Some("limits".into())
            }
        );
        assert!(
            matches!(&packs[1].source, Source::Flux { url, digest: d, dir: None } if url.ends_with("packs.tar.gz") && *d == digest)
        );
        assert_eq!(packs[0].label(), "packaged@dddddddddddd");
    }

    #[test]
    fn the_digest_follows_revision_and_configuration() {
        let mut spec = pack("limits", Some(SHA), None);
        let p = policy("p", LabelSelector::default(), None, vec![spec.clone()]);
        let a = digest(&[pack_plan(&p, &spec).unwrap()]);
        assert_eq!(a.as_ref().map(String::len), Some(16));
        assert_eq!(digest(&[]), None);
        spec.config = Some(
            [("x".to_string(), serde_json::json!("disabled"))]
                .into_iter()
                .collect(),
        );
        assert_ne!(digest(&[pack_plan(&p, &spec).unwrap()]), a);
        let other = pack("limits", Some(&"1".repeat(40)), None);
        assert_ne!(digest(&[pack_plan(&p, &other).unwrap()]), a);
    }

    #[test]
    fn a_pack_names_exactly_one_full_commit_or_a_branch() {
        let ns = labels(&[]);
        let subject = Subject {
            namespace_labels: &ns,
            stack_labels: None,
        };
        for (commit, branch, want) in [
            (Some("abc123"), None, "not a full SHA"),
            (None, None, "exactly one"),
            (Some(SHA), Some("main"), "exactly one"),
        ] {
            let p = policy(
                "p",
                LabelSelector::default(),
                None,
                vec![pack("x", commit, branch)],
            );
            let err = packs_for(&[p], &subject).unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
    }

    #[test]
    fn the_configuration_is_the_policy_pack_config_document() {
        let mut spec = pack("limits", Some(SHA), None);
        spec.config = Some(
            [
                (
                    "deployment-resource-limits".to_string(),
                    serde_json::json!("disabled"),
                ),
                (
                    "max-replicas".to_string(),
                    serde_json::json!({"enforcementLevel": "advisory", "max": 3}),
                ),
            ]
            .into_iter()
            .collect(),
        );
        let p = policy("p", LabelSelector::default(), None, vec![spec.clone()]);
        let plan = pack_plan(&p, &spec).unwrap();
        assert_eq!(
            plan.config,
            Some(serde_json::json!({
                "deployment-resource-limits": "disabled",
                "max-replicas": {"enforcementLevel": "advisory", "max": 3}
            }))
        );
        assert_eq!(plan.label(), "limits@0123456789ab");
    }
}
