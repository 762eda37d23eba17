//! The monitoring that ships with the operator (docs/monitoring.md), checked without a cluster:
//! the alerting rules load in the real `promtool` and pass their unit tests (tests/alerts/, every
//! alert firing and not firing); the chart's PrometheusRule, rendered by the real `helm`, and
//! the kustomize component carry the rules of `charts/pulumi-operator/files/prometheus-rules.yaml`
//! and its dashboard; every dashboard query is valid PromQL; every metric they use is documented.
//! `promtool` and `helm` are built by tests/build-tools.sh. What Prometheus makes of them against
//! the running operator: tests/e2e_prometheus.rs.

use serde_norway::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use test_support::repo_root as root;

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn yaml(path: &str) -> Value {
    serde_norway::from_str(&read(&root().join(path))).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn json(text: &str, what: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{what} is not JSON: {e}"))
}

const RULES: &str = "charts/pulumi-operator/files/prometheus-rules.yaml";
const DASHBOARD: &str = "charts/pulumi-operator/files/grafana-dashboard.json";
const COMPONENT: &str = "kustomize/components/monitoring";

/// Runs a tool built by tests/build-tools.sh from the repository's root; (success, output).
fn tool(name: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(test_support::tool(name))
        .args(args)
        .current_dir(root())
        .env(
            "HELM_CACHE_HOME",
            std::env::temp_dir().join("monitoring-helm"),
        )
        .env(
            "HELM_CONFIG_HOME",
            std::env::temp_dir().join("monitoring-helm"),
        )
        .env(
            "HELM_DATA_HOME",
            std::env::temp_dir().join("monitoring-helm"),
        )
        .output()
        .unwrap_or_else(|e| panic!("run {name}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn documents(text: &str) -> Vec<Value> {
    text.split("\n---")
        .filter_map(|doc| serde_norway::from_str::<Value>(doc).ok())
        .filter(|v| !v.is_null())
        .collect()
}

/// The chart rendered as the release `pulumi-operator` in namespace `pulumi-operator`.
fn helm_template(sets: &[&str]) -> Vec<Value> {
    let mut args = vec![
        "template",
        "pulumi-operator",
        "charts/pulumi-operator",
        "--namespace",
        "pulumi-operator",
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    let (ok, out) = tool("helm", &args);
    assert!(ok, "helm {}:\n{out}", args.join(" "));
    documents(&out)
}

fn of_kind(docs: &[Value], kind: &str) -> Value {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind))
        .unwrap_or_else(|| panic!("no {kind} rendered"))
        .clone()
}

fn rules_of(groups: &Value) -> Vec<Value> {
    let groups = groups.as_sequence().expect("groups");
    groups
        .iter()
        .flat_map(|g| g["rules"].as_sequence().cloned().unwrap_or_default())
        .collect()
}

/// Writes `{groups: ...}` to a temporary file and runs `promtool check rules` on it.
fn check_rules(groups: &Value, name: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(format!("{name}.yaml"));
    let mut file = serde_norway::Mapping::new();
    file.insert("groups".into(), groups.clone());
    std::fs::write(&path, serde_norway::to_string(&file).expect("yaml")).expect("write");
    let (ok, out) = tool("promtool", &["check", "rules", &path.to_string_lossy()]);
    assert!(ok, "promtool check rules ({name}):\n{out}");
}

#[test]
fn the_rules_load_and_every_alert_is_tested_firing_and_not_firing() {
    let (ok, out) = tool("promtool", &["check", "rules", RULES]);
    assert!(ok, "promtool check rules {RULES}:\n{out}");
    let mut tests: Vec<String> = std::fs::read_dir(root().join("tests/alerts"))
        .expect("tests/alerts")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.to_string_lossy().ends_with(".test.yaml"))
        .map(|p| {
            p.strip_prefix(root())
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    tests.sort();
    let mut args = vec!["test", "rules"];
    args.extend(tests.iter().map(String::as_str));
    let (ok, out) = tool("promtool", &args);
    assert!(ok, "promtool test rules:\n{out}");
    eprintln!("{out}");

    // alert → (tested firing, tested not firing)
    let mut seen: BTreeMap<String, (bool, bool)> = BTreeMap::new();
    for test in &tests {
        for case in yaml(test)["tests"].as_sequence().expect("tests") {
            for check in case["alert_rule_test"].as_sequence().into_iter().flatten() {
                let name = check["alertname"].as_str().expect("alertname").to_string();
                let firing = check["exp_alerts"]
                    .as_sequence()
                    .is_some_and(|a| !a.is_empty());
                let entry = seen.entry(name).or_default();
                entry.0 |= firing;
                entry.1 |= !firing;
            }
        }
    }
    for rule in rules_of(&yaml(RULES)["groups"]) {
        let alert = rule["alert"].as_str().expect("every rule is an alert");
        assert_eq!(
            seen.get(alert),
            Some(&(true, true)),
            "{alert} must be tested both firing and not firing in tests/alerts/"
        );
        for key in ["summary", "description", "runbook_url"] {
            assert!(
                rule["annotations"][key].as_str().is_some(),
                "{alert} has no {key}"
            );
        }
        let description = rule["annotations"]["description"].as_str().unwrap();
        assert!(
            description.contains("kubectl"),
            "{alert}'s description says what to run"
        );
    }
}

#[test]
fn the_chart_and_the_kustomize_component_ship_the_same_rules() {
    let source = yaml(RULES)["groups"].clone();
    let component = documents(&read(&root().join(COMPONENT).join("prometheusrule.yaml")));
    assert_eq!(
        of_kind(&component, "PrometheusRule")["spec"]["groups"],
        source,
        "{COMPONENT}/prometheusrule.yaml must carry the rules of {RULES}: copy them"
    );
    assert!(
        helm_template(&[])
            .iter()
            .all(|d| d["kind"].as_str() != Some("PrometheusRule")),
        "the PrometheusRule is off by default"
    );
    let chart = helm_template(&["prometheusRule.enabled=true"]);
    let rule = of_kind(&chart, "PrometheusRule");
    assert_eq!(
        rule["spec"]["groups"], source,
        "the chart's PrometheusRule with the default values must be {RULES} (the defaults of \
         prometheusRule.for are the file's)"
    );
    assert_eq!(
        rule["metadata"]["namespace"].as_str(),
        Some("pulumi-operator")
    );
}

#[test]
fn the_chart_values_set_thresholds_job_labels_and_which_alerts() {
    let docs = helm_template(&[
        "prometheusRule.enabled=true",
        "prometheusRule.for.PulumiStackStalled=1m",
        "prometheusRule.job=monitoring/pulumi",
        "prometheusRule.additionalLabels.team=platform",
        "prometheusRule.disabled={PulumiStackDrifted}",
        "prometheusRule.labels.release=kube-prometheus-stack",
    ]);
    let rule = of_kind(&docs, "PrometheusRule");
    assert_eq!(
        rule["metadata"]["labels"]["release"].as_str(),
        Some("kube-prometheus-stack")
    );
    let rules = rules_of(&rule["spec"]["groups"]);
    let by_name = |name: &str| {
        rules
            .iter()
            .find(|r| r["alert"].as_str() == Some(name))
            .cloned()
    };
    assert!(by_name("PulumiStackDrifted").is_none(), "disabled");
    assert_eq!(
        by_name("PulumiStackStalled").unwrap()["for"].as_str(),
        Some("1m")
    );
    assert_eq!(
        by_name("PulumiStackFailing").unwrap()["for"].as_str(),
        Some("30m")
    );
    for name in ["PulumiOperatorDown", "PulumiOperatorNotLeading"] {
        let expr = by_name(name).unwrap()["expr"].as_str().unwrap().to_string();
        assert!(expr.contains("job=\"monitoring/pulumi\""), "{name}: {expr}");
    }
    for r in &rules {
        assert_eq!(r["labels"]["team"].as_str(), Some("platform"), "{r:?}");
        assert!(r["labels"]["severity"].as_str().is_some(), "{r:?}");
    }
    check_rules(&rule["spec"]["groups"], "rendered-with-values");
}

/// Every PromQL expression of the dashboard, with Grafana's variables replaced.
fn dashboard_queries(dashboard: &serde_json::Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("expr");
            let title = panel["title"].as_str().unwrap_or_default().to_string();
            out.push((title, grafana_to_promql(expr)));
        }
    }
    out
}

/// The expression as Grafana sends it with every job and namespace selected.
fn grafana_to_promql(expr: &str) -> String {
    expr.replace("$__rate_interval", "2m")
        .replace("$job", ".*")
        .replace("$namespace", ".*")
}

#[test]
fn the_dashboard_is_the_same_everywhere_and_its_queries_are_valid() {
    let source = json(&read(&root().join(DASHBOARD)), DASHBOARD);
    let copy = json(
        &read(&root().join(COMPONENT).join("grafana-dashboard.json")),
        "the component's copy",
    );
    assert_eq!(
        copy, source,
        "{COMPONENT}/grafana-dashboard.json must equal {DASHBOARD}: copy it"
    );
    let documented = json(
        &read(&root().join("docs/grafana-dashboard.json")),
        "the copy under docs/",
    );
    assert_eq!(
        documented, source,
        "docs/grafana-dashboard.json must equal {DASHBOARD}: copy it"
    );
    let docs = helm_template(&["grafanaDashboard.enabled=true"]);
    let map = of_kind(&docs, "ConfigMap");
    assert_eq!(
        map["metadata"]["labels"]["grafana_dashboard"].as_str(),
        Some("1")
    );
    let rendered = map["data"]["pulumi-operator.json"].as_str().expect("data");
    assert_eq!(json(rendered, "the chart's ConfigMap"), source);
    assert!(
        read(&root().join(COMPONENT).join("kustomization.yaml")).contains("grafana-dashboard.json")
    );

    let mut ids = BTreeSet::new();
    for panel in source["panels"].as_array().expect("panels") {
        assert!(
            ids.insert(panel["id"].as_i64().expect("id")),
            "duplicate id"
        );
        if panel["type"] == "row" {
            continue;
        }
        let title = panel["title"].as_str().expect("title");
        assert!(
            panel["description"].as_str().is_some(),
            "{title}: description"
        );
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}");
        let (x, w) = (&panel["gridPos"]["x"], &panel["gridPos"]["w"]);
        assert!(x.as_i64().unwrap() + w.as_i64().unwrap() <= 24, "{title}");
    }
    // Each query as a recording rule: promtool parses every expression.
    let queries = dashboard_queries(&source);
    let rules: Vec<Value> = queries
        .iter()
        .enumerate()
        .map(|(i, (_, expr))| {
            serde_norway::from_str(&format!(
                "{{record: dashboard_query_{i}, expr: {}}}",
                serde_json::to_string(expr).unwrap()
            ))
            .unwrap()
        })
        .collect();
    let groups: Value = serde_norway::from_str(&format!(
        "[{{name: dashboard, rules: {}}}]",
        serde_json::to_string(&rules).unwrap()
    ))
    .unwrap();
    check_rules(&groups, "dashboard-queries");
    eprintln!("{} dashboard queries parse", queries.len());
}

