//! Pure helpers on Stack specs: which program source a Stack uses, and the validation the
//! controller runs before doing anything (the CRDs carry no CEL rules because they must
//! install on Kubernetes 1.20, so these checks live here).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::common::parse_duration;
use crate::names;
use crate::stack::{
    FluxSource, GitAuthConfig, GitSource, ProgramReference, ResourceRef, ResourceSelectorType,
    Stack, StackSpec, WorkspaceReclaimPolicy,
};

/// The kind of program source of a Stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SourceKind {
    /// A git repository (`projectRepo`, `commit`/`branch`, ...).
    Git,
    /// A Flux source object (`fluxSource`).
    Flux,
    /// A Program object (`programRef`).
    Program,
    /// No source: the program is baked into the image (`workspaceTemplate.spec.local`) or the
    /// stack is only destroyed.
    None,
}

impl SourceKind {
    /// A short lowercase name (`git`, `flux`, `program`, `none`).
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Git => "git",
            SourceKind::Flux => "flux",
            SourceKind::Program => "program",
            SourceKind::None => "none",
        }
    }
}

impl fmt::Display for SourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The program source a Stack uses, borrowed from its spec.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StackSource<'a> {
    /// A git repository.
    Git(&'a GitSource),
    /// A Flux source object.
    Flux(&'a FluxSource),
    /// A Program object.
    Program(&'a ProgramReference),
    /// No source.
    None,
}

impl StackSource<'_> {
    /// The kind of this source.
    pub fn kind(&self) -> SourceKind {
        match self {
            StackSource::Git(_) => SourceKind::Git,
            StackSource::Flux(_) => SourceKind::Flux,
            StackSource::Program(_) => SourceKind::Program,
            StackSource::None => SourceKind::None,
        }
    }
}

/// The git revision a Stack asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GitRevision<'a> {
    /// A fixed commit SHA.
    Commit(&'a str),
    /// A branch (or tag) to track.
    Branch(&'a str),
}

impl GitSource {
    /// The requested revision: `commit` if set (and non-empty), else `branch`.
    pub fn revision(&self) -> Option<GitRevision<'_>> {
        fn non_empty(value: &Option<String>) -> Option<&str> {
            value.as_deref().filter(|v| !v.is_empty())
        }
        non_empty(&self.commit)
            .map(GitRevision::Commit)
            .or_else(|| non_empty(&self.branch).map(GitRevision::Branch))
    }
}

impl StackSpec {
    /// The program source, with PKO's precedence when several are set (which
    /// [`validate_stack_spec`] reports as an error): git, then `fluxSource`, then `programRef`.
    pub fn source(&self) -> StackSource<'_> {
        if self.git.is_set() {
            StackSource::Git(&self.git)
        } else if let Some(flux) = &self.flux_source {
            StackSource::Flux(flux)
        } else if let Some(program) = &self.program_ref {
            StackSource::Program(program)
        } else {
            StackSource::None
        }
    }

    /// Every source that is set, by field name (more than one is invalid).
    pub fn sources_set(&self) -> Vec<&'static str> {
        let mut set = Vec::new();
        if self.git.is_set() {
            set.push("projectRepo");
        }
        if self.flux_source.is_some() {
            set.push("fluxSource");
        }
        if self.program_ref.is_some() {
            set.push("programRef");
        }
        set
    }
}

/// One problem found in a spec: the offending field (a JSON path such as
/// `spec.envRefs.AWS_KEY.secret.namespace`) and a message for humans.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    /// The field the problem is about.
    pub field: String,
    /// What is wrong, and where possible how to fix it.
    pub message: String,
}

