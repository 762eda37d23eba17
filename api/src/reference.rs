//! The API reference (docs/api-reference.md), generated from the same CRDs as `crds/`, so
//! that what `kubectl explain` says and what the README links to can never disagree.

use crate::crd::{all, CrdError};
use serde_json::Value;

/// Where the reference is written, relative to the repository root.
pub const REFERENCE_FILE: &str = "docs/api-reference.md";

/// Renders the reference of every kind: one table of fields per kind, spec then status.
pub fn render() -> Result<String, CrdError> {
    let mut out = String::from(
        "<!-- Generated from the Rust types in api/ by `cargo run -p pulumi-operator-api --bin crdgen`. Do not edit. -->\n\
         # API reference\n\n\
         Every field of every kind, as the cluster knows it (`kubectl explain <kind>.<field>` prints the same text).\n\
         Field paths use `[]` for list items and `{}` for map values.\n\n",
    );
    for (_, crd) in all()? {
        let kind = &crd.spec.names.kind;
        let group = &crd.spec.group;
        out.push_str(&format!(
            "- [{kind} ({group})](#{}-{})\n",
            kind.to_lowercase(),
            group.replace('.', "")
        ));
    }
    out.push('\n');
    for (_, crd) in all()? {
        let kind = crd.spec.names.kind.clone();
        let group = crd.spec.group.clone();
        let Some(version) = crd.spec.versions.iter().find(|v| v.storage) else {
            continue;
        };
        let served: Vec<&str> = crd
            .spec
            .versions
            .iter()
            .filter(|v| v.served)
            .map(|v| v.name.as_str())
            .collect();
        let schema = version
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .map(serde_json::to_value)
            .transpose()
            .map_err(|e| CrdError(e.to_string()))?
            .unwrap_or(Value::Null);
        out.push_str(&format!("## {kind} ({group})\n\n"));
        out.push_str(&format!(
            "`apiVersion: {group}/{}` (served versions: {}; short names: {}; category: `{}`)\n\n",
            version.name,
            served.join(", "),
            crd.spec
                .names
                .short_names
                .clone()
                .unwrap_or_default()
                .join(", "),
            crd.spec
                .names
                .categories
                .clone()
                .unwrap_or_default()
                .join(", "),
        ));
        if let Some(d) = schema.get("description").and_then(Value::as_str) {
            out.push_str(&format!("{}\n\n", d.trim()));
        }
        out.push_str("| Field | Type | Description |\n|---|---|---|\n");
        let props = schema.get("properties").and_then(Value::as_object);
        for (name, sub) in props.into_iter().flatten() {
            if matches!(name.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            walk(&mut out, name, sub, 0);
        }
        out.push('\n');
    }
    Ok(out)
}

fn type_of(schema: &Value) -> String {
    let t = schema.get("type").and_then(Value::as_str).unwrap_or("");
    let base = match t {
        "array" => format!("[]{}", schema.get("items").map(type_of).unwrap_or_default()),
        "object" if schema.get("properties").is_none() => {
            match schema.get("additionalProperties") {
                Some(v) => format!("map[string]{}", type_of(v)),
                None => "object".into(),
            }
        }
        "" if schema.get("x-kubernetes-preserve-unknown-fields").is_some() => "any JSON".into(),
        "" if schema.get("x-kubernetes-int-or-string").is_some() => "int or string".into(),
        other => other.into(),
    };
    match schema.get("enum").and_then(Value::as_array) {
        Some(values) => {
            let v: Vec<String> = values
                .iter()
                .filter_map(Value::as_str)
                .map(|s| format!("`{s}`"))
                .collect();
            format!("{base} ({})", v.join(", "))
        }
        None => base,
    }
}

fn escape(text: &str) -> String {
    text.trim()
        .replace('|', "\\|")
        .replace("\n\n", "<br><br>")
        .replace('\n', " ")
}

fn walk(out: &mut String, path: &str, schema: &Value, depth: usize) {
    let description = schema
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("");
    out.push_str(&format!(
        "| `{path}` | {} | {} |\n",
        type_of(schema),
        escape(description)
    ));
    if depth > 12 {
        return;
    }
    let (children, prefix) = match schema.get("type").and_then(Value::as_str) {
        Some("array") => match schema.get("items") {
            Some(items) => (
                items.get("properties").and_then(Value::as_object),
                format!("{path}[]"),
            ),
            None => (None, String::new()),
        },
        Some("object") => match (schema.get("properties"), schema.get("additionalProperties")) {
            (Some(p), _) => (p.as_object(), path.to_string()),
            (None, Some(v)) => (
                v.get("properties").and_then(Value::as_object),
                format!("{path}{{}}"),
            ),
            _ => (None, String::new()),
        },
        _ => (None, String::new()),
    };
    for (name, sub) in children.into_iter().flatten() {
        walk(out, &format!("{prefix}.{name}"), sub, depth + 1);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn reference_covers_every_kind_and_documents_reclaim_policy() {
        let text = super::render().unwrap();
        for kind in [
            "## Stack (pulumi.com)",
            "## Program (pulumi.com)",
            "## Workspace (auto.pulumi.com)",
            "## Update (auto.pulumi.com)",
        ] {
            assert!(text.contains(kind), "missing {kind}");
        }
        let line = text
            .lines()
            .find(|l| l.starts_with("| `spec.workspaceReclaimPolicy`"))
            .unwrap();
        assert!(
            line.contains("`Retain`") && line.contains("Delete"),
            "{line}"
        );
    }
}
