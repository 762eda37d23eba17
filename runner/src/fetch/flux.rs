//! Flux artifacts: download a tar.gz over HTTP(S) (reqwest + rustls), check its `sha256:`
//! digest, unpack it with a size cap and without letting any entry escape the destination.

use crate::error::Failure;
use crate::redact;
use crate::report::log;
use pulumi_operator_api::backoff::Backoff;
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Component, Path};
use std::time::Duration;

/// The cap on the artifact's compressed and unpacked sizes.
pub const DEFAULT_MAX_BYTES: u64 = 100 * 1024 * 1024;

const ATTEMPTS: u32 = 4;

/// Why an artifact could not be fetched. URLs in messages are shown without user info.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("unsupported digest {0:?} (expected sha256:<hex>)")]
    UnsupportedDigest(String),
    #[error("malformed digest {0:?}")]
    MalformedDigest(String),
    #[error("{0}")]
    Client(reqwest::Error),
    /// The last attempt's failure, redacted.
    #[error("{0}")]
    Download(String),
    #[error("cannot create {}: {source}", .dir.display())]
    CreateDir {
        dir: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("not a tar.gz archive: {0}")]
    NotTarGz(std::io::Error),
    #[error("corrupt archive: {0}")]
    Corrupt(std::io::Error),
    #[error("the artifact has more than {MAX_ENTRIES} entries")]
    TooManyEntries,
    /// The entry's path, as shown.
    #[error("the archive entry {0:?} points outside the destination")]
    Outside(String),
    #[error("the archive entry {path:?} has an unsupported type {kind:?}")]
    UnsupportedType { path: String, kind: tar::EntryType },
    #[error("the unpacked artifact is larger than {0} bytes")]
    TooLarge(u64),
    #[error("cannot unpack {path:?}: {error}")]
    Unpack { path: String, error: std::io::Error },
}

/// The hex SHA-256 of a `sha256:<hex>` digest.
pub fn parse_digest(digest: &str) -> Result<String, ArtifactError> {
    let hex = digest
        .strip_prefix("sha256:")
        .ok_or_else(|| ArtifactError::UnsupportedDigest(digest.to_string()))?
        .to_ascii_lowercase();
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ArtifactError::MalformedDigest(digest.to_string()));
    }
    Ok(hex)
}

/// Downloads `url` into `scratch`, verifies `digest`, unpacks into `dest`.
pub fn fetch(
    url: &str,
    digest: &str,
    dest: &Path,
    scratch: &Path,
    max_bytes: u64,
) -> Result<(), Failure> {
    let shown = redact::urls(url);
    let fail = |detail: &dyn std::fmt::Display| {
        Failure::source_unavailable(format!(
            "cannot fetch the artifact {shown} ({digest}): {detail}"
        ))
    };
    let want = parse_digest(digest).map_err(|e| fail(&e))?;
    let file = scratch.join("artifact.tar.gz");
    log(format!("downloading {shown}"));
    let got = download_with_retries(url, &file, max_bytes).map_err(|e| fail(&e))?;
    if got != want {
        let _ = std::fs::remove_file(&file);
        return Err(fail(&format!(
            "digest mismatch: the download has sha256:{got}"
        )));
    }
    let reader = std::fs::File::open(&file).map_err(|e| fail(&e))?;
    let unpacked = unpack(reader, dest, max_bytes).map_err(|e| fail(&e));
    let _ = std::fs::remove_file(&file);
    unpacked?;
    log(format!("unpacked {digest}"));
    Ok(())
}

/// Unpacks a tar.gz handed over in the plan (base64) into `dest`, once its digest checks out.
pub fn unpack_inline(digest: &str, archive: &str, dest: &Path) -> Result<(), String> {
    use base64::Engine;
    let want = parse_digest(digest).map_err(|e| e.to_string())?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(archive.trim())
        .map_err(|e| format!("the archive in the plan is not base64: {e}"))?;
    let got = hex(&sha2::Sha256::digest(&bytes));
    if got != want {
        return Err(format!(
            "digest mismatch: the archive in the plan has sha256:{got}, the plan says {digest}"
        ));
    }
    unpack(bytes.as_slice(), dest, DEFAULT_MAX_BYTES).map_err(|e| e.to_string())
}

