//! Stack outputs handed from the runner to the operator through the pod's log, sealed
//! (AES-256-GCM) with a key that only the Update's plan Secret holds. The pod needs no rights
//! on the API server to report them (a Stack's ServiceAccount may have none, as with PKO's
//! documented binding), and what a pod writes can only ever become its own Update's outputs:
//! the operator opens the line with that Update's key and builds the Secret itself.

use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The log line carrying the sealed outputs starts with this.
pub const OUTPUTS_LINE_PREFIX: &str = "pulumi-runner-outputs: ";

/// The words of the runner's result message that say outputs were left out of the outputs
/// Secret (too large, or named so that no Secret key can hold them): the operator repeats that
/// part of the message on the Stack.
pub const OUTPUTS_LEFT_OUT: &str = "left out of the outputs Secret";

/// What is sealed: the outputs Secret's data (key → the output's JSON) and its secret keys.
#[derive(Serialize, Deserialize, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OutputsPayload {
    pub data: BTreeMap<String, String>,
    pub secret_keys: BTreeSet<String>,
    /// A preview's saved plan (the JSON of `pulumi preview --save-plan`), for the operator
    /// to keep until a person approves it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
}

impl std::fmt::Debug for OutputsPayload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputsPayload")
            .field("keys", &self.data.keys().collect::<Vec<_>>())
            .field("secret_keys", &self.secret_keys)
            .field("plan_bytes", &self.plan.as_ref().map(|p| p.len()))
            .finish()
    }
}

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Why outputs could not be sealed or opened (never carries a value or a key).
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum SealError {
    #[error("no randomness for {0}")]
    NoRandomness(&'static str),
    #[error("the outputs key is not base64")]
    KeyNotBase64,
    #[error("the outputs key is not 32 bytes")]
    KeyLength,
    #[error("outputs: {0}")]
    Encoding(String),
    #[error("cannot seal the outputs")]
    Seal,
    #[error("the sealed outputs are not base64")]
    SealedNotBase64,
    #[error("the sealed outputs are too short")]
    TooShort,
    #[error("bad nonce")]
    Nonce,
    #[error("the sealed outputs do not open with this Update's key")]
    WrongKeyOrChanged,
    #[error("the opened outputs are not valid")]
    Invalid,
}

/// A new random key (base64 of 32 bytes).
pub fn new_key() -> Result<String, SealError> {
    let mut key = [0u8; 32];
    SystemRandom::new()
        .fill(&mut key)
        .map_err(|_| SealError::NoRandomness("an outputs key"))?;
    Ok(B64.encode(key))
}

fn cipher(key: &str) -> Result<LessSafeKey, SealError> {
    let bytes = B64
        .decode(key.trim())
        .map_err(|_| SealError::KeyNotBase64)?;
    let unbound = UnboundKey::new(&AES_256_GCM, &bytes).map_err(|_| SealError::KeyLength)?;
    Ok(LessSafeKey::new(unbound))
}

/// `payload` sealed with `key`: base64 of nonce ‖ ciphertext ‖ tag.
pub fn seal(key: &str, payload: &OutputsPayload) -> Result<String, SealError> {
    let cipher = cipher(key)?;
    let mut nonce = [0u8; NONCE_LEN];
    SystemRandom::new()
        .fill(&mut nonce)
        .map_err(|_| SealError::NoRandomness("a nonce"))?;
    let mut data = serde_json::to_vec(payload).map_err(|e| SealError::Encoding(e.to_string()))?;
    cipher
        .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::empty(), &mut data)
        .map_err(|_| SealError::Seal)?;
    let mut out = nonce.to_vec();
    out.extend(data);
    Ok(B64.encode(out))
}

/// Opens what [`seal`] made with the same key; any change to it is an error.
pub fn open(key: &str, sealed: &str) -> Result<OutputsPayload, SealError> {
    let cipher = cipher(key)?;
    let bytes = B64
        .decode(sealed.trim())
        .map_err(|_| SealError::SealedNotBase64)?;
    if bytes.len() < NONCE_LEN {
        return Err(SealError::TooShort);
    }
    let (nonce, rest) = bytes.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Nonce)?;
    let mut rest = rest.to_vec();
    let plain = cipher
        .open_in_place(nonce, Aad::empty(), &mut rest)
        .map_err(|_| SealError::WrongKeyOrChanged)?;
    serde_json::from_slice(plain).map_err(|_| SealError::Invalid)
}

/// SHA-256 (hex) of a sealed line, reported in the termination message so that the operator
/// knows the log line it reads is the one the runner wrote.
pub fn digest(sealed: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, sealed.trim().as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The sealed text of the last outputs line in `log`.
pub fn find_line(log: &str) -> Option<&str> {
    log.lines()
        .rev()
        .find_map(|l| l.trim_end().split_once(OUTPUTS_LINE_PREFIX).map(|(_, s)| s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_outputs_open_only_with_their_key_and_unchanged() {
        let key = new_key().unwrap();
        let payload = OutputsPayload {
            data: BTreeMap::from([("pw".into(), "\"hunter2-canary\"".into())]),
            secret_keys: BTreeSet::from(["pw".into()]),
            plan: None,
        };
        let sealed = seal(&key, &payload).unwrap();
        assert!(!sealed.contains("hunter2"));
        assert_eq!(open(&key, &sealed).unwrap(), payload);
        let log = format!("a\n{OUTPUTS_LINE_PREFIX}{sealed}\nb\n");
        assert_eq!(find_line(&log), Some(sealed.as_str()));
        assert_eq!(digest(&sealed).len(), 64);
        // Another Update's key, a changed byte, garbage: refused.
        assert!(open(&new_key().unwrap(), &sealed).is_err());
        let mut bytes = B64.decode(&sealed).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        assert!(open(&key, &B64.encode(bytes)).is_err());
        assert!(open(&key, "not base64!").is_err());
        assert!(open(&key, "").is_err());
        assert!(open("short", &sealed).is_err());
        assert!(format!("{payload:?}").find("hunter2").is_none());
    }
}
