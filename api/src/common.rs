//! Types and schema helpers shared by several custom resources.

use std::collections::BTreeMap;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

/// Defines a string enum that never fails to deserialize.
///
/// Every known value becomes a variant; any other string is kept verbatim in
/// `Unknown(String)`, so an unexpected value in a stored object can be reported by the
/// controller (as a `Stalled` condition) instead of making the whole object unreadable.
///
/// `strict` enums publish their known values as an `enum:` list in the CRD schema (the API
/// server then rejects other values); `open` enums publish a plain string, as PKO does for
/// that field.
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident ($mode:ident) {
            $( $(#[$vmeta:meta])* $variant:ident = $value:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value this version of the operator does not know, kept verbatim.
            Unknown(String),
        }

        impl $name {
            /// The values this version knows, in their wire spelling.
            pub const KNOWN: &'static [&'static str] = &[$($value),+];

            /// The wire spelling of this value.
            pub fn as_str(&self) -> &str {
                match self {
                    $( Self::$variant => $value, )+
                    Self::Unknown(other) => other.as_str(),
                }
            }

            /// Parses a wire value; never fails (unknown values become `Unknown`).
            pub fn parse(value: &str) -> Self {
                match value {
                    $( $value => Self::$variant, )+
                    other => Self::Unknown(other.to_owned()),
                }
            }

            /// Whether this is one of the values this version knows.
            pub fn is_known(&self) -> bool {
                !matches!(self, Self::Unknown(_))
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = ::std::convert::Infallible;
            fn from_str(value: &str) -> Result<Self, Self::Err> {
                Ok(Self::parse(value))
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
                ser.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
                let value = <::std::borrow::Cow<'de, str>>::deserialize(de)?;
                Ok(Self::parse(&value))
            }
        }

        impl ::schemars::JsonSchema for $name {
            fn schema_name() -> ::std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }
            fn inline_schema() -> bool {
                true
            }
            fn json_schema(_: &mut ::schemars::SchemaGenerator) -> ::schemars::Schema {
                string_enum!(@schema $mode [$($value),+])
            }
        }
    };
    (@schema strict [$($value:literal),+]) => {
        ::schemars::json_schema!({ "type": "string", "enum": [$($value),+] })
    };
    (@schema open [$($value:literal),+]) => {
        ::schemars::json_schema!({ "type": "string" })
    };
}
pub(crate) use string_enum;

/// `serde(skip_serializing_if)` helper for plain `bool` fields that default to `false`.
pub(crate) fn is_false(value: &bool) -> bool {
    !*value
}

/// Schema for a value that may be any JSON (object, array, string, number or boolean).
pub(crate) fn any_json(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

/// Schema for a map whose values may be any JSON.
pub(crate) fn any_json_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": { "x-kubernetes-preserve-unknown-fields": true },
    })
}

/// Schema for a list whose items may be any JSON.
pub(crate) fn any_json_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": { "x-kubernetes-preserve-unknown-fields": true },
    })
}

/// Schema for a list of free-form objects (for example Kubernetes containers).
pub(crate) fn object_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
    })
}

/// Schema for a free-form object whose fields are kept as written.
pub(crate) fn preserved_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}

/// Schema for a Go-style duration string such as `"1h"`, `"30m"` or `"24h0m0s"`.
pub(crate) fn duration_string(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string" })
}

/// The name and runtime of a Pulumi project, as read from its `Pulumi.yaml`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProjectInfo {
    /// The Pulumi project name (`name` in `Pulumi.yaml`).
    pub name: String,
    /// The Pulumi project runtime (`runtime` in `Pulumi.yaml`), for example `nodejs`,
    /// `python`, `go` or `yaml`.
    pub runtime: String,
}

/// Labels and annotations for an object that the operator generates from a template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EmbeddedObjectMeta {
    /// Labels to add to the generated object. Labels the operator sets itself win on conflict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations to add to the generated object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// Object metadata inside a `workspaceTemplate` or `updateTemplate`.
///
/// Only `labels` and `annotations` are used; other `ObjectMeta` fields (as a server-side apply
/// configuration would carry them) are accepted and ignored.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct TemplateObjectMeta {
    /// Labels to add to the generated object. Labels the operator sets itself win on conflict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations to add to the generated object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Other metadata fields, kept as written and ignored.
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// Why a duration does not parse (see [`parse_duration`]).
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum DurationError {
    #[error("invalid duration {0:?}")]
    Invalid(String),
    #[error("duration {0:?} must not be negative")]
    Negative(String),
    #[error("missing unit in duration {0:?}")]
    MissingUnit(String),
    #[error("unknown unit {unit:?} in duration {input:?}")]
    UnknownUnit { unit: String, input: String },
    #[error("duration {0:?} is out of range")]
    OutOfRange(String),
}

