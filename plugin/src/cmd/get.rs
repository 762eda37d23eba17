//! `kubectl pulumi get [stack] [-A] [-w]`.

use crate::cli::GetArgs;
use crate::cluster::{api_error, to_viewed, Cluster, STACKS};
use crate::cmd::color;
use crate::view::errors::Action;
use crate::view::format::{structured, table, Output};
use crate::view::rows::{cells, headers, row, StackRow};
use anyhow::{anyhow, Result};
use futures::{StreamExt, TryStreamExt};
use kube::api::ListParams;
use kube::runtime::{watcher, WatchStreamExt};
use std::collections::HashMap;

fn action<'a>(cluster: &'a Cluster, args: &'a GetArgs, verb: &'a str) -> Action<'a> {
    Action {
        verb,
        resource: STACKS,
        name: args.stack.as_deref(),
        namespace: (!args.all_namespaces).then_some(cluster.namespace.as_str()),
    }
}

async fn rows(cluster: &Cluster, args: &GetArgs) -> Result<Vec<StackRow>> {
    let api = cluster.stacks(args.all_namespaces);
    let objects = match &args.stack {
        Some(name) if !args.all_namespaces => vec![api
            .get(name)
            .await
            .map_err(|e| api_error(e, action(cluster, args, "get")))?],
        // A name across namespaces: every Stack of that name.
        named => {
            let mut params = ListParams::default();
            if let Some(name) = named {
                params = params.fields(&format!("metadata.name={name}"));
            }
            api.list(&params)
                .await
                .map_err(|e| api_error(e, action(cluster, args, "list")))?
                .items
        }
    };
    let mut rows = objects
        .into_iter()
        .map(|o| to_viewed(o).map(|v| row(&v)))
        .collect::<Result<Vec<_>>>()?;
    rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Ok(rows)
}

fn print_rows(rows: &[StackRow], args: &GetArgs, with_header: bool) -> Result<()> {
    if let Some(text) = structured(&rows, args.output)? {
        print!("{text}");
        return Ok(());
    }
    let now = jiff::Timestamp::now();
    let cells: Vec<_> = rows
        .iter()
        .map(|r| cells(r, args.all_namespaces, now))
        .collect();
    let text = table(&headers(args.all_namespaces), &cells, color());
    let skip = usize::from(!with_header);
    for line in text.lines().skip(skip) {
        println!("{line}");
    }
    Ok(())
}

/// Lists (and with `-w`, watches) Stacks.
pub async fn run(cluster: &Cluster, args: &GetArgs) -> Result<()> {
    let rows = rows(cluster, args).await?;
    if args.watch {
        return watch(cluster, args, rows).await;
    }
    if rows.is_empty() && args.output == Output::Table {
        match args.all_namespaces {
            true => eprintln!("No Stacks found."),
            false => eprintln!("No Stacks found in namespace {}.", cluster.namespace),
        }
        return Ok(());
    }
    print_rows(&rows, args, true)
}

fn one_line(row: &StackRow, args: &GetArgs) -> Result<()> {
    match args.output {
        Output::Table => print_rows(std::slice::from_ref(row), args, false),
        _ => {
            println!("{}", serde_json::to_string(row)?);
            Ok(())
        }
    }
}

async fn watch(cluster: &Cluster, args: &GetArgs, first: Vec<StackRow>) -> Result<()> {
    let json_lines = args.output != Output::Table;
    if json_lines {
        for r in &first {
            one_line(r, args)?;
        }
    } else {
        print_rows(&first, args, true)?;
    }
    let key = |r: &StackRow| format!("{}/{}", r.namespace, r.name);
    let mut seen: HashMap<String, String> =
        first.iter().map(|r| (key(r), format!("{r:?}"))).collect();
    let mut config = watcher::Config::default();
    if let Some(name) = &args.stack {
        config = config.fields(&format!("metadata.name={name}"));
    }
    let mut stream = watcher(cluster.stacks(args.all_namespaces), config)
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(object) = stream
        .try_next()
        .await
        .map_err(|e| anyhow!("watching Stacks: {e}"))?
    {
        let r = row(&to_viewed(object)?);
        let text = format!("{r:?}");
        if seen.insert(key(&r), text.clone()).as_ref() != Some(&text) {
            one_line(&r, args)?;
        }
    }
    Ok(())
}
