//! `kubectl pulumi outputs <stack> [--show-secrets]`.

use crate::cli::OutputsArgs;
use crate::cluster::{api_error, Cluster};
use crate::view::format::structured;
use crate::view::history::{outcome, owned_by, Outcome};
use crate::view::outputs::{hidden_keys, render, reveal, secret_keys};
use anyhow::{anyhow, bail, Result};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use pulumi_operator_api::{names, Update, UpdateType};
use serde_json::Value;
use std::collections::BTreeMap;

/// The newest successful `up` of the Stack that recorded outputs: the one whose outputs
/// Secret holds the values `status.outputs` hides.
fn outputs_update(updates: Vec<Update>, stack_uid: &str) -> Option<Update> {
    updates
        .into_iter()
        .filter(|u| owned_by(u, stack_uid))
        .filter(|u| {
            u.spec.update_type == Some(UpdateType::Up) && outcome(u).0 == Outcome::Succeeded
        })
        .filter(|u| {
            u.status
                .as_ref()
                .and_then(|s| s.outputs.as_ref())
                .is_some_and(|o| !o.is_empty())
        })
        .max_by_key(|u| {
            u.status
                .as_ref()
                .and_then(|s| s.end_time.as_ref())
                .map(|t| t.0)
        })
}

async fn revealed(
    cluster: &Cluster,
    stack: &str,
    stack_uid: &str,
    outputs: &BTreeMap<String, Value>,
) -> Result<BTreeMap<String, Value>> {
    let gone = || {
        anyhow!(
            "the secret values are no longer readable: the up that produced these outputs was \
             deleted with its outputs Secret (Updates are kept 24h by default); `kubectl pulumi \
             reconcile {stack}` records them again"
        )
    };
    let update = outputs_update(cluster.updates(stack).await?, stack_uid).ok_or_else(gone)?;
    let name = names::outputs_secret_name(&update.name_any());
    let secret = cluster
        .api::<Secret>()
        .get_opt(&name)
        .await
        .map_err(|e| api_error(e, cluster.action("get", "secrets", Some(&name))))
        .map_err(|e| e.context(format!("--show-secrets reads the outputs Secret {name}")))?
        .ok_or_else(gone)?;
    if !secret
        .owner_references()
        .iter()
        .any(|o| Some(&o.uid) == update.uid().as_ref())
    {
        bail!(
            "the Secret {name} is not owned by the Update {}: not trusted",
            update.name_any()
        );
    }
    let keys = secret_keys(
        secret
            .annotations()
            .get(names::SECRETS_ANNOTATION)
            .map(String::as_str),
    );
    Ok(reveal(outputs, &secret.data.unwrap_or_default(), &keys))
}

/// Prints the Stack's outputs.
pub async fn run(cluster: &Cluster, args: &OutputsArgs) -> Result<()> {
    let viewed = cluster.stack(&args.stack).await?;
    let mut outputs = viewed
        .stack
        .status
        .as_ref()
        .and_then(|s| s.outputs.clone())
        .unwrap_or_default();
    if args.show_secrets && !hidden_keys(&outputs).is_empty() {
        let uid = viewed.stack.uid().unwrap_or_default();
        outputs = revealed(cluster, &args.stack, &uid, &outputs).await?;
    }
    if let Some(text) = structured(&outputs, args.output)? {
        print!("{text}");
    } else if outputs.is_empty() {
        eprintln!(
            "The Stack {} has no outputs (none recorded by a successful up yet).",
            args.stack
        );
    } else {
        print!("{}", render(&outputs));
    }
    Ok(())
}