/// Parses a Go-style duration (`metav1.Duration` on the wire), such as `"1h"`, `"1h30m"`,
/// `"90s"`, `"1.5h"` or `"24h0m0s"`. Units: `ns`, `us` (or `µs`), `ms`, `s`, `m`, `h`.
/// Negative durations and values beyond Go's range (about 292 years) are rejected. Never
/// panics, whatever the input.
pub fn parse_duration(input: &str) -> Result<std::time::Duration, DurationError> {
    const MAX_NANOS: u128 = i64::MAX as u128;
    let invalid = || DurationError::Invalid(input.to_string());
    let out_of_range = || DurationError::OutOfRange(input.to_string());
    let mut rest = input;
    if let Some(r) = rest.strip_prefix('+') {
        rest = r;
    } else if let Some(r) = rest.strip_prefix('-') {
        if r == "0" {
            return Ok(std::time::Duration::ZERO);
        }
        return Err(DurationError::Negative(input.to_string()));
    }
    if rest == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (int_part, after_int) = rest.split_at(int_end);
        let (frac_part, after_number) = match after_int.strip_prefix('.') {
            Some(r) => r.split_at(r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len())),
            None => ("", after_int),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(invalid());
        }
        let unit_end = after_number
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(after_number.len());
        let (unit, after_unit) = after_number.split_at(unit_end);
        let unit_nanos = unit_nanos(unit, input)?;
        let whole: u128 = if int_part.is_empty() {
            0
        } else if int_part.len() > 30 {
            return Err(out_of_range());
        } else {
            int_part.parse().map_err(|_| invalid())?
        };
        let mut value = whole.checked_mul(unit_nanos).ok_or_else(out_of_range)?;
        let (mut fraction, mut scale) = (0u128, 1u128);
        for digit in frac_part.bytes().take(18) {
            fraction = fraction * 10 + u128::from(digit - b'0');
            scale *= 10;
        }
        // Checked: a 30-digit number of seconds already fills most of u128.
        value = fraction
            .checked_mul(unit_nanos)
            .map(|f| f / scale)
            .and_then(|f| value.checked_add(f))
            .ok_or_else(out_of_range)?;
        total = total
            .checked_add(value)
            .filter(|t| *t <= MAX_NANOS)
            .ok_or_else(out_of_range)?;
        rest = after_unit;
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| invalid())?;
    let nanos = u32::try_from(total % 1_000_000_000).map_err(|_| invalid())?;
    Ok(std::time::Duration::new(secs, nanos))
}

/// Nanoseconds in one `unit` of a Go duration (`input`, for the error).
fn unit_nanos(unit: &str, input: &str) -> Result<u128, DurationError> {
    Ok(match unit {
        "ns" => 1,
        "us" | "\u{00b5}s" | "\u{03bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60 * 1_000_000_000,
        "h" => 3_600 * 1_000_000_000,
        "" => return Err(DurationError::MissingUnit(input.to_string())),
        other => {
            return Err(DurationError::UnknownUnit {
                unit: other.to_string(),
                input: input.to_string(),
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn go_durations() {
        let ok = |s: &str| parse_duration(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("-0"), Duration::ZERO);
        assert_eq!(ok("1h"), Duration::from_secs(3600));
        assert_eq!(ok("24h0m0s"), Duration::from_secs(86_400));
        assert_eq!(ok("1h30m"), Duration::from_secs(5400));
        assert_eq!(ok("1.5h"), Duration::from_secs(5400));
        assert_eq!(ok(".5s"), Duration::from_millis(500));
        assert_eq!(ok("+90s"), Duration::from_secs(90));
        assert_eq!(ok("300ms"), Duration::from_millis(300));
        assert_eq!(ok("10us"), Duration::from_micros(10));
        assert_eq!(ok("10µs"), Duration::from_micros(10));
        assert_eq!(ok("7ns"), Duration::from_nanos(7));
    }

    #[test]
    fn bad_durations_are_errors_not_panics() {
        for bad in [
            "",
            "1",
            "h",
            ".h",
            "1d",
            "-1h",
            "1h-2m",
            "NaNh",
            "340282366920938463463374607431.9s",
            "340282366920938463463374607431.999999999999999999h",
            "999999999999999999999999999999.9ns",
            "infh",
            "1e400h",
            "99999999999999999999999999999999999999h",
            "3000000h",
            "1..5h",
            " 1h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn no_input_shape_panics() {
        // Every length of integer and fraction, with every unit, summed twice: an answer or an
        // error, never an arithmetic panic.
        for int_len in 0..=40 {
            for frac_len in [0, 1, 9, 18, 30] {
                for unit in ["ns", "us", "ms", "s", "m", "h"] {
                    let int = "9".repeat(int_len);
                    let number = if frac_len == 0 {
                        int
                    } else {
                        format!("{int}.{}", "9".repeat(frac_len))
                    };
                    let once = format!("{number}{unit}");
                    let _ = parse_duration(&once);
                    let _ = parse_duration(&format!("{once}{once}"));
                }
            }
        }
    }
}

/// A resource an operation would change, and how.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceChange {
    /// The resource's URN.
    pub urn: String,
    /// `create`, `update`, `replace` or `delete`.
    pub operation: String,
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    let hex: String = ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}
