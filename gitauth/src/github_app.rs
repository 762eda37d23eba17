//! GitHub App authentication: a JWT (RS256, `iat` = now − 60 s, `exp` = now + 10 min,
//! `iss` = the app ID) signed with the app's private key (PKCS#1 or PKCS#8 PEM) is exchanged at
//! `POST {api}/app/installations/{id}/access_tokens` for an installation token (valid one hour),
//! which git sends as the password of the user `x-access-token`.
//!
//! `{api}` is `https://api.github.com` unless configured (GitHub Enterprise Server:
//! `https://HOST/api/v3`).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{RsaKeyPair, RSA_PKCS1_SHA256};
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::PrivateKeyDer;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Why a GitHub App's credentials could not become an installation token. Messages never
/// hold the private key; URLs in them are shown without user info.
#[derive(thiserror::Error, Debug)]
pub enum GitHubAppError {
    #[error("the GitHub App private key holds no PEM private key")]
    NoPemKey,
    #[error("the GitHub App private key is not valid PEM: {0}")]
    BadPem(pem::Error),
    #[error("the GitHub App private key is not an RSA key")]
    NotRsa,
    #[error("the GitHub App private key is not usable: {0}")]
    UnusableKey(ring::error::KeyRejected),
    #[error("the GitHub App ID is empty")]
    EmptyAppId,
    #[error("signing the GitHub App JWT failed")]
    Signing,
    /// The installation ID as shown (redacted).
    #[error("the GitHub App installation ID must be a number, not {0:?}")]
    InstallationId(String),
    /// The API URL as shown (redacted).
    #[error("the GitHub API URL must start with https:// (got {0:?})")]
    ApiUrl(String),
    #[error("GitHub App token exchange: {0}")]
    Client(reqwest::Error),
    /// `url` as shown; `cause` is the redacted error chain.
    #[error("GitHub App token exchange at {url} failed: {cause}")]
    Request { url: String, cause: String },
    /// The server answered with another status than 201 Created.
    #[error("GitHub App token exchange at {url}: HTTP {status}{hint}: {detail}")]
    Refused {
        url: String,
        status: reqwest::StatusCode,
        hint: &'static str,
        detail: String,
    },
    #[error("GitHub App token exchange at {0}: the response holds no token")]
    NoToken(String),
}

/// The RSA key of a GitHub App, from PEM (`BEGIN RSA PRIVATE KEY` or `BEGIN PRIVATE KEY`).
pub fn parse_key(pem: &str) -> Result<RsaKeyPair, GitHubAppError> {
    let der = PrivateKeyDer::from_pem_slice(pem.trim().as_bytes()).map_err(|e| match e {
        pem::Error::NoItemsFound => GitHubAppError::NoPemKey,
        e => GitHubAppError::BadPem(e),
    })?;
    let parsed = match &der {
        PrivateKeyDer::Pkcs1(k) => RsaKeyPair::from_der(k.secret_pkcs1_der()),
        PrivateKeyDer::Pkcs8(k) => RsaKeyPair::from_pkcs8(k.secret_pkcs8_der()),
        _ => return Err(GitHubAppError::NotRsa),
    };
    parsed.map_err(GitHubAppError::UnusableKey)
}

/// The app's JWT at `now` (seconds since the epoch).
pub fn jwt(app_id: &str, private_key_pem: &str, now: u64) -> Result<String, GitHubAppError> {
    let app_id = app_id.trim();
    if app_id.is_empty() {
        return Err(GitHubAppError::EmptyAppId);
    }
    let key = parse_key(private_key_pem)?;
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
    let claims = serde_json::json!({
        // GitHub allows for clock skew this way.
        "iat": now.saturating_sub(60),
        // At most ten minutes.
        "exp": now + 600,
        "iss": app_id,
    });
    let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
    let signing_input = format!("{header}.{payload}");
    let mut signature = vec![0u8; key.public().modulus_len()];
    key.sign(
        &RSA_PKCS1_SHA256,
        &SystemRandom::new(),
        signing_input.as_bytes(),
        &mut signature,
    )
    .map_err(|_| GitHubAppError::Signing)?;
    Ok(format!(
        "{signing_input}.{}",
        URL_SAFE_NO_PAD.encode(signature)
    ))
}

