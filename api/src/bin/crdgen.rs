//! Writes the CRD YAML files (and their kustomization) generated from the API types.
//!
//! Usage (from the repository root): `cargo run -p pulumi-operator-api --bin crdgen -- crds/`

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
    ExitCode::SUCCESS
}