/// The metric names an expression uses (histogram series by their family's name).
fn metric_names(expr: &str) -> BTreeSet<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| {
            ["pulumi_operator_", "stacks_", "programs_", "process_"]
                .iter()
                .any(|p| w.starts_with(p))
        })
        .map(|w| {
            ["_bucket", "_count", "_sum"]
                .iter()
                .fold(w.to_string(), |w, s| {
                    w.strip_suffix(s).map(str::to_string).unwrap_or(w)
                })
        })
        .collect()
}

#[test]
fn every_metric_the_dashboard_and_the_alerts_use_is_documented() {
    let docs = read(&root().join("docs/monitoring.md"));
    let mut used = BTreeSet::new();
    for (_, expr) in dashboard_queries(&json(&read(&root().join(DASHBOARD)), DASHBOARD)) {
        used.extend(metric_names(&expr));
    }
    for rule in rules_of(&yaml(RULES)["groups"]) {
        used.extend(metric_names(rule["expr"].as_str().expect("expr")));
        let alert = rule["alert"].as_str().unwrap();
        assert!(
            docs.contains(&format!("### {alert}")),
            "docs/monitoring.md has no section for {alert} (its runbook_url points there)"
        );
    }
    let missing: Vec<_> = used
        .iter()
        .filter(|m| !docs.contains(&format!("`{m}")))
        .collect();
    assert!(missing.is_empty(), "not in docs/monitoring.md: {missing:?}");
    assert!(used.len() > 20, "{used:?}");
}