impl SpecError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Joins errors into one message suitable for a condition or an Event.
pub fn join_errors(errors: &[SpecError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Environment variable names the operator sets itself in a stack's pods, and the prefix it
/// keeps for its runner: a tenant's `envRefs` or Workspace `env` entry with one of these names
/// would change how the operation runs, so it is refused.
pub const RESERVED_ENV_NAMES: &[&str] = &[
    names::PULUMI_ENV_VAR,
    "POD_NAMESPACE",
    "POD_SA_NAME",
    crate::plan::PLAN_DIGEST_ENV,
];
/// See [`RESERVED_ENV_NAMES`].
pub const RESERVED_ENV_PREFIX: &str = "PULUMI_RUNNER_";

/// Why `name` cannot be set by a tenant (see [`RESERVED_ENV_NAMES`]), if it cannot.
pub fn reserved_env_problem(name: &str) -> Option<String> {
    let reserved = name.starts_with(RESERVED_ENV_PREFIX) || RESERVED_ENV_NAMES.contains(&name);
    reserved.then(|| {
        format!(
            "{name:?} is reserved for the operator (it sets {} and every {RESERVED_ENV_PREFIX}* \
             name itself); use another name",
            RESERVED_ENV_NAMES.join(", ")
        )
    })
}

/// Validates a whole Stack (name and spec). An empty result means the Stack is valid.
pub fn validate_stack(stack: &Stack) -> Vec<SpecError> {
    let mut errors = Vec::new();
    let name = stack.metadata.name.as_deref().unwrap_or_default();
    if name.chars().count() > names::MAX_STACK_NAME_LENGTH {
        errors.push(SpecError::new(
            "metadata.name",
            format!(
                "Stack name must be no more than {} characters in length.",
                names::MAX_STACK_NAME_LENGTH
            ),
        ));
    }
    errors.extend(validate_stack_spec(
        &stack.spec,
        name,
        stack.metadata.namespace.as_deref(),
    ));
    errors
}

/// Validates a Stack spec. `name` is the Stack's name (to reject self-prerequisites);
/// `namespace` the Stack's namespace (to reject cross-namespace references; `None` when not
/// known, in which case any explicit namespace is rejected).
pub fn validate_stack_spec(
    spec: &StackSpec,
    name: &str,
    namespace: Option<&str>,
) -> Vec<SpecError> {
    let mut v = Validator {
        errors: Vec::new(),
        namespace,
    };
    v.spec(spec, name);
    v.errors
}

struct Validator<'a> {
    errors: Vec<SpecError>,
    namespace: Option<&'a str>,
}

fn is_blank(value: &Option<String>) -> bool {
    value.as_deref().is_none_or(|v| v.trim().is_empty())
}

/// Why `name` is not a valid Kubernetes object name (a DNS subdomain: lower-case letters,
/// digits, '-' and '.', at most 253 characters, starting and ending with a letter or digit).
pub fn object_name_problem(name: &str) -> Option<String> {
    let valid_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    let ends = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let bytes = name.as_bytes();
    if name.is_empty()
        || name.len() > 253
        || !valid_chars
        || !ends(bytes.first())
        || !ends(bytes.last())
    {
        let shown: String = name.chars().take(80).collect();
        return Some(format!(
            "{shown:?} is not a valid object name (lower-case letters, digits, '-' and '.', \
             at most 253 characters, in this namespace)"
        ));
    }
    None
}

/// Why a repository URL cannot be used: only network transports (https, http, ssh, git, and
/// scp-like `user@host:path`) are; a local path or `file://` would read the operator's own
/// file system.
pub fn repo_url_problem(url: &str) -> Option<String> {
    let url = url.trim();
    let lower = url.to_ascii_lowercase();
    if let Some(why) = option_shaped(url) {
        return Some(format!("unsupported repository URL {url:?}: {why}"));
    }
    if [
        "https://",
        "http://",
        "ssh://",
        "git://",
        "git+ssh://",
        "ssh+git://",
    ]
    .iter()
    .any(|p| lower.starts_with(p))
    {
        return None;
    }
    // scp-like: `[user@]host:path`, the host before the first ':' and no '/' before it.
    if let Some((host, path)) = url.split_once(':') {
        // Not `ext::…` or `fd::…` (git's command transports), nor anything with spaces.
        if !host.is_empty()
            && !host.contains(['/', ' '])
            && !path.starts_with(':')
            && !lower.contains("://")
        {
            return None;
        }
    }
    Some(format!(
        "unsupported repository URL {url:?}: use https://, http://, ssh://, git:// or user@host:path"
    ))
}

/// Why a URL could be read as options by the programs a transport runs (`ssh -oProxyCommand=…`
/// from `ssh://-oProxyCommand=…/x` runs a command), if it could: a user or host that begins
/// with `-`, or whitespace or control characters anywhere.
fn option_shaped(url: &str) -> Option<&'static str> {
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some("it contains whitespace or control characters");
    }
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', ':']).next().unwrap_or_default();
    let (user, host) = match authority.rsplit_once('@') {
        Some((user, host)) => (Some(user), host),
        None => (None, authority),
    };
    let dash = |s: &str| s.starts_with('-') || s.starts_with("%2d") || s.starts_with("%2D");
    if host.is_empty() && url.contains("://") {
        return Some("it names no host");
    }
    if dash(host) || user.is_some_and(dash) {
        return Some("its user or host begins with '-', which ssh would read as an option");
    }
    None
}

