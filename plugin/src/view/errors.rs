//! API errors as a person reads them: a missing Stack by name and namespace, a missing right
//! by verb and resource (what to ask an administrator for), a missing CRD.

/// What the plugin was doing when the API answered with an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Action<'a> {
    /// The API verb: `get`, `list`, `watch`, `patch`.
    pub verb: &'a str,
    /// The resource, with its group when not core: `stacks.pulumi.com`, `pods/log`, `secrets`.
    pub resource: &'a str,
    /// The object, for `get` and `patch`.
    pub name: Option<&'a str>,
    /// The namespace (`None`: all namespaces).
    pub namespace: Option<&'a str>,
}

fn kind_of(resource: &str) -> &str {
    let plural = resource.split(['.', '/']).next().unwrap_or(resource);
    plural.strip_suffix('s').unwrap_or(plural)
}

fn scope(namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) => format!("in namespace {ns:?}"),
        None => "in all namespaces (cluster-wide)".into(),
    }
}

/// The message for an API error with this HTTP `code` and server `message`.
pub fn explain(code: u16, message: &str, action: &Action<'_>) -> String {
    let scope = scope(action.namespace);
    match code {
        404 if message.contains("could not find the requested resource") => format!(
            "the API server does not serve {} (is pulumi-operator-rs installed, with its CRDs, in this cluster?)",
            action.resource
        ),
        404 => match action.name {
            Some(name) => format!("{} {name:?} not found {scope}", kind_of(action.resource)),
            None => format!("{} not found {scope}: {message}", action.resource),
        },
        403 => format!(
            "you are not allowed to {} {} {scope}: ask for a Role that grants it (the aggregated \
             `view` role reads Stacks, Updates, Jobs, pods and their logs; `edit` also patches \
             Stacks and reads Secrets).\nThe API server said: {message}",
            action.verb, action.resource
        ),
        401 => format!("the API server does not accept your credentials (401): {message}"),
        _ => format!(
            "{} {} {scope} failed ({code}): {message}",
            action.verb, action.resource
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get_stack<'a>(ns: Option<&'a str>) -> Action<'a> {
        Action {
            verb: "get",
            resource: "stacks.pulumi.com",
            name: Some("x"),
            namespace: ns,
        }
    }

    #[test]
    fn a_missing_stack_is_named_with_its_namespace() {
        assert_eq!(
            explain(
                404,
                "stacks.pulumi.com \"x\" not found",
                &get_stack(Some("y"))
            ),
            "stack \"x\" not found in namespace \"y\""
        );
    }

    #[test]
    fn a_missing_right_names_the_verb_and_resource() {
        let action = Action {
            verb: "get",
            resource: "secrets",
            name: Some("s"),
            namespace: Some("team"),
        };
        let text = explain(
            403,
            "secrets \"s\" is forbidden: User \"u\" cannot get resource",
            &action,
        );
        assert!(
            text.starts_with("you are not allowed to get secrets in namespace \"team\""),
            "{text}"
        );
        assert!(text.contains("cannot get resource"), "{text}");
        let all = Action {
            namespace: None,
            ..action
        };
        assert!(explain(403, "no", &all).contains("in all namespaces"));
    }

    #[test]
    fn a_missing_crd_and_other_errors() {
        let text = explain(
            404,
            "the server could not find the requested resource",
            &get_stack(Some("y")),
        );
        assert!(text.contains("does not serve stacks.pulumi.com"), "{text}");
        assert_eq!(
            explain(500, "boom", &get_stack(Some("y"))),
            "get stacks.pulumi.com in namespace \"y\" failed (500): boom"
        );
        assert!(explain(401, "Unauthorized", &get_stack(None)).contains("credentials"));
        assert_eq!(kind_of("pods/log"), "pod");
    }
}
