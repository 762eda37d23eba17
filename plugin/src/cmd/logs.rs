//! `kubectl pulumi logs <stack> [-f] [--update NAME]`.

use crate::cli::LogsArgs;
use crate::cluster::{api_error, Cluster, UPDATES};
use crate::view::history::{history, log_target};
use crate::view::pods::{containers, ended, newest, phase, Phase};
use crate::view::terminal::{terminal_safe, LogEscaper};
use anyhow::{anyhow, bail, Result};
use futures::{AsyncBufRead, AsyncBufReadExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, LogParams};
use kube::ResourceExt;
use pulumi_operator_api::{names, Update};
use std::io::Write;
use std::time::Duration;

const POLL: Duration = Duration::from_secs(2);

/// The Update whose log to show; with `follow`, waits for a new Stack's first operation.
async fn target(cluster: &Cluster, args: &LogsArgs) -> Result<String> {
    let name = loop {
        let stack = cluster.stack(&args.stack).await?;
        let updates = cluster.updates(&args.stack).await?;
        let rows = history(&updates, &stack.stack.uid().unwrap_or_default());
        match log_target(args.update.as_deref(), stack.stack.status.as_ref(), &rows) {
            Some(name) => break name,
            None if args.follow => tokio::time::sleep(POLL).await,
            None => bail!(
                "the Stack {:?} has run no operation yet (use -f to wait for its first one)",
                args.stack
            ),
        }
    };
    let found = cluster
        .api::<Update>()
        .get_opt(&name)
        .await
        .map_err(|e| api_error(e, cluster.action("get", UPDATES, Some(&name))))?;
    if found.is_none() {
        bail!(
            "update {name:?} not found in namespace {:?}: finished Updates are deleted with their Job \
             after their TTL (24h by default); `kubectl pulumi history {}` lists the kept ones",
            cluster.namespace,
            args.stack
        );
    }
    Ok(name)
}

async fn pods(cluster: &Cluster, update: &str) -> Result<Vec<Pod>> {
    let params = ListParams::default().labels(&format!("{}={update}", names::UPDATE_NAME_LABEL));
    let list = cluster
        .api::<Pod>()
        .list(&params)
        .await
        .map_err(|e| api_error(e, cluster.action("list", "pods", None)))?;
    Ok(list.items)
}

/// The newest pod of the Update; with `follow`, waits for it to appear.
async fn pod(cluster: &Cluster, update: &str, follow: bool) -> Result<Pod> {
    loop {
        if let Some(p) = newest(&pods(cluster, update).await?) {
            return Ok(p.clone());
        }
        if !follow {
            bail!(
                "the operation {update} has no pod: its Job has not started one yet, or it was \
                 deleted (use -f to wait for it)"
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits (with `follow`) until the container has started; `Ok(false)`: it never will.
async fn started(cluster: &Cluster, pod: &Pod, container: &str, follow: bool) -> Result<bool> {
    let mut current = pod.clone();
    let mut said = String::new();
    loop {
        match phase(&current, container) {
            Phase::Started => return Ok(true),
            Phase::Missing => bail!(
                "the pod {} has no container {container:?} (it has: {})",
                current.name_any(),
                containers(&current).join(", ")
            ),
            Phase::Waiting(_) if ended(&current) => return Ok(false),
            Phase::Waiting(reason) if !follow => bail!(
                "the {container} container of pod {} has not started yet ({}): use -f to \
                 wait for it, or --all-containers to see the init containers",
                current.name_any(),
                terminal_safe(&reason)
            ),
            Phase::Waiting(reason) => {
                if reason != said {
                    eprintln!(
                        "waiting for the {container} container of pod {} ({})",
                        current.name_any(),
                        terminal_safe(&reason)
                    );
                    said = reason;
                }
            }
        }
        tokio::time::sleep(POLL).await;
        current = cluster
            .api::<Pod>()
            .get(&current.name_any())
            .await
            .map_err(|e| api_error(e, cluster.action("get", "pods", Some(&current.name_any()))))?;
    }
}

async fn stream(cluster: &Cluster, pod: &str, container: &str, args: &LogsArgs) -> Result<()> {
    let params = LogParams {
        container: Some(container.to_string()),
        follow: args.follow,
        tail_lines: args.tail,
        ..LogParams::default()
    };
    let reader = cluster
        .api::<Pod>()
        .log_stream(pod, &params)
        .await
        .map_err(|e| api_error(e, cluster.action("get", "pods/log", Some(pod))))?;
    copy_escaped(reader, &mut std::io::stdout())
        .await
        .map_err(|e| anyhow!("reading the log of {pod}/{container}: {e}"))
}

/// Copies a log to `out` as it comes, line by line, escaped ([`LogEscaper`]): what the
/// program printed cannot move the cursor or rewrite what was printed before.
async fn copy_escaped(reader: impl AsyncBufRead, out: &mut impl Write) -> std::io::Result<()> {
    let mut reader = std::pin::pin!(reader);
    let mut escaper = LogEscaper::default();
    loop {
        let chunk = reader.fill_buf().await?;
        if chunk.is_empty() {
            break;
        }
        let (read, text) = (chunk.len(), escaper.push(chunk));
        reader.as_mut().consume(read);
        out.write_all(text.as_bytes())?;
        out.flush()?;
    }
    out.write_all(escaper.finish().as_bytes())?;
    out.flush()
}

/// Prints (or follows) the log of the Stack's running or last operation.
pub async fn run(cluster: &Cluster, args: &LogsArgs) -> Result<()> {
    let update = target(cluster, args).await?;
    let pod = pod(cluster, &update, args.follow).await?;
    let wanted = if args.all_containers {
        containers(&pod)
    } else {
        vec![args.container.clone()]
    };
    for container in &wanted {
        if args.all_containers {
            println!("==> {} {container} <==", terminal_safe(&update));
        }
        if started(cluster, &pod, container, args.follow).await? {
            stream(cluster, &pod.name_any(), container, args).await?;
        } else {
            eprintln!(
                "the {container} container of pod {} never started (the pod has ended)",
                pod.name_any()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_log_is_copied_escaped_in_small_reads() {
        let log = b"+ create a\n- delete b\x1b[1A\x1b[2K\rok\n\xe6\x9d\xb1 \x1b]8;;x\x07end";
        let reader = futures::io::BufReader::with_capacity(3, futures::io::Cursor::new(log));
        let mut out = Vec::new();
        copy_escaped(reader, &mut out).await.expect("copied");
        assert_eq!(
            String::from_utf8(out).expect("UTF-8"),
            "+ create a\n- delete b\\x1b[1A\\x1b[2K\\rok\n東 \\x1b]8;;x\\x07end"
        );
    }
}
