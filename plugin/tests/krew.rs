//! The krew manifest (plugin/krew/pulumi.yaml) names the archives the release workflow builds,
//! and plugin/krew/fill-manifest.sh fills every placeholder.

use std::path::PathBuf;
use std::process::Command;

const PLATFORMS: [(&str, &str); 4] = [
    ("linux", "amd64"),
    ("linux", "arm64"),
    ("darwin", "amd64"),
    ("darwin", "arm64"),
];

fn krew_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("krew")
}

fn parse(text: &str) -> serde_json::Value {
    serde_norway::from_str(text).expect("the manifest is YAML")
}

#[test]
fn the_manifest_is_a_krew_plugin_for_four_platforms() {
    let text = std::fs::read_to_string(krew_dir().join("pulumi.yaml")).expect("manifest");
    let m = parse(&text);
    assert_eq!(
        m["apiVersion"],
        "krew.googlecontainertools.github.com/v1alpha2"
    );
    assert_eq!(m["kind"], "Plugin");
    assert_eq!(m["metadata"]["name"], "pulumi");
    let platforms = m["spec"]["platforms"].as_array().expect("platforms");
    assert_eq!(platforms.len(), PLATFORMS.len());
    for (p, (os, arch)) in platforms.iter().zip(PLATFORMS) {
        assert_eq!(p["selector"]["matchLabels"]["os"], os);
        assert_eq!(p["selector"]["matchLabels"]["arch"], arch);
        let uri = p["uri"].as_str().expect("uri");
        assert!(
            uri.ends_with(&format!("/kubectl-pulumi-{os}-{arch}.tar.gz")),
            "{uri}"
        );
        assert_eq!(p["bin"], "kubectl-pulumi");
        let key = format!("SHA256_{}_{}", os.to_uppercase(), arch.to_uppercase());
        assert_eq!(p["sha256"], key.as_str());
    }
}

#[test]
fn the_release_fills_every_placeholder() {
    let dist = std::env::temp_dir().join(format!("krew-fill-{}", std::process::id()));
    std::fs::create_dir_all(&dist).expect("dist");
    for (os, arch) in PLATFORMS {
        let archive = dist.join(format!("kubectl-pulumi-{os}-{arch}.tar.gz"));
        std::fs::write(archive, format!("{os}-{arch}")).expect("archive");
    }
    let out = Command::new(krew_dir().join("fill-manifest.sh"))
        .args(["v1.2.3", "me/pulumi-operator-rs"])
        .arg(&dist)
        .output()
        .expect("run fill-manifest.sh");
    let _ = std::fs::remove_dir_all(&dist);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m = parse(&text);
    assert_eq!(m["spec"]["version"], "v1.2.3");
    let platforms = m["spec"]["platforms"].as_array().expect("platforms");
    for p in platforms {
        let sum = p["sha256"].as_str().expect("sha256");
        assert!(
            sum.len() == 64 && sum.bytes().all(|b| b.is_ascii_hexdigit()),
            "{sum}"
        );
        let uri = p["uri"].as_str().expect("uri");
        assert!(
            uri.starts_with("https://github.com/me/pulumi-operator-rs/releases/download/v1.2.3/"),
            "{uri}"
        );
    }
    assert!(
        !text.contains("REPOSITORY") && !text.contains("SHA256_"),
        "{text}"
    );
}