fn download_with_retries(url: &str, file: &Path, max_bytes: u64) -> Result<String, ArtifactError> {
    let client = reqwest::blocking::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        .timeout(Duration::from_secs(15 * 60))
        .build()
        .map_err(ArtifactError::Client)?;
    let backoff = Backoff::new(Duration::from_secs(1), 2.0, Duration::from_secs(30));
    let mut attempt = 1;
    loop {
        match download(&client, url, file, max_bytes) {
            Ok(hex) => return Ok(hex),
            Err(e) if e.retryable() && attempt < ATTEMPTS => {
                let delay = backoff.after(attempt);
                log(format!(
                    "download attempt {attempt} of {ATTEMPTS} failed ({}); retrying in {}s",
                    redact::urls(&e.to_string()),
                    delay.as_secs()
                ));
                std::thread::sleep(delay);
                attempt += 1;
            }
            Err(e) => return Err(ArtifactError::Download(redact::urls(&e.to_string()))),
        }
    }
}

/// Why one download failed (before redaction).
#[derive(Debug, thiserror::Error)]
enum DownloadError {
    #[error("{}", crate::error::chain(.0))]
    Request(reqwest::Error),
    #[error("HTTP {0}")]
    Status(reqwest::StatusCode),
    #[error("the artifact is larger than {0} bytes")]
    TooLarge(u64),
    #[error("{}", crate::error::chain(.0))]
    Read(std::io::Error),
    #[error("{0}")]
    File(std::io::Error),
}

impl DownloadError {
    /// Whether another attempt may help: network trouble, a server error, throttling.
    fn retryable(&self) -> bool {
        match self {
            DownloadError::Request(_) | DownloadError::Read(_) => true,
            DownloadError::Status(status) => status.is_server_error() || status.as_u16() == 429,
            DownloadError::TooLarge(_) | DownloadError::File(_) => false,
        }
    }
}

