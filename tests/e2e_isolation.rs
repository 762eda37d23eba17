//! One tenant's hostile sources do not hurt the others: Stacks beside 30 Stacks whose remote
//! never answers deploy as fast as alone, and Flux artifacts built as tar bombs (a huge
//! unpacked size, too many entries) fail their Stack with a clear message. Apart from
//! e2e_hostile.rs so that its count of reconciles is not mixed with these Stacks'.

use std::io::Read;
use std::time::Duration;
use test_support::{kubectl, StackFixture};

/// A loopback listener that accepts and never answers.
fn listener() -> (u16, ()) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for mut stream in l.incoming().flatten() {
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf);
            held.push(stream);
        }
    });
    (port, ())
}

#[tokio::test]
async fn a_black_holed_remote_does_not_delay_other_stacks() {
    let f = StackFixture::new("blackhole").await;
    let program = "name: e2e\nruntime: yaml\nresources:\n  a:\n    type: standin:index:Record\n    properties: {value: x}\noutputs:\n  v: on-time\n";
    let sha = f.repo.commit(&[("Pulumi.yaml", program)], "v1");
    // 30 Stacks tracking branches of repositories on a server that accepts and never answers.
    // BLACKHOLE_STACKS=0 measures the same Stacks alone, for comparison.
    let dead_stacks: usize = std::env::var("BLACKHOLE_STACKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let (dead_port, _) = listener();
    let mut yaml = String::new();
    for i in 0..dead_stacks {
        yaml.push_str(
            &f.stack_yaml(&format!("dead-{i}"), "branch: main", "")
                .replace(
                    &f.url(),
                    &format!("http://127.0.0.1:{dead_port}/repo-{i}.git"),
                ),
        );
        yaml.push_str("---\n");
    }
    if !yaml.is_empty() {
        f.sn.ns.apply(&yaml);
    }
    // Let them take every slot they can.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let started = std::time::Instant::now();
    f.sn.ns
        .apply(&f.stack_yaml("pinned", &format!("commit: {sha}"), ""));
    // A Pulumi stack of its own: on `dev` with `pinned`, one of the two would wait for the
    // other's lock and its time to Ready would measure that, not the black-holed remotes.
    f.sn.ns
        .apply(&f.own_stack_yaml("tracking", "branch: main", ""));
    for name in ["pinned", "tracking"] {
        f.wait_stack_for(
            Duration::from_secs(120),
            name,
            "Ready",
            test_support::stack_ready,
        )
        .await;
        eprintln!(
            "{name}: Ready {:.1}s after it was applied, beside {dead_stacks} Stacks on a black-holed remote",
            started.elapsed().as_secs_f64()
        );
    }
    if dead_stacks == 0 {
        return;
    }
    // The dead ones say what they wait for (the branch is being read, or the read timed out),
    // and none has a result yet.
    let dead = f.stack("dead-0").await;
    let status = dead.status.clone().unwrap_or_default();
    let saying: Vec<(String, String)> = status
        .conditions
        .iter()
        .flatten()
        .filter(|c| c.status == "True" && (c.type_ == "Reconciling" || c.type_ == "Stalled"))
        .map(|c| (c.type_.clone(), c.reason.clone()))
        .collect();
    assert!(
        saying
            .iter()
            .any(|(t, r)| (t == "Reconciling" && r == "ResolvingSource")
                || (t == "Stalled" && r == "SourceUnavailable")),
        "{saying:?} in {status:?}"
    );
    assert!(status.last_update.is_none(), "{status:?}");
}

/// A tar.gz made by `tar czf` of `dir`'s content; returns `sha256:<hex>`.
fn tarball(out: &std::path::Path, dir: &std::path::Path) -> String {
    use sha2::Digest;
    let status = std::process::Command::new("tar")
        .args([
            "czf",
            out.to_str().unwrap(),
            "-C",
            dir.to_str().unwrap(),
            ".",
        ])
        .status()
        .expect("tar");
    assert!(status.success());
    let bytes = std::fs::read(out).unwrap();
    let hex: String = sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

#[tokio::test]
async fn flux_tar_bombs_are_refused_clearly() {
    kubectl(&[
        "apply",
        "--server-side",
        "-f",
        test_support::repo_root()
            .join("tests/fixtures/flux-source-crds.yaml")
            .to_str()
            .unwrap(),
    ]);
    kubectl(&[
        "wait",
        "--for=condition=established",
        "crd/gitrepositories.source.toolkit.fluxcd.io",
        "--timeout=60s",
    ]);
    let sn = test_support::StackNamespace::new("tarbomb").await;
    let ns = sn.ns.name.clone();
    let dir = std::env::temp_dir().join(format!("bombs-{ns}"));
    std::fs::create_dir_all(&dir).unwrap();
    let server = test_support::FileServer::start(dir.clone());
    let program = "name: e2e\nruntime: yaml\noutputs: {x: y}\n";
    // 1. 200 MiB of zeros (about 200 KiB compressed): over the 100 MiB unpack limit.
    let big = dir.join("big-src");
    std::fs::create_dir_all(&big).unwrap();
    std::fs::write(big.join("Pulumi.yaml"), program).unwrap();
    std::fs::File::create(big.join("zeros"))
        .unwrap()
        .set_len(200 * 1024 * 1024)
        .unwrap();
    // 2. More entries than allowed, each empty.
    let many = dir.join("many-src");
    std::fs::create_dir_all(many.join("d")).unwrap();
    std::fs::write(many.join("Pulumi.yaml"), program).unwrap();
    for i in 0..100_001 {
        std::fs::File::create(many.join("d").join(i.to_string())).unwrap();
    }
    let bombs = [
        ("big", tarball(&dir.join("big.tgz"), &big), "larger than"),
        ("many", tarball(&dir.join("many.tgz"), &many), "entries"),
    ];
    for (name, digest, _) in &bombs {
        sn.ns.apply(&format!(
            "apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\nmetadata: {{name: {name}}}\nspec: {{url: https://example.invalid/repo, interval: 1m}}\n"
        ));
        let patch = serde_json::json!({"status": {"artifact": {
            "path": format!("gitrepository/{name}.tgz"), "url": format!("{}/{name}.tgz", server.url),
            "revision": "main@sha1:1111111111111111111111111111111111111111", "digest": digest,
            "lastUpdateTime": "2026-01-01T00:00:00Z"
        }}});
        kubectl(&[
            "-n",
            &ns,
            "patch",
            "gitrepository",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch.to_string(),
        ]);
        sn.ns.apply(&format!(
            "apiVersion: pulumi.com/v1\nkind: Stack\nmetadata: {{name: {name}}}\nspec:\n  stack: dev\n  backend: {backend}\n  serviceAccountName: pulumi\n  envRefs:\n    PULUMI_CONFIG_PASSPHRASE: {{type: Secret, secret: {{name: passphrase, key: passphrase}}}}\n  fluxSource:\n    sourceRef: {{apiVersion: source.toolkit.fluxcd.io/v1, kind: GitRepository, name: {name}}}\n",
            backend = sn.backend_url
        ));
    }
    let stacks: kube::Api<pulumi_operator_api::Stack> =
        kube::Api::namespaced(sn.ns.client.clone(), &ns);
    for (name, _, why) in &bombs {
        let s = test_support::wait_for(Duration::from_secs(180), "the bomb refused", || async {
            stacks
                .get(name)
                .await
                .ok()
                .filter(|s| test_support::last_update(s).state.is_some())
        })
        .await;
        let last = test_support::last_update(&s);
        let message = last.message.clone().unwrap_or_default();
        assert_eq!(
            last.state,
            Some(pulumi_operator_api::StackUpdateStateMessage::Failed),
            "{name}: {message}"
        );
        assert!(message.contains(why), "{name}: {message}");
        eprintln!("{name}: {message}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
