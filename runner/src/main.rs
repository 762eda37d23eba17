//! The runner: runs inside every update Job. Its stages (bootstrap, fetch, run) arrive with
//! the core-loop issue; for now it answers `--version`, which the operator's install uses to
//! check that the runner image runs.

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--version") | Some("version") => {
            println!("pulumi-runner {}", env!("CARGO_PKG_VERSION"));
            std::process::ExitCode::SUCCESS
        }
        _ => {
            eprintln!(
                "pulumi-runner {}: usage: pulumi-runner --version",
                env!("CARGO_PKG_VERSION")
            );
            std::process::ExitCode::from(2)
        }
    }
}