/// Why a `repoDir` cannot be used: it must stay inside the repository.
pub fn repo_dir_problem(dir: &str) -> Option<String> {
    if dir.starts_with('/') || dir.split(['/', '\\']).any(|part| part == "..") {
        return Some(format!(
            "{dir:?} must be a relative path inside the repository (no leading '/', no '..')"
        ));
    }
    if dir.contains('\0') {
        return Some("must not contain NUL".into());
    }
    None
}

fn is_full_sha(commit: &str) -> bool {
    (commit.len() == 40 || commit.len() == 64) && commit.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Validator<'_> {
    fn error(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.errors.push(SpecError::new(field, message));
    }

    fn spec(&mut self, spec: &StackSpec, name: &str) {
        if spec.stack.trim().is_empty() {
            self.error("spec.stack", "must be set to the Pulumi stack name");
        }
        self.sources(spec);
        self.object_names(spec);
        self.env_and_secret_refs(spec);
        self.config_refs(spec);
        self.config_keys(spec);
        self.prerequisites(spec, name);
        self.timeout_and_reclaim(spec);
    }

    /// Exactly one program source, each valid; approval gating excludes auto-remediation.
    fn sources(&mut self, spec: &StackSpec) {
        let sources = spec.sources_set();
        if sources.len() > 1 {
            self.error(
                "spec",
                format!(
                    "only one program source may be set, but found {}; use exactly one of \
                     projectRepo (git), fluxSource or programRef",
                    sources.join(" and ")
                ),
            );
        }
        if spec.git.is_set() {
            self.git(&spec.git);
        }
        let gated = spec.approval.as_ref().is_some_and(|a| a.required);
        if gated
            && spec
                .drift_detection
                .as_ref()
                .is_some_and(|d| d.auto_remediate)
        {
            self.error(
                "spec.driftDetection.autoRemediate",
                "cannot be combined with spec.approval.required: a remediation would change \
                 resources without an approved plan; turn one of them off (drift checks still \
                 report drift, and the next approved plan repairs it)",
            );
        }
        if let Some(flux) = &spec.flux_source {
            self.flux(flux);
        }
    }

    /// The Program, Secrets and ServiceAccount the spec names are valid object names.
    fn object_names(&mut self, spec: &StackSpec) {
        if let Some(program) = &spec.program_ref {
            if program.name.trim().is_empty() {
                self.error("spec.programRef.name", "must name a Program");
            } else {
                self.object_name("spec.programRef.name", &program.name);
            }
        }
        for (i, secret) in spec.env_secrets.iter().flatten().enumerate() {
            self.object_name(&format!("spec.envSecrets[{i}]"), secret);
        }
        for (field, value) in [
            ("spec.accessTokenSecret", &spec.access_token_secret),
            ("spec.gitAuthSecret", &spec.git.git_auth_secret),
            ("spec.serviceAccountName", &spec.service_account_name),
        ] {
            if let Some(v) = value.as_deref().filter(|v| !v.is_empty()) {
                self.object_name(field, v);
            }
        }
    }

    /// `envRefs` (valid, unreserved variable names), `secretsRef` and `secretRefs`.
    fn env_and_secret_refs(&mut self, spec: &StackSpec) {
        if let Some(env_refs) = &spec.env_refs {
            for (key, r) in env_refs {
                if key.is_empty() || key.contains('=') {
                    self.error(
                        format!("spec.envRefs.{key}"),
                        "is not a valid environment variable name",
                    );
                } else if let Some(why) = reserved_env_problem(key) {
                    self.error(format!("spec.envRefs.{key}"), why);
                }
                self.value_ref(&format!("spec.envRefs.{key}"), r);
            }
        }
        for (field, map) in [
            ("spec.secretsRef", &spec.secrets_ref),
            ("spec.secretRefs", &spec.secret_refs),
        ] {
            for (key, r) in map.iter().flatten() {
                self.value_ref(&format!("{field}.{key}"), r);
            }
        }
    }

    /// `configRef` and `configRefs` name a ConfigMap and one of its keys.
    fn config_refs(&mut self, spec: &StackSpec) {
        for (field, map) in [
            ("spec.configRef", &spec.config_ref),
            ("spec.configRefs", &spec.config_refs),
        ] {
            for (key, r) in map.iter().flatten() {
                if r.name.trim().is_empty() {
                    self.error(format!("{field}.{key}.name"), "must name a ConfigMap");
                } else {
                    self.object_name(&format!("{field}.{key}.name"), &r.name);
                }
                if r.key.trim().is_empty() {
                    self.error(
                        format!("{field}.{key}.key"),
                        "must name a key of the ConfigMap",
                    );
                }
            }
        }
    }

    fn timeout_and_reclaim(&mut self, spec: &StackSpec) {
        if let Some(timeout) = spec.operation_timeout_seconds {
            if timeout <= 0 {
                self.error(
                    "spec.operationTimeoutSeconds",
                    "must be a positive number of seconds",
                );
            }
        }
        if let Some(WorkspaceReclaimPolicy::Unknown(other)) = &spec.workspace_reclaim_policy {
            self.error(
                "spec.workspaceReclaimPolicy",
                format!("unsupported value {other:?}; use Retain or Delete"),
            );
        }
    }

    fn git(&mut self, git: &GitSource) {
        if is_blank(&git.project_repo) {
            self.error("spec.projectRepo", "missing \"projectRepo\"");
        } else if let Some(why) = git.project_repo.as_deref().and_then(repo_url_problem) {
            self.error("spec.projectRepo", why);
        }
        if let Some(why) = git.repo_dir.as_deref().and_then(repo_dir_problem) {
            self.error("spec.repoDir", why);
        }
        match (is_blank(&git.commit), is_blank(&git.branch)) {
            (true, true) => self.error("spec", "missing \"commit\" or \"branch\""),
            (false, false) => self.error(
                "spec",
                "only one of \"commit\" or \"branch\" should be specified",
            ),
            (false, true) => {
                let commit = git.commit.as_deref().unwrap_or_default().trim();
                if !is_full_sha(commit) {
                    self.error(
                        "spec.commit",
                        format!(
                            "{commit:?} is not a full commit SHA (40 hexadecimal characters); \
                             to track a branch or tag, use \"branch\""
                        ),
                    );
                }
            }
            (true, false) => {}
        }
        if let Some(auth) = &git.git_auth {
            self.git_auth(auth);
        }
    }

    fn git_auth(&mut self, auth: &GitAuthConfig) {
        let mut refs: Vec<(String, &ResourceRef)> = Vec::new();
        if let Some(token) = &auth.access_token {
            refs.push(("spec.gitAuth.accessToken".into(), token));
        }
        if let Some(ssh) = &auth.ssh_auth {
            refs.push((
                "spec.gitAuth.sshAuth.sshPrivateKey".into(),
                &ssh.ssh_private_key,
            ));
            if let Some(password) = &ssh.password {
                refs.push(("spec.gitAuth.sshAuth.password".into(), password));
            }
        }
        if let Some(basic) = &auth.basic_auth {
            refs.push(("spec.gitAuth.basicAuth.userName".into(), &basic.user_name));
            refs.push(("spec.gitAuth.basicAuth.password".into(), &basic.password));
        }
        if let Some(app) = &auth.github_app {
            refs.push(("spec.gitAuth.githubApp.appID".into(), &app.app_id));
            refs.push((
                "spec.gitAuth.githubApp.installationID".into(),
                &app.installation_id,
            ));
            refs.push(("spec.gitAuth.githubApp.privateKey".into(), &app.private_key));
        }
        if refs.is_empty() {
            self.error(
                "spec.gitAuth",
                "gitAuth config must specify exactly one of 'personalAccessToken', \
                 'sshPrivateKey', 'basicAuth', or 'githubApp'",
            );
        }
        for (field, r) in refs {
            if r.selector_type != ResourceSelectorType::Secret {
                self.error(
                    format!("{field}.type"),
                    format!(
                        "{} selectors are no longer supported in v2, please use a secret \
                         reference instead",
                        r.selector_type
                    ),
                );
                continue;
            }
            self.secret_ref(&field, r);
        }
    }

    fn flux(&mut self, flux: &FluxSource) {
        let r = &flux.source_ref;
        let mut parts = r.api_version.splitn(2, '/');
        let group = parts.next().unwrap_or_default();
        let version = parts.next().unwrap_or_default();
        if group.is_empty() || version.is_empty() || version.contains('/') {
            self.error(
                "spec.fluxSource.sourceRef.apiVersion",
                format!(
                    "{:?} is not a valid apiVersion; expected <group>/<version>, e.g. \
                     source.toolkit.fluxcd.io/v1",
                    r.api_version
                ),
            );
        }
        if r.kind.trim().is_empty() {
            self.error(
                "spec.fluxSource.sourceRef.kind",
                "must be set, e.g. GitRepository",
            );
        }
        if r.name.trim().is_empty() {
            self.error(
                "spec.fluxSource.sourceRef.name",
                "must name the source object",
            );
        } else {
            self.object_name("spec.fluxSource.sourceRef.name", &r.name);
        }
    }

    /// A value for envRefs / secretsRef: a literal or a Secret key.
    fn value_ref(&mut self, field: &str, r: &ResourceRef) {
        match &r.selector_type {
            ResourceSelectorType::Literal => {
                if r.literal.is_none() {
                    self.error(
                        format!("{field}.literal"),
                        "missing for a reference of type Literal",
                    );
                }
            }
            ResourceSelectorType::Secret => self.secret_ref(field, r),
            ResourceSelectorType::Env | ResourceSelectorType::Fs => self.error(
                format!("{field}.type"),
                format!("ref type {:?} is deprecated", r.selector_type.as_str()),
            ),
            ResourceSelectorType::Unknown(other) => self.error(
                format!("{field}.type"),
                format!("unsupported selector type: {other}"),
            ),
        }
    }

    /// A name the operator will GET: what the API server accepts as an object name.
    fn object_name(&mut self, field: &str, name: &str) {
        if let Some(why) = object_name_problem(name) {
            self.error(field, why);
        }
    }

    fn secret_ref(&mut self, field: &str, r: &ResourceRef) {
        let Some(secret) = &r.secret else {
            self.error(
                format!("{field}.secret"),
                "missing for a reference of type Secret",
            );
            return;
        };
        if secret.name.trim().is_empty() {
            self.error(format!("{field}.secret.name"), "must name a Secret");
        } else {
            self.object_name(&format!("{field}.secret.name"), &secret.name);
        }
        if secret.key.trim().is_empty() {
            self.error(
                format!("{field}.secret.key"),
                "must name a key of the Secret",
            );
        }
        if let Some(ns) = secret.namespace.as_deref().filter(|ns| !ns.is_empty()) {
            if Some(ns) != self.namespace {
                self.error(
                    format!("{field}.secret.namespace"),
                    "cross-namespace refs are not allowed",
                );
            }
        }
    }

    /// A config key may be set by only one of config, configRef(s), secrets and secretsRef(s)
    /// (PKO would produce a Workspace with duplicate keys that the API server rejects).
    fn config_keys(&mut self, spec: &StackSpec) {
        fn keys<V>(map: &Option<BTreeMap<String, V>>) -> impl Iterator<Item = &str> {
            map.iter().flatten().map(|(k, _)| k.as_str())
        }
        let sources: [(&'static str, Vec<&str>); 6] = [
            ("config", keys(&spec.config).collect()),
            ("configRef", keys(&spec.config_ref).collect()),
            ("configRefs", keys(&spec.config_refs).collect()),
            ("secrets", keys(&spec.secrets).collect()),
            ("secretsRef", keys(&spec.secrets_ref).collect()),
            ("secretRefs", keys(&spec.secret_refs).collect()),
        ];
        let mut seen: BTreeMap<&str, Vec<&'static str>> = BTreeMap::new();
        for (field, keys) in sources {
            for key in keys {
                seen.entry(key).or_default().push(field);
            }
        }
        for (key, fields) in seen {
            if key.trim().is_empty() {
                self.error(
                    format!("spec.{}", fields[0]),
                    "config keys must not be empty",
                );
            }
            if fields.len() > 1 {
                self.error(
                    format!("spec.{}.{key}", fields[1]),
                    format!(
                        "config key {key:?} is set more than once (in {}); set it in one place",
                        fields.join(" and ")
                    ),
                );
            }
        }
    }

    fn prerequisites(&mut self, spec: &StackSpec, name: &str) {
        let mut seen = BTreeSet::new();
        for (i, prereq) in spec.prerequisites.iter().flatten().enumerate() {
            let field = format!("spec.prerequisites[{i}]");
            if prereq.name.trim().is_empty() {
                self.error(format!("{field}.name"), "must name a Stack");
            } else if prereq.name == name {
                self.error(
                    format!("{field}.name"),
                    "a Stack cannot be its own prerequisite",
                );
            } else if !seen.insert(prereq.name.as_str()) {
                self.error(
                    format!("{field}.name"),
                    format!("prerequisite {:?} is listed more than once", prereq.name),
                );
            }
            let within = prereq
                .requirement
                .as_ref()
                .and_then(|r| r.succeeded_within_duration.as_deref());
            if let Some(within) = within {
                if let Err(e) = parse_duration(within) {
                    self.error(
                        format!("{field}.requirement.succeededWithinDuration"),
                        format!("{e} (use a duration such as \"1h\" or \"30m\")"),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::{
        BasicAuth, ConfigMapRef, FluxSourceReference, PrerequisiteRef, RequirementSpec,
        SecretSelector,
    };

    const SHA: &str = "2b0889718d3e63feeb6079ccd5e4488d8601e353";

    #[test]
    fn repositories_are_reached_over_the_network_and_repo_dirs_stay_inside() {
        for ok in [
            "https://github.com/org/repo",
            "http://127.0.0.1:8080/app.git",
            "ssh://git@github.com/org/repo.git",
            "git@github.com:org/repo.git",
            "git://example.com/repo",
        ] {
            assert_eq!(repo_url_problem(ok), None, "{ok}");
        }
        for bad in [
            "file:///etc",
            "/var/lib/repo",
            "./repo",
            "ext::sh -c touch% /tmp/pwned",
            "fd::17",
            "ssh://-oProxyCommand=touch%20/tmp/pwned/x",
            "ssh://git@-oProxyCommand=sh/x",
            "ssh://-oProxyCommand=sh@host/x",
            "git+ssh://%2doProxyCommand=sh/x",
            "-oProxyCommand=sh:org/repo",
            "git@github.com:org/repo.git --upload-pack=touch",
            "https:///no-host",
            "https://example.com/a\nb",
        ] {
            assert!(repo_url_problem(bad).is_some(), "{bad}");
        }
        for ok in ["pulumi", "db-admin", "a.b-c9"] {
            assert_eq!(object_name_problem(ok), None, "{ok}");
        }
        let long = "a".repeat(254);
        for bad in [
            "",
            "../kube-system/admin",
            "A",
            "-x",
            "x-",
            "a b",
            "ns/name",
            long.as_str(),
        ] {
            assert!(object_name_problem(bad).is_some(), "{bad}");
        }
        for ok in ["infra", "a/b/c", "a..b/c", ".hidden"] {
            assert_eq!(repo_dir_problem(ok), None, "{ok}");
        }
        for bad in ["/etc", "../x", "a/../../b", "a/..", "..\\x"] {
            assert!(repo_dir_problem(bad).is_some(), "{bad}");
        }
    }

    fn git_spec() -> StackSpec {
        StackSpec {
            stack: "org/project/dev".into(),
            git: GitSource {
                project_repo: Some("https://github.com/org/repo".into()),
                commit: Some(SHA.into()),
                ..GitSource::default()
            },
            ..StackSpec::default()
        }
    }

    #[test]
    fn approval_and_auto_remediation_do_not_mix() {
        let mut spec = git_spec();
        spec.approval = Some(crate::stack::Approval { required: true });
        assert!(errors(&spec).is_empty());
        spec.drift_detection = Some(Box::new(crate::stack::DriftDetection {
            schedules: vec!["0 * * * *".into()],
            auto_remediate: true,
            ..Default::default()
        }));
        let found = errors(&spec);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("spec.driftDetection.autoRemediate"),
            "{found:?}"
        );
        spec.approval = Some(crate::stack::Approval { required: false });
        assert!(errors(&spec).is_empty());
    }

    fn errors(spec: &StackSpec) -> Vec<String> {
        validate_stack_spec(spec, "my-stack", Some("default"))
            .into_iter()
            .map(|e| e.to_string())
            .collect()
    }

    fn flux() -> FluxSource {
        FluxSource {
            source_ref: FluxSourceReference {
                api_version: "source.toolkit.fluxcd.io/v1".into(),
                kind: "GitRepository".into(),
                name: "repo".into(),
            },
            dir: None,
        }
    }

    #[test]
    fn a_valid_git_stack_has_no_errors() {
        assert_eq!(errors(&git_spec()), Vec::<String>::new());
    }

    #[test]
    fn source_precedence_and_kinds() {
        let mut spec = git_spec();
        assert_eq!(spec.source().kind(), SourceKind::Git);
        assert_eq!(spec.git.revision(), Some(GitRevision::Commit(SHA)));
        spec.flux_source = Some(Box::new(flux()));
        // PKO precedence: git wins over flux.
        assert_eq!(spec.source().kind(), SourceKind::Git);
        spec.git = GitSource::default();
        assert_eq!(spec.source().kind(), SourceKind::Flux);
        spec.flux_source = None;
        spec.program_ref = Some(ProgramReference { name: "p".into() });
        assert_eq!(spec.source().kind(), SourceKind::Program);
        spec.program_ref = None;
        assert_eq!(spec.source(), StackSource::None);
        assert_eq!(SourceKind::None.to_string(), "none");
    }

    #[test]
    fn no_source_is_valid() {
        let spec = StackSpec {
            stack: "dev".into(),
            ..StackSpec::default()
        };
        assert_eq!(errors(&spec), Vec::<String>::new());
    }

    #[test]
    fn more_than_one_source_is_rejected() {
        let mut spec = git_spec();
        spec.flux_source = Some(Box::new(flux()));
        spec.program_ref = Some(ProgramReference { name: "p".into() });
        let errs = errors(&spec);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("projectRepo and fluxSource and programRef"));
    }

    #[test]
    fn commit_and_branch() {
        let mut spec = git_spec();
        spec.git.branch = Some("main".into());
        assert_eq!(
            errors(&spec),
            ["spec: only one of \"commit\" or \"branch\" should be specified"]
        );
        spec.git.commit = None;
        assert_eq!(errors(&spec), Vec::<String>::new());
        assert_eq!(spec.git.revision(), Some(GitRevision::Branch("main")));
        spec.git.branch = None;
        assert_eq!(errors(&spec), ["spec: missing \"commit\" or \"branch\""]);
        spec.git.commit = Some("2b08897".into());
        assert!(errors(&spec)[0].contains("not a full commit SHA"));
        spec.git.commit = Some(SHA.into());
        spec.git.project_repo = None;
        assert_eq!(errors(&spec), ["spec.projectRepo: missing \"projectRepo\""]);
    }

    #[test]
    fn git_auth_rules() {
        let mut spec = git_spec();
        spec.git.git_auth = Some(Box::default());
        assert!(errors(&spec)[0].contains("must specify exactly one of"));
        spec.git.git_auth = Some(Box::new(GitAuthConfig {
            basic_auth: Some(BasicAuth {
                user_name: ResourceRef::literal("me"),
                password: ResourceRef::secret("git", "password"),
            }),
            ..GitAuthConfig::default()
        }));
        assert_eq!(
            errors(&spec),
            [
                "spec.gitAuth.basicAuth.userName.type: Literal selectors are no longer supported \
              in v2, please use a secret reference instead"
            ]
        );
    }

    #[test]
    fn env_and_secret_refs() {
        let mut spec = git_spec();
        let mut other_ns = ResourceRef::secret("s", "k");
        if let Some(secret) = other_ns.secret.as_mut() {
            secret.namespace = Some("kube-system".into());
        }
        let mut same_ns = ResourceRef::secret("s", "k");
        same_ns.secret = Some(Box::new(SecretSelector {
            namespace: Some("default".into()),
            name: "s".into(),
            key: "k".into(),
        }));
        let env = ResourceRef {
            selector_type: ResourceSelectorType::Env,
            ..ResourceRef::default()
        };
        let no_literal = ResourceRef {
            selector_type: ResourceSelectorType::Literal,
            ..ResourceRef::default()
        };
        spec.env_refs = Some(
            [
                ("A".to_string(), other_ns),
                ("B".to_string(), same_ns),
                ("C".to_string(), env),
                ("D".to_string(), no_literal),
            ]
            .into(),
        );
        assert_eq!(
            errors(&spec),
            [
                "spec.envRefs.A.secret.namespace: cross-namespace refs are not allowed",
                "spec.envRefs.C.type: ref type \"Env\" is deprecated",
                "spec.envRefs.D.literal: missing for a reference of type Literal",
            ]
        );
    }

    #[test]
    fn names_the_operator_sets_are_refused_in_env_refs() {
        let mut spec = git_spec();
        spec.env_refs = Some(
            [
                (
                    "PULUMI_RUNNER_PLAN".to_string(),
                    ResourceRef::literal("/tmp/x"),
                ),
                ("PULUMI_ENV".to_string(), ResourceRef::literal("/tmp/y")),
                (
                    "PULUMI_BACKEND_URL".to_string(),
                    ResourceRef::literal("file:///s"),
                ),
                ("PULUMI_RUNNERS".to_string(), ResourceRef::literal("2")),
            ]
            .into(),
        );
        assert_eq!(
            errors(&spec),
            [
                "spec.envRefs.PULUMI_ENV: \"PULUMI_ENV\" is reserved for the operator (it sets \
                 PULUMI_ENV, POD_NAMESPACE, POD_SA_NAME, PULUMI_OPERATOR_PLAN_DIGEST and every \
                 PULUMI_RUNNER_* name itself); use another name",
                "spec.envRefs.PULUMI_RUNNER_PLAN: \"PULUMI_RUNNER_PLAN\" is reserved for the \
                 operator (it sets PULUMI_ENV, POD_NAMESPACE, POD_SA_NAME, \
                 PULUMI_OPERATOR_PLAN_DIGEST and every PULUMI_RUNNER_* name itself); use \
                 another name",
            ]
        );
    }

    #[test]
    fn duplicate_config_keys_across_maps_and_aliases() {
        let mut spec = git_spec();
        spec.config = Some([("aws:region".to_string(), "us-east-1".into())].into());
        spec.secrets_ref = Some([("aws:region".to_string(), ResourceRef::literal("x"))].into());
        let cm = ConfigMapRef {
            name: "cm".into(),
            key: "k".into(),
            json: None,
        };
        spec.config_ref = Some([("db".to_string(), cm.clone())].into());
        spec.config_refs = Some([("db".to_string(), cm)].into());
        assert_eq!(
            errors(&spec),
            [
                "spec.secretsRef.aws:region: config key \"aws:region\" is set more than once \
                 (in config and secretsRef); set it in one place",
                "spec.configRefs.db: config key \"db\" is set more than once (in configRef and \
                 configRefs); set it in one place",
            ]
        );
    }

    #[test]
    fn prerequisites_and_durations() {
        let mut spec = git_spec();
        let prereq = |name: &str, within: Option<&str>| PrerequisiteRef {
            name: name.into(),
            requirement: within.map(|w| RequirementSpec {
                succeeded_within_duration: Some(w.into()),
            }),
        };
        spec.prerequisites = Some(vec![
            prereq("network", Some("1h30m")),
            prereq("my-stack", None),
            prereq("network", None),
            prereq("db", Some("one hour")),
        ]);
        let errs = errors(&spec);
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(errs[0].contains("cannot be its own prerequisite"));
        assert!(errs[1].contains("listed more than once"));
        assert!(errs[2].starts_with("spec.prerequisites[3].requirement.succeededWithinDuration"));
    }

    #[test]
    fn flux_api_version_and_timeouts() {
        let mut spec = StackSpec {
            stack: "dev".into(),
            flux_source: Some(Box::new(flux())),
            operation_timeout_seconds: Some(0),
            ..StackSpec::default()
        };
        if let Some(f) = spec.flux_source.as_mut() {
            f.source_ref.api_version = "GitRepository".into();
        }
        let errs = errors(&spec);
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs[0].starts_with("spec.fluxSource.sourceRef.apiVersion"));
        assert!(errs[1].starts_with("spec.operationTimeoutSeconds"));
    }

    #[test]
    fn stack_name_length() {
        let mut stack = Stack::new(&"x".repeat(43), git_spec());
        stack.metadata.namespace = Some("default".into());
        let errs = validate_stack(&stack);
        assert_eq!(errs.len(), 1);
        assert_eq!(
            errs[0].to_string(),
            "metadata.name: Stack name must be no more than 42 characters in length."
        );
        let ok = Stack::new(&"x".repeat(42), git_spec());
        assert!(validate_stack(&ok).is_empty());
        assert_eq!(join_errors(&errs), errs[0].to_string());
    }

    #[test]
    fn spec_defaults() {
        let mut spec = git_spec();
        assert_eq!(spec.reclaim_policy(), WorkspaceReclaimPolicy::Delete);
        assert_eq!(spec.operation_timeout_seconds(), 14_400);
        assert_eq!(spec.resync_frequency_seconds(), 60);
        assert_eq!(spec.retry_max_backoff_seconds(), 3_600);
        assert_eq!(spec.effective_pulumi_log_level(), None);
        spec.workspace_reclaim_policy = Some(WorkspaceReclaimPolicy::Retain);
        spec.operation_timeout_seconds = Some(600);
        spec.resync_frequency_seconds = Some(30);
        spec.retry_max_backoff_duration_seconds = Some(86_400);
        spec.pulumi_log_level = Some(3);
        assert_eq!(spec.reclaim_policy(), WorkspaceReclaimPolicy::Retain);
        assert_eq!(spec.operation_timeout_seconds(), 600);
        assert_eq!(spec.resync_frequency_seconds(), 60);
        assert_eq!(spec.retry_max_backoff_seconds(), 86_400);
        assert_eq!(spec.effective_pulumi_log_level(), Some(3));
        spec.workspace_reclaim_policy = Some(WorkspaceReclaimPolicy::Unknown("Keep".into()));
        assert_eq!(spec.reclaim_policy(), WorkspaceReclaimPolicy::Delete);
        assert_eq!(
            errors(&spec),
            ["spec.workspaceReclaimPolicy: unsupported value \"Keep\"; use Retain or Delete"]
        );
    }
}
