//! The code's layout, checked (issue 27): no import cycle between files or between folders of
//! any crate, the shared `runtime` layer of the operator imports no controller, and no product
//! function is longer than 80 lines. Read from the `crate::` paths the product code names (test
//! modules excluded, `mod tests` and files named `*_tests.rs`: a test may build its fixtures with
//! a higher layer's builders).
//! `tests/code-shape.py` prints the same figures as a report.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use test_support::repo_root as root;

const CRATES: [(&str, &str); 5] = [
    ("operator", "src"),
    ("runner", "runner/src"),
    ("api", "api/src"),
    ("gitauth", "gitauth/src"),
    ("plugin", "plugin/src"),
];
/// The operator's folders that hold a controller or what only controllers use.
const ABOVE_RUNTIME: [&str; 6] = [
    "stack",
    "update",
    "workspace",
    "program",
    "source",
    "controllers",
];
const MAX_FUNCTION_LINES: usize = 80;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs")
            && !path.to_string_lossy().ends_with("_tests.rs")
        {
            out.push(path);
        }
    }
}

/// The file's lines up to its `#[cfg(test)] mod tests`.
fn product_lines(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.split('\n').collect();
    let end = (0..lines.len())
        .find(|&i| {
            lines[i].trim() == "#[cfg(test)]"
                && lines.get(i + 1).is_some_and(|l| l.starts_with("mod tests"))
        })
        .unwrap_or(lines.len());
    lines[..end].to_vec()
}

fn code_of(line: &str) -> &str {
    line.split("//").next().unwrap_or("")
}

/// `a::b` for `<crate dir>/a/b.rs` and `<crate dir>/a/b/mod.rs`; "" for the crate root.
fn module_of(crate_dir: &Path, file: &Path) -> String {
    let rel = file
        .strip_prefix(crate_dir)
        .unwrap_or(file)
        .with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts
        .last()
        .is_some_and(|p| p == "mod" || p == "lib" || p == "main")
    {
        parts.pop();
    }
    parts.join("::")
}

/// The `crate::…` paths a text names.
fn crate_paths(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + "crate::".len()..];
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(rest.len());
        out.insert(rest[..end].trim_end_matches(':').to_string());
    }
    out
}

/// Strongly connected components with more than one member.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    fn reaches(
        edges: &BTreeMap<String, BTreeSet<String>>,
        from: &str,
        to: &str,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        edges
            .get(from)
            .into_iter()
            .flatten()
            .any(|next| next == to || (seen.insert(next.clone()) && reaches(edges, next, to, seen)))
    }
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut placed = BTreeSet::new();
    for a in edges.keys() {
        if placed.contains(a) || !reaches(edges, a, a, &mut BTreeSet::new()) {
            continue;
        }
        let comp: Vec<String> = edges
            .keys()
            .filter(|b| {
                *b == a
                    || (reaches(edges, a, b, &mut BTreeSet::new())
                        && reaches(edges, b, a, &mut BTreeSet::new()))
            })
            .cloned()
            .collect();
        placed.extend(comp.iter().cloned());
        out.push(comp);
    }
    out
}

struct Graphs {
    files: BTreeMap<String, BTreeSet<String>>,
    folders: BTreeMap<String, BTreeSet<String>>,
}

fn graphs(crate_dir: &Path) -> Graphs {
    let mut files = Vec::new();
    rust_files(crate_dir, &mut files);
    let modules: BTreeMap<String, String> = files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            let code: Vec<&str> = product_lines(&text).into_iter().map(code_of).collect();
            (module_of(crate_dir, f), code.join("\n"))
        })
        .collect();
    let mut names: Vec<&String> = modules.keys().filter(|n| !n.is_empty()).collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    let mut g = Graphs {
        files: BTreeMap::new(),
        folders: BTreeMap::new(),
    };
    for (module, code) in &modules {
        for path in crate_paths(code) {
            let Some(target) = names
                .iter()
                .find(|n| path == ***n || path.starts_with(&format!("{n}::")))
            else {
                continue;
            };
            if *target == module {
                continue;
            }
            g.files
                .entry(module.clone())
                .or_default()
                .insert((*target).clone());
            let (a, b) = (top(module), top(target));
            if a != b {
                g.folders.entry(a).or_default().insert(b);
            }
        }
    }
    g
}

fn top(module: &str) -> String {
    module.split("::").next().unwrap_or("").to_string()
}

