//! Writes the CRD YAML files (and their kustomization) generated from the API types.
//!
//! Usage (from the repository root): `cargo run -p pulumi-operator-api --bin crdgen` writes
//! `crds/` and `docs/api-reference.md`; `... --bin crdgen -- DIR` writes only the CRDs to DIR.

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