/// `a` relative to `b` (both absolute): `../..` up to their common part, then down to `a`.
fn relative_to(a: &Path, b: &Path) -> PathBuf {
    let (a, b): (Vec<_>, Vec<_>) = (a.components().collect(), b.components().collect());
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut out: PathBuf = b[common..].iter().map(|_| "..").collect();
    out.extend(&a[common..]);
    out
}

#[test]
fn the_kustomize_component_builds_on_the_base() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("monitoring-overlay");
    std::fs::create_dir_all(&dir).expect("overlay dir");
    let dir = dir.canonicalize().expect("canonical");
    let repo = root().canonicalize().expect("canonical root");
    let to_repo = relative_to(&repo, &dir);
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            "resources: [{0}/kustomize/base]\ncomponents: [{0}/{COMPONENT}]\n",
            to_repo.display()
        ),
    )
    .expect("write overlay");
    let out = Command::new("kubectl")
        .args(["kustomize", &dir.to_string_lossy()])
        .output()
        .expect("kubectl kustomize");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs = documents(&text);
    for kind in ["ServiceMonitor", "PrometheusRule", "ConfigMap"] {
        let doc = of_kind(&docs, kind);
        assert_eq!(
            doc["metadata"]["namespace"].as_str(),
            Some("pulumi-operator"),
            "{kind}"
        );
    }
    let service = docs
        .iter()
        .find(|d| d["kind"] == "Service")
        .expect("the metrics Service");
    assert_eq!(
        service["metadata"]["name"].as_str(),
        Some("pulumi-operator-metrics"),
        "the job the operator's alerts watch"
    );
    let monitor = of_kind(&docs, "ServiceMonitor");
    assert_eq!(
        monitor["spec"]["endpoints"][0]["port"],
        service["spec"]["ports"][0]["name"]
    );
    let map = of_kind(&docs, "ConfigMap");
    let data = map["data"]["pulumi-operator.json"].as_str().expect("data");
    assert_eq!(
        json(data, "the component's ConfigMap"),
        json(&read(&root().join(DASHBOARD)), DASHBOARD)
    );
}
