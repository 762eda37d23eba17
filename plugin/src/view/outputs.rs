//! Stack outputs: `status.outputs` shows secret values as `[secret]`; their values are in the
//! outputs Secret `<update>-stack-outputs` of the `up` that produced them (one key per output,
//! the JSON of its value; the annotation `pulumi.com/secrets` lists the secret keys).

use crate::view::format::{table, Cell};
use k8s_openapi::ByteString;
use pulumi_operator_api::names;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The secret keys named by the outputs Secret's `pulumi.com/secrets` annotation.
pub fn secret_keys(annotation: Option<&str>) -> BTreeSet<String> {
    annotation
        .and_then(|a| serde_json::from_str::<Vec<String>>(a).ok())
        .unwrap_or_default()
        .into_iter()
        .collect()
}

/// The keys whose value `status.outputs` hides.
pub fn hidden_keys(outputs: &BTreeMap<String, Value>) -> Vec<String> {
    outputs
        .iter()
        .filter(|(_, v)| v.as_str() == Some(names::SECRET_OUTPUT_PLACEHOLDER))
        .map(|(k, _)| k.clone())
        .collect()
}

/// The outputs with the hidden values read from the outputs Secret's data. A value that is
/// not JSON is shown as the text it is.
pub fn reveal(
    outputs: &BTreeMap<String, Value>,
    data: &BTreeMap<String, ByteString>,
    secret: &BTreeSet<String>,
) -> BTreeMap<String, Value> {
    outputs
        .iter()
        .map(|(k, v)| {
            let hidden = v.as_str() == Some(names::SECRET_OUTPUT_PLACEHOLDER) && secret.contains(k);
            let value = match data.get(k).filter(|_| hidden) {
                Some(bytes) => serde_json::from_slice(&bytes.0)
                    .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes.0).into())),
                None => v.clone(),
            };
            (k.clone(), value)
        })
        .collect()
}

/// A value as one line: strings as they are, anything else as compact JSON.
pub fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The outputs as a KEY / VALUE table.
pub fn render(outputs: &BTreeMap<String, Value>) -> String {
    let rows: Vec<Vec<Cell>> = outputs
        .iter()
        .map(|(k, v)| vec![Cell::plain(k), Cell::plain(value_text(v))])
        .collect();
    table(&["KEY", "VALUE"], &rows, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn outputs() -> BTreeMap<String, Value> {
        serde_json::from_value(
            json!({"value": "hi", "password": "[secret]", "n": 3, "obj": {"a": [1]}}),
        )
        .expect("outputs")
    }

    #[test]
    fn secret_values_are_revealed_only_for_secret_keys() {
        let data: BTreeMap<String, ByteString> = [
            ("password".to_string(), ByteString(b"\"top\"".to_vec())),
            ("value".to_string(), ByteString(b"\"other\"".to_vec())),
        ]
        .into();
        let keys = secret_keys(Some(r#"["password"]"#));
        let shown = reveal(&outputs(), &data, &keys);
        assert_eq!(shown["password"], "top");
        assert_eq!(
            shown["value"], "hi",
            "a plain output is taken from the status"
        );
        assert_eq!(hidden_keys(&outputs()), ["password"]);
        // Not named secret by the annotation: stays hidden.
        assert_eq!(
            reveal(&outputs(), &data, &BTreeSet::new())["password"],
            "[secret]"
        );
        let raw: BTreeMap<String, ByteString> =
            [("password".to_string(), ByteString(b"not json".to_vec()))].into();
        assert_eq!(reveal(&outputs(), &raw, &keys)["password"], "not json");
        assert!(secret_keys(Some("garbage")).is_empty());
    }

    #[test]
    fn outputs_render_escaped() {
        let outputs: BTreeMap<String, Value> = serde_json::from_value(
            json!({"url": "https://ok.example\x1b[2K\r\u{202e}", "multi": "a\nb"}),
        )
        .expect("outputs");
        assert_eq!(
            render(&outputs),
            "KEY     VALUE\nmulti   a\\nb\nurl     https://ok.example\\x1b[2K\\r\\u{202e}\n"
        );
    }

    #[test]
    fn outputs_render_one_per_line() {
        assert_eq!(
            render(&outputs()),
            "KEY        VALUE\nn          3\nobj        {\"a\":[1]}\npassword   [secret]\nvalue      hi\n"
        );
    }
}