/// One download.
fn download(
    client: &reqwest::blocking::Client,
    url: &str,
    file: &Path,
    max_bytes: u64,
) -> Result<String, DownloadError> {
    let mut response = client.get(url).send().map_err(DownloadError::Request)?;
    let status = response.status();
    if !status.is_success() {
        return Err(DownloadError::Status(status));
    }
    if response.content_length().is_some_and(|n| n > max_bytes) {
        return Err(DownloadError::TooLarge(max_bytes));
    }
    let mut out = std::fs::File::create(file).map_err(DownloadError::File)?;
    let mut hasher = Sha256::new();
    let mut total: u64 = 0;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = response.read(&mut buf).map_err(DownloadError::Read)?;
        if n == 0 {
            break;
        }
        total += n as u64;
        if total > max_bytes {
            return Err(DownloadError::TooLarge(max_bytes));
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(DownloadError::File)?;
    }
    out.flush().map_err(DownloadError::File)?;
    Ok(hex(&hasher.finalize()))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The most entries an artifact may hold.
pub const MAX_ENTRIES: u64 = 100_000;

/// Unpacks a tar.gz stream into `dest`. Only files, directories and links are allowed; every
/// entry must have a relative path without `..`; the declared sizes may add up to `max_bytes`.
pub fn unpack(reader: impl Read, dest: &Path, max_bytes: u64) -> Result<(), ArtifactError> {
    std::fs::create_dir_all(dest).map_err(|source| ArtifactError::CreateDir {
        dir: dest.to_path_buf(),
        source,
    })?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(reader));
    archive.set_overwrite(true);
    archive.set_preserve_permissions(false);
    archive.set_unpack_xattrs(false);
    let mut total: u64 = 0;
    let mut count: u64 = 0;
    let entries = archive.entries().map_err(ArtifactError::NotTarGz)?;
    for entry in entries {
        let mut entry = entry.map_err(ArtifactError::Corrupt)?;
        // A bomb of empty entries costs inodes, not bytes.
        count += 1;
        if count > MAX_ENTRIES {
            return Err(ArtifactError::TooManyEntries);
        }
        let path = entry.path().map_err(ArtifactError::Corrupt)?.into_owned();
        let shown = path.display().to_string();
        if path
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(ArtifactError::Outside(shown));
        }
        use tar::EntryType::*;
        match entry.header().entry_type() {
            Regular | Continuous | Directory | Symlink | Link | GNUSparse => {}
            XGlobalHeader | XHeader | GNULongName | GNULongLink => continue,
            other => {
                return Err(ArtifactError::UnsupportedType {
                    path: shown,
                    kind: other,
                })
            }
        }
        total = total.saturating_add(entry.header().size().unwrap_or(0));
        if total > max_bytes {
            return Err(ArtifactError::TooLarge(max_bytes));
        }
        let inside = entry
            .unpack_in(dest)
            .map_err(|error| ArtifactError::Unpack {
                path: shown.clone(),
                error,
            })?;
        if !inside {
            return Err(ArtifactError::Outside(shown));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_gz(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        let mut b = tar::Builder::new(enc);
        for (name, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            // set_path refuses `..`; write the raw name to build hostile archives.
            let raw = &mut h.as_old_mut().name;
            raw[..name.len()].copy_from_slice(name.as_bytes());
            h.set_cksum();
            b.append(&h, *data).unwrap();
        }
        b.into_inner().unwrap().finish().unwrap()
    }

    #[test]
    fn digests() {
        assert_eq!(
            parse_digest(&format!("sha256:{}", "A".repeat(64))).unwrap(),
            "a".repeat(64)
        );
        assert!(parse_digest("sha1:abc").is_err());
        assert!(parse_digest("sha256:xyz").is_err());
        assert_eq!(
            hex(&Sha256::digest(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn unpacks_files() {
        let dir = tempfile::tempdir().unwrap();
        let data = tar_gz(&[
            ("app/Pulumi.yaml", b"name: a\nruntime: yaml\n"),
            ("README", b"x"),
        ]);
        unpack(&data[..], dir.path(), 1024).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("app/Pulumi.yaml")).unwrap(),
            "name: a\nruntime: yaml\n"
        );
    }

    #[test]
    fn rejects_traversal_and_oversize() {
        let dir = tempfile::tempdir().unwrap();
        let evil = tar_gz(&[("../evil", b"x")]);
        let e = unpack(&evil[..], &dir.path().join("d"), 1024)
            .unwrap_err()
            .to_string();
        assert!(e.contains("outside"), "{e}");
        assert!(!dir.path().join("evil").exists());
        let evil = tar_gz(&[("/abs", b"x")]);
        assert!(unpack(&evil[..], &dir.path().join("d"), 1024).is_err());
        let names: Vec<String> = (0..=MAX_ENTRIES).map(|i| format!("f{i}")).collect();
        let many: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b""[..])).collect();
        let e = unpack(&tar_gz(&many)[..], &dir.path().join("many"), 1024)
            .unwrap_err()
            .to_string();
        assert!(e.contains("entries"), "{e}");
        let big = tar_gz(&[("a", &[0u8; 2048])]);
        let e = unpack(&big[..], &dir.path().join("d"), 1024)
            .unwrap_err()
            .to_string();
        assert!(e.contains("larger"), "{e}");
        let e = unpack(&b"not gzip"[..], &dir.path().join("d"), 1024)
            .unwrap_err()
            .to_string();
        assert!(e.contains("archive"), "{e}");
    }

    #[test]
    fn a_pack_handed_over_in_the_plan_unpacks_only_with_its_digest() {
        use base64::Engine;
        let bytes = tar_gz(&[("PulumiPolicy.yaml", b"runtime: nodejs\n")]);
        let digest = format!("sha256:{}", hex(&Sha256::digest(&bytes)));
        let text = base64::engine::general_purpose::STANDARD.encode(&bytes);
        let dir = tempfile::tempdir().unwrap();
        unpack_inline(&digest, &text, dir.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("PulumiPolicy.yaml")).unwrap(),
            "runtime: nodejs\n"
        );
        let other = tar_gz(&[("PulumiPolicy.yaml", b"runtime: python\n")]);
        let swapped = base64::engine::general_purpose::STANDARD.encode(&other);
        let e = unpack_inline(&digest, &swapped, tempfile::tempdir().unwrap().path()).unwrap_err();
        assert!(e.contains("digest mismatch"), "{e}");
    }
}
