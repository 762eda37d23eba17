//! `kubectl pulumi describe <stack>`.

use crate::cli::DescribeArgs;
use crate::cluster::{api_error, Cluster};
use crate::view::describe::{chain, render, Objects};
use crate::view::format::structured;
use anyhow::Result;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::ListParams;
use pulumi_operator_api::names;

/// How many of the Stack's last Events are shown.
const MAX_EVENTS: usize = 10;

async fn list<K>(cluster: &Cluster, resource: &str, params: &ListParams) -> Result<Vec<K>>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    <K as kube::Resource>::DynamicType: Default,
{
    let list = cluster
        .api::<K>()
        .list(params)
        .await
        .map_err(|e| api_error(e, cluster.action("list", resource, None)))?;
    Ok(list.items)
}

/// Prints the chain Stack → Updates → Jobs → pods, and the Stack's last Events.
pub async fn run(cluster: &Cluster, args: &DescribeArgs) -> Result<()> {
    let stack = cluster.stack(&args.stack).await?;
    let updates = cluster.updates(&args.stack).await?;
    let by_stack =
        ListParams::default().labels(&format!("{}={}", names::STACK_NAME_LABEL, args.stack));
    let jobs: Vec<Job> = list(cluster, "jobs.batch", &by_stack).await?;
    let pods: Vec<Pod> = list(cluster, "pods", &by_stack).await?;
    let about = ListParams::default().fields(&format!(
        "involvedObject.kind=Stack,involvedObject.name={}",
        args.stack
    ));
    let events: Vec<Event> = list(cluster, "events", &about).await?;
    let objects = Objects {
        stack: &stack,
        updates: &updates,
        jobs: &jobs,
        pods: &pods,
        events: &events,
    };
    let c = chain(&objects, MAX_EVENTS);
    match structured(&c, args.output)? {
        Some(text) => print!("{text}"),
        None => print!("{}", render(&c, jiff::Timestamp::now())),
    }
    Ok(())
}
