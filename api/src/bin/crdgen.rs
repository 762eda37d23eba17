//! Writes the CRD YAML files (and their kustomization) generated from the API types.
//!
//! Usage (from the repository root): `cargo run -p pulumi-operator-api --bin crdgen` writes
//! `crds/`, the Helm chart's copy (`charts/pulumi-operator/crds/`) and
//! `docs/api-reference.md`; `... --bin crdgen -- DIR` writes only the CRDs to DIR.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "crds".into()));
    let files = match pulumi_operator_api::crd::rendered_files() {
        Ok(files) => files,
        Err(e) => {
            eprintln!("crdgen: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("crdgen: creating {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    for (name, contents) in files {
        let path = dir.join(&name);
        if let Err(e) = std::fs::write(&path, contents) {
            eprintln!("crdgen: writing {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {}", path.display());
    }
    if std::env::args().nth(1).is_none() {
        let chart = PathBuf::from("charts/pulumi-operator/crds");
        let files = pulumi_operator_api::crd::rendered_files().unwrap_or_default();
        for (name, contents) in files.iter().filter(|(name, _)| name.ends_with(".yaml")) {
            let path = chart.join(name);
            if let Err(e) = std::fs::write(&path, contents) {
                eprintln!("crdgen: writing {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
            println!("wrote {}", path.display());
        }
        let path = PathBuf::from(pulumi_operator_api::reference::REFERENCE_FILE);
        let written = pulumi_operator_api::reference::render()
            .map_err(|e| e.to_string())
            .and_then(|text| {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
                }
                std::fs::write(&path, text).map_err(|e| e.to_string())
            });
        if let Err(e) = written {
            eprintln!("crdgen: writing {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {}", path.display());
    }
    ExitCode::SUCCESS
}