#[test]
fn no_import_cycle_between_files_or_folders() {
    let mut found = Vec::new();
    for (name, dir) in CRATES {
        let g = graphs(&root().join(dir));
        for (kind, edges) in [("file", &g.files), ("folder", &g.folders)] {
            for comp in cycles(edges) {
                found.push(format!("{name}: {kind} cycle: {}", comp.join(" <-> ")));
            }
        }
    }
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

#[test]
fn the_runtime_layer_imports_no_controller() {
    let g = graphs(&root().join("src"));
    let wrong: Vec<String> = g
        .files
        .iter()
        .filter(|(from, _)| top(from) == "runtime")
        .flat_map(|(from, to)| to.iter().map(move |t| (from, t)))
        .filter(|(_, to)| ABOVE_RUNTIME.contains(&top(to).as_str()))
        .map(|(from, to)| format!("{from} -> {to}"))
        .collect();
    assert!(wrong.is_empty(), "runtime imports: {wrong:?}");
    // The check sees real edges: the controllers do import the runtime.
    assert!(g.folders["stack"].contains("runtime"));
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    edges.entry("a".into()).or_default().insert("b".into());
    edges.entry("b".into()).or_default().insert("c".into());
    edges.entry("c".into()).or_default().insert("a".into());
    edges.entry("d".into()).or_default().insert("a".into());
    assert_eq!(cycles(&edges), vec![vec!["a", "b", "c"]]);
    if let Some(c) = edges.get_mut("c") {
        c.clear();
    }
    assert!(cycles(&edges).is_empty());
}

/// (name, first line, length) of each function, from its `fn` line to its closing brace.
fn functions(lines: &[&str]) -> Vec<(String, usize, usize)> {
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = fn_name(line) else { continue };
        let (mut depth, mut started) = (0i64, false);
        for (j, l) in lines.iter().enumerate().skip(i) {
            let code = strip_strings(code_of(l));
            depth += code.matches('{').count() as i64 - code.matches('}').count() as i64;
            started |= code.contains('{');
            if code.contains(';') && !started {
                break; // a declaration without a body
            }
            if started && depth <= 0 {
                out.push((name, i + 1, j - i + 1));
                break;
            }
        }
    }
    out
}

fn fn_name(line: &str) -> Option<String> {
    let mut words = line.split_whitespace().peekable();
    while let Some(w) = words.next() {
        match w {
            "pub" | "const" | "async" | "unsafe" => continue,
            w if w.starts_with("pub(") => continue,
            "fn" => {
                let name = words.next()?;
                let end = name
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(name.len());
                return Some(name[..end].to_string());
            }
            _ => return None,
        }
    }
    None
}

fn strip_strings(code: &str) -> String {
    let mut out = String::new();
    let (mut in_str, mut escaped) = (false, false);
    for c in code.chars() {
        if in_str {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_str = false,
                _ => {}
            }
        } else if c == '"' {
            in_str = true;
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn no_product_function_is_longer_than_80_lines() {
    let mut long = Vec::new();
    for (_, dir) in CRATES {
        let mut files = Vec::new();
        rust_files(&root().join(dir), &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            for (name, line, length) in functions(&product_lines(&text)) {
                if length > MAX_FUNCTION_LINES {
                    let rel = f.strip_prefix(root()).unwrap_or(&f).display().to_string();
                    long.push(format!("{length:4} {name} ({rel}:{line})"));
                }
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines:\n{}",
        long.join("\n")
    );
}

#[test]
fn the_length_measure_counts_from_fn_to_closing_brace() {
    let src = "pub async fn a(x: u8) -> u8 {\n    let s = \"{\";\n    x\n}\nfn b();\n";
    let lines: Vec<&str> = src.split('\n').collect();
    assert_eq!(functions(&lines), vec![("a".to_string(), 1, 4)]);
}

/// tests/Cargo.toml lists its test targets one by one (it turns off Cargo's discovery): a test
/// file it does not name would never compile or run.
#[test]
fn every_test_file_is_a_target_of_the_tests_package() {
    let manifest =
        std::fs::read_to_string(root().join("tests/Cargo.toml")).expect("tests/Cargo.toml");
    let mut files = Vec::new();
    for entry in std::fs::read_dir(root().join("tests")).expect("tests/") {
        let path = entry.expect("tests/ entry").path();
        if path.extension().is_some_and(|x| x == "rs") {
            files.push(
                path.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
    assert!(files.len() > 20, "only {} test files found", files.len());
    let missing: Vec<&String> = files
        .iter()
        .filter(|file| !manifest.contains(&format!("path = \"{file}\"")))
        .collect();
    assert!(
        missing.is_empty(),
        "tests/Cargo.toml has no [[test]] for {missing:?}: add one for each"
    );
}
