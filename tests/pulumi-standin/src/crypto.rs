//! The passphrase secrets provider.
//!
//! NOT the real format: the real CLI uses AES-256-GCM with a PBKDF2 key (1,000,000 rounds). This
//! stand-in keeps the same *shapes* (`encryptionsalt: v1:<salt>:v1:<nonce>:<ciphertext>` and
//! `secure: v1:<nonce>:<ciphertext>`) but encrypts with a SHA-256 counter keystream and an
//! HMAC-SHA256 tag, keyed by PBKDF2-HMAC-SHA256 (10,000 rounds) of the passphrase and salt.
//! It is an authenticated cipher good enough to detect a wrong passphrase in tests; do not use it
//! to protect anything.

use crate::util::{b64_decode, b64_encode, err, random_bytes, Res};
use sha2::{Digest, Sha256};

pub const MISSING_PASSPHRASE: &str =
    "passphrase must be set with PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE environment variables";
pub const WRONG_DECRYPT: &str = "failed to decrypt: incorrect passphrase, please set PULUMI_CONFIG_PASSPHRASE to the correct passphrase or set PULUMI_CONFIG_PASSPHRASE_FILE to a file containing the passphrase";
pub const WRONG_ENCRYPT: &str = "failed to encrypt: incorrect passphrase, please set PULUMI_CONFIG_PASSPHRASE to the correct passphrase or set PULUMI_CONFIG_PASSPHRASE_FILE to a file containing the passphrase";

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.iter().map(|b| b ^ 0x36).collect::<Vec<_>>());
    for p in parts {
        inner.update(p);
    }
    let ih = inner.finalize();
    let mut outer = Sha256::new();
    outer.update(k.iter().map(|b| b ^ 0x5c).collect::<Vec<_>>());
    outer.update(ih);
    outer.finalize().into()
}

fn pbkdf2(pass: &[u8], salt: &[u8], rounds: u32) -> [u8; 32] {
    let mut u = hmac(pass, &[salt, &1u32.to_be_bytes()]);
    let mut out = u;
    for _ in 1..rounds {
        u = hmac(pass, &[&u]);
        for (o, x) in out.iter_mut().zip(u.iter()) {
            *o ^= x;
        }
    }
    out
}

#[derive(Clone)]
pub struct Crypter {
    enc: [u8; 32],
    mac: [u8; 32],
}

impl Crypter {
    pub fn from_passphrase(phrase: &str, salt: &[u8]) -> Crypter {
        let k = pbkdf2(phrase.as_bytes(), salt, 10_000);
        Crypter {
            enc: hmac(&k, &[b"standin-enc"]),
            mac: hmac(&k, &[b"standin-mac"]),
        }
    }

    fn keystream_xor(&self, nonce: &[u8], data: &mut [u8]) {
        for (i, chunk) in data.chunks_mut(32).enumerate() {
            let mut h = Sha256::new();
            h.update(self.enc);
            h.update(nonce);
            h.update((i as u64).to_le_bytes());
            let block = h.finalize();
            for (d, k) in chunk.iter_mut().zip(block.iter()) {
                *d ^= k;
            }
        }
    }

    pub fn encrypt(&self, plaintext: &str) -> String {
        let nonce = random_bytes(12);
        let mut data = plaintext.as_bytes().to_vec();
        self.keystream_xor(&nonce, &mut data);
        let tag = hmac(&self.mac, &[&nonce, &data]);
        data.extend_from_slice(&tag[..16]);
        format!("v1:{}:{}", b64_encode(&nonce), b64_encode(&data))
    }

    /// Decrypts `v1:<nonce>:<ciphertext+tag>`; `None` when the tag does not match.
    pub fn decrypt(&self, ciphertext: &str) -> Option<String> {
        let mut parts = ciphertext.splitn(3, ':');
        if parts.next()? != "v1" {
            return None;
        }
        let nonce = b64_decode(parts.next()?)?;
        let mut data = b64_decode(parts.next()?)?;
        if data.len() < 16 {
            return None;
        }
        let tag = data.split_off(data.len() - 16);
        let want = hmac(&self.mac, &[&nonce, &data]);
        if want[..16] != tag[..] {
            return None;
        }
        self.keystream_xor(&nonce, &mut data);
        String::from_utf8(data).ok()
    }
}

