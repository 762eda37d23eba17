//! `kubectl pulumi history <stack>`.

use crate::cli::HistoryArgs;
use crate::cluster::Cluster;
use crate::cmd::color;
use crate::view::format::{structured, table};
use crate::view::history::{cells, history, HEADERS};
use anyhow::Result;
use kube::ResourceExt;

/// Prints the Stack's kept Updates, oldest first.
pub async fn run(cluster: &Cluster, args: &HistoryArgs) -> Result<()> {
    let stack = cluster.stack(&args.stack).await?;
    let updates = cluster.updates(&args.stack).await?;
    let rows = history(&updates, &stack.stack.uid().unwrap_or_default());
    if let Some(text) = structured(&rows, args.output)? {
        print!("{text}");
        return Ok(());
    }
    if rows.is_empty() {
        eprintln!("The Stack {} has no Updates kept.", args.stack);
        return Ok(());
    }
    let now = jiff::Timestamp::now();
    let cells: Vec<_> = rows.iter().map(|r| cells(r, now)).collect();
    print!("{}", table(&HEADERS, &cells, color()));
    Ok(())
}
