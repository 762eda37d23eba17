//! The runner; built in the core-loop issue.
fn main() {
    println!("pulumi-runner: not implemented yet");
}
