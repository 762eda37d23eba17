//! A strategic merge of JSON objects for the Kubernetes types users patch through
//! `workspaceTemplate` and `podTemplate`: maps merge recursively, lists of named things merge
//! by their key (containers and volumes by `name`, volume mounts by `mountPath`, ...), other
//! lists and scalars are replaced, and `null` deletes.

use serde_json::Value;

/// The merge key of a list field, by field name (as in the Kubernetes API's
/// `patchMergeKey` markers for the pod spec).
fn merge_key(field: &str) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets" => "name",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "ports" => "containerPort",
        "hostAliases" => "ip",
        "topologySpreadConstraints" => "topologyKey",
        _ => return None,
    })
}

/// Merges `patch` onto `base` in place.
pub fn merge(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, pv) in p {
                if pv.is_null() {
                    b.remove(k);
                    continue;
                }
                match (b.get_mut(k), merge_key(k)) {
                    (Some(Value::Array(bl)), Some(key)) if pv.is_array() => {
                        merge_list(bl, pv.as_array().into_iter().flatten(), key)
                    }
                    (Some(bv), _) if bv.is_object() && pv.is_object() => merge(bv, pv),
                    _ => {
                        b.insert(k.clone(), pv.clone());
                    }
                }
            }
        }
        (b, p) => *b = p.clone(),
    }
}

fn merge_list<'a>(base: &mut Vec<Value>, patch: impl Iterator<Item = &'a Value>, key: &str) {
    for item in patch {
        let id = item.get(key);
        match id.and_then(|id| base.iter_mut().find(|b| b.get(key) == Some(id))) {
            Some(existing) => merge(existing, item),
            None => base.push(item.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merges_containers_by_name_and_mounts_by_path() {
        let mut base = json!({
            "containers": [{"name": "pulumi", "image": "a", "env": [{"name": "X", "value": "1"}],
                            "volumeMounts": [{"name": "share", "mountPath": "/share"}]}],
            "volumes": [{"name": "share", "emptyDir": {}}],
            "restartPolicy": "Never"
        });
        let patch = json!({
            "containers": [
                {"name": "pulumi", "env": [{"name": "X", "value": "2"}, {"name": "Y", "value": "3"}],
                 "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]},
                {"name": "sidecar", "image": "s"}
            ],
            "volumes": [{"name": "cache", "emptyDir": {}}],
            "tolerations": [{"key": "k"}],
            "restartPolicy": null
        });
        merge(&mut base, &patch);
        let pulumi = &base["containers"][0];
        assert_eq!(pulumi["image"], "a");
        assert_eq!(
            pulumi["env"],
            json!([{"name": "X", "value": "2"}, {"name": "Y", "value": "3"}])
        );
        assert_eq!(pulumi["volumeMounts"].as_array().unwrap().len(), 2);
        assert_eq!(base["containers"][1]["name"], "sidecar");
        assert_eq!(base["volumes"].as_array().unwrap().len(), 2);
        assert_eq!(base["tolerations"], json!([{"key": "k"}]));
        assert!(base.get("restartPolicy").is_none());
    }
}
