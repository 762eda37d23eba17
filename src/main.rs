//! The operator binary. Wiring comes with the API issue.
fn main() {
    println!("pulumi-operator: not wired yet");
}