/// Reads the passphrase like `readPassphrase` in the real CLI: `PULUMI_CONFIG_PASSPHRASE` counts if
/// present (even empty), then `PULUMI_CONFIG_PASSPHRASE_FILE` (non-empty; content trimmed).
pub fn read_passphrase() -> Res<Option<String>> {
    if let Some(p) = std::env::var_os("PULUMI_CONFIG_PASSPHRASE") {
        return Ok(Some(p.to_string_lossy().into_owned()));
    }
    if let Ok(f) = std::env::var("PULUMI_CONFIG_PASSPHRASE_FILE") {
        if !f.is_empty() {
            let path = std::path::absolute(&f).unwrap_or_else(|_| f.clone().into());
            return match std::fs::read_to_string(&path) {
                Ok(s) => Ok(Some(s.trim().to_string())),
                Err(e) => err(format!(
                    "unable to read PULUMI_CONFIG_PASSPHRASE_FILE: open {}: {}",
                    path.display(),
                    go_io_error(&e)
                )),
            };
        }
    }
    Ok(None)
}

fn go_io_error(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

/// The secrets manager of one stack.
#[derive(Clone)]
pub enum Secrets {
    /// The passphrase matched the stack's salt.
    Ready(Crypter),
    /// A passphrase was given but does not match (the real CLI's "locked" manager).
    Locked,
    /// No passphrase in the environment.
    Missing,
    /// The stack has no secrets provider state at all.
    None,
}

impl Secrets {
    /// Builds the manager from the stack's `encryptionsalt` state and the environment.
    pub fn from_salt(state: Option<&str>) -> Res<Secrets> {
        let Some(state) = state else {
            return Ok(Secrets::None);
        };
        let Some(phrase) = read_passphrase()? else {
            return Ok(Secrets::Missing);
        };
        Ok(match check_salt(&phrase, state) {
            Some(c) => Secrets::Ready(c),
            None => Secrets::Locked,
        })
    }

    /// Fails unless the passphrase is present and correct.
    pub fn require_ready(&self) -> Res<()> {
        match self {
            Secrets::Missing => err(MISSING_PASSPHRASE),
            Secrets::Locked => err(WRONG_DECRYPT),
            _ => Ok(()),
        }
    }

    pub fn encrypt(&self, plain: &str) -> Res<String> {
        match self {
            Secrets::Ready(c) => Ok(c.encrypt(plain)),
            Secrets::Locked => err(WRONG_ENCRYPT),
            Secrets::Missing => err(MISSING_PASSPHRASE),
            Secrets::None => err("no secrets provider is configured for this stack"),
        }
    }

    pub fn decrypt(&self, ct: &str) -> Res<String> {
        match self {
            Secrets::Ready(c) => match c.decrypt(ct) {
                Some(p) => Ok(p),
                None => err(WRONG_DECRYPT),
            },
            Secrets::Locked => err(WRONG_DECRYPT),
            Secrets::Missing => err(MISSING_PASSPHRASE),
            Secrets::None => err("no secrets provider is configured for this stack"),
        }
    }
}

/// Creates a new salt state `v1:<salt>:<encrypted "pulumi">` for a passphrase.
pub fn new_salt_state(phrase: &str) -> (String, Crypter) {
    let salt = random_bytes(8);
    let c = Crypter::from_passphrase(phrase, &salt);
    let msg = c.encrypt("pulumi");
    (format!("v1:{}:{}", b64_encode(&salt), msg), c)
}

/// Checks a passphrase against a salt state; returns the crypter when it matches.
pub fn check_salt(phrase: &str, state: &str) -> Option<Crypter> {
    let mut parts = state.splitn(3, ':');
    if parts.next()? != "v1" {
        return None;
    }
    let salt = b64_decode(parts.next()?)?;
    let rest = parts.next()?;
    let c = Crypter::from_passphrase(phrase, &salt);
    match c.decrypt(rest) {
        Some(s) if s == "pulumi" => Some(c),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_wrong_key() {
        let (state, c) = new_salt_state("hunter2");
        let ct = c.encrypt("s3cret value");
        assert!(ct.starts_with("v1:"));
        assert_eq!(c.decrypt(&ct).as_deref(), Some("s3cret value"));
        assert!(check_salt("hunter2", &state).is_some());
        assert!(check_salt("wrong", &state).is_none());
        let other = check_salt("hunter2", &state).unwrap();
        assert_eq!(other.decrypt(&ct).as_deref(), Some("s3cret value"));
    }

    #[test]
    fn empty_passphrase_works() {
        let (state, _) = new_salt_state("");
        assert!(check_salt("", &state).is_some());
        assert!(check_salt("x", &state).is_none());
    }
}