/// The token-exchange URL for an installation.
pub fn access_tokens_url(api_url: &str, installation_id: &str) -> Result<String, GitHubAppError> {
    let id = installation_id.trim();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(GitHubAppError::InstallationId(crate::redact::urls(id)));
    }
    let api = api_url.trim().trim_end_matches('/');
    if !(api.starts_with("https://") || api.starts_with("http://")) {
        return Err(GitHubAppError::ApiUrl(crate::redact::urls(api)));
    }
    Ok(format!("{api}/app/installations/{id}/access_tokens"))
}

/// How long a token exchange may take by default (a call with a deadline passes its own).
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);

/// Exchanges the app's credentials for an installation token (blocking), within
/// [`EXCHANGE_TIMEOUT`].
pub fn installation_token(
    api_url: &str,
    app_id: &str,
    installation_id: &str,
    private_key_pem: &str,
) -> Result<String, GitHubAppError> {
    installation_token_within(
        api_url,
        app_id,
        installation_id,
        private_key_pem,
        EXCHANGE_TIMEOUT,
    )
}

/// [`installation_token`] within `within` (connect and whole request).
pub fn installation_token_within(
    api_url: &str,
    app_id: &str,
    installation_id: &str,
    private_key_pem: &str,
    within: Duration,
) -> Result<String, GitHubAppError> {
    crate::ensure_crypto_provider();
    let url = access_tokens_url(api_url, installation_id)?;
    let shown = crate::redact::urls(&url);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let token = jwt(app_id, private_key_pem, now)?;
    let client = reqwest::blocking::Client::builder()
        .connect_timeout(within.min(Duration::from_secs(15)))
        .timeout(within)
        .user_agent(concat!("pulumi-operator-rs/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(GitHubAppError::Client)?;
    let response = client
        .post(&url)
        .bearer_auth(&token)
        .header("Accept", "application/vnd.github+json")
        .header("X-GitHub-Api-Version", "2022-11-28")
        .send()
        .map_err(|e| GitHubAppError::Request {
            url: shown.clone(),
            cause: crate::redact::urls(&crate::error_chain(&e)),
        })?;
    let status = response.status();
    let body = response.text().unwrap_or_default();
    let parsed: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    if status.as_u16() != 201 {
        let detail = parsed["message"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| body.chars().take(200).collect());
        let hint = match status.as_u16() {
            401 => " (the app ID or private key is wrong, or the clock is off)",
            404 => " (no such installation of this app; check the installation ID and the API URL)",
            _ => "",
        };
        return Err(GitHubAppError::Refused {
            url: shown,
            status,
            hint,
            detail: detail.trim().to_string(),
        });
    }
    match parsed["token"].as_str() {
        Some(t) if !t.is_empty() => Ok(t.to_string()),
        _ => Err(GitHubAppError::NoToken(shown)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::process::Command;

    /// A fresh RSA key from openssl: (PKCS#1 PEM, PKCS#8 PEM, public key PEM).
    fn keys(dir: &std::path::Path) -> (String, String, std::path::PathBuf) {
        let pkcs1 = dir.join("k1.pem");
        let pkcs8 = dir.join("k8.pem");
        let public = dir.join("pub.pem");
        let run = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .output()
                .expect("openssl");
            assert!(out.status.success(), "openssl {args:?}: {out:?}");
        };
        run(&[
            "genrsa",
            "-traditional",
            "-out",
            pkcs1.to_str().unwrap(),
            "2048",
        ]);
        run(&[
            "pkcs8",
            "-topk8",
            "-nocrypt",
            "-in",
            pkcs1.to_str().unwrap(),
            "-out",
            pkcs8.to_str().unwrap(),
        ]);
        run(&[
            "rsa",
            "-in",
            pkcs1.to_str().unwrap(),
            "-pubout",
            "-out",
            public.to_str().unwrap(),
        ]);
        (
            std::fs::read_to_string(pkcs1).unwrap(),
            std::fs::read_to_string(pkcs8).unwrap(),
            public,
        )
    }

    /// Checks the JWT's signature with openssl and returns its claims.
    fn verify(jwt: &str, public: &std::path::Path, dir: &std::path::Path) -> serde_json::Value {
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let header: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).unwrap()).unwrap();
        assert_eq!(header["alg"], "RS256");
        let input = dir.join("input");
        let sig = dir.join("sig");
        std::fs::write(&input, format!("{}.{}", parts[0], parts[1])).unwrap();
        std::fs::write(&sig, URL_SAFE_NO_PAD.decode(parts[2]).unwrap()).unwrap();
        let out = Command::new("openssl")
            .args(["dgst", "-sha256", "-verify"])
            .arg(public)
            .arg("-signature")
            .arg(&sig)
            .arg(&input)
            .output()
            .unwrap();
        assert!(out.status.success(), "signature does not verify: {out:?}");
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap()
    }

    #[test]
    fn jwt_is_rs256_with_githubs_claims_for_pkcs1_and_pkcs8_keys() {
        let dir = tempfile::tempdir().unwrap();
        let (pkcs1, pkcs8, public) = keys(dir.path());
        for pem in [&pkcs1, &pkcs8] {
            let token = jwt(" 4242 ", pem, 1_700_000_000).unwrap();
            let claims = verify(&token, &public, dir.path());
            assert_eq!(claims["iss"], "4242");
            assert_eq!(claims["iat"], 1_700_000_000u64 - 60);
            assert_eq!(claims["exp"], 1_700_000_000u64 + 600);
        }
        assert!(jwt("1", "not a key", 0)
            .unwrap_err()
            .to_string()
            .contains("no PEM"));
        assert!(jwt("", &pkcs1, 0)
            .unwrap_err()
            .to_string()
            .contains("empty"));
    }

    #[test]
    fn urls_are_checked() {
        assert_eq!(
            access_tokens_url("https://ghe.example.com/api/v3/", "99").unwrap(),
            "https://ghe.example.com/api/v3/app/installations/99/access_tokens"
        );
        assert!(access_tokens_url("https://api.github.com", "9/../x").is_err());
        assert!(access_tokens_url("ftp://x", "1").is_err());
    }

    /// One HTTP exchange on loopback: returns the base URL and a handle yielding the request.
    fn serve_once(
        status: &'static str,
        body: &'static str,
    ) -> (String, std::thread::JoinHandle<String>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let handle = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request = String::new();
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                request.push_str(&line);
                if line == "\r\n" || line.is_empty() {
                    break;
                }
            }
            let mut body_in = vec![0u8; length];
            reader.read_exact(&mut body_in).unwrap();
            let mut stream = stream;
            write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            request
        });
        (url, handle)
    }

    #[test]
    fn exchange_posts_the_jwt_and_returns_the_token() {
        let dir = tempfile::tempdir().unwrap();
        let (pkcs1, _, public) = keys(dir.path());
        let (url, server) = serve_once(
            "201 Created",
            r#"{"token":"ghs_abc","expires_at":"2030-01-01T00:00:00Z"}"#,
        );
        let token = installation_token(&url, "7", "31", &pkcs1).unwrap();
        assert_eq!(token, "ghs_abc");
        let request = server.join().unwrap();
        assert!(
            request.starts_with("POST /app/installations/31/access_tokens HTTP/1.1"),
            "{request}"
        );
        let bearer = request
            .lines()
            .find_map(|l| l.strip_prefix("authorization: Bearer "))
            .or_else(|| {
                request
                    .lines()
                    .find_map(|l| l.strip_prefix("Authorization: Bearer "))
            })
            .expect("bearer token");
        assert_eq!(verify(bearer.trim(), &public, dir.path())["iss"], "7");

        let (url, server) = serve_once(
            "401 Unauthorized",
            r#"{"message":"A JSON web token could not be decoded"}"#,
        );
        let e = installation_token(&url, "7", "31", &pkcs1)
            .unwrap_err()
            .to_string();
        server.join().unwrap();
        assert!(e.contains("HTTP 401"), "{e}");
        assert!(e.contains("could not be decoded"), "{e}");
        assert!(!e.contains("PRIVATE KEY"), "{e}");
    }
}
