//! The cluster side: a client from the user's kubeconfig (context, namespace, impersonation
//! as kubectl's flags say), and the reads every command shares, with API errors turned into
//! messages that name what is missing.

use crate::cli::Global;
use crate::view::errors::{explain, Action};
use crate::view::rows::Viewed;
use anyhow::{anyhow, Context as _, Result};
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use pulumi_operator_api::names;
use pulumi_operator_api::{Stack, Update};

/// A client and the namespace the command works in.
pub struct Cluster {
    /// The client, with the user's credentials.
    pub client: Client,
    /// The namespace: `-n`, else the context's, else `default`.
    pub namespace: String,
}

async fn config(global: &Global) -> Result<Config> {
    let options = KubeConfigOptions {
        context: global.context.clone(),
        ..Default::default()
    };
    let mut config = match &global.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &options).await?
        }
        None if global.context.is_some() => Config::from_kubeconfig(&options)
            .await
            .context("loading the kubeconfig ($KUBECONFIG or ~/.kube/config)")?,
        None => Config::infer()
            .await
            .context("no kubeconfig found ($KUBECONFIG or ~/.kube/config) and not in a cluster")?,
    };
    if let Some(user) = &global.as_user {
        config.auth_info.impersonate = Some(user.clone());
        if !global.as_group.is_empty() {
            config.auth_info.impersonate_groups = Some(global.as_group.clone());
        }
    } else if !global.as_group.is_empty() {
        return Err(anyhow!("--as-group needs --as"));
    }
    Ok(config)
}

/// Connects as the kubeconfig says.
pub async fn connect(global: &Global) -> Result<Cluster> {
    let config = config(global).await?;
    let namespace = global
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = Client::try_from(config).context("building the Kubernetes client")?;
    Ok(Cluster { client, namespace })
}

/// An API error as a message naming the verb, resource, object and namespace.
pub fn api_error(err: kube::Error, action: Action<'_>) -> anyhow::Error {
    match err {
        kube::Error::Api(status) => anyhow!(explain(status.code, &status.message, &action)),
        other => anyhow!(
            "{} {} {}: {other}",
            action.verb,
            action.resource,
            match action.namespace {
                Some(ns) => format!("in namespace {ns:?}"),
                None => "in all namespaces".into(),
            }
        ),
    }
}

/// The API resource of Stacks (read as raw objects, see [`Viewed`]).
pub fn stack_resource() -> ApiResource {
    ApiResource::erase::<Stack>(&())
}

/// The resource name used in messages.
pub const STACKS: &str = "stacks.pulumi.com";
/// The resource name used in messages.
pub const UPDATES: &str = "updates.auto.pulumi.com";

impl Cluster {
    /// Raw Stacks of the namespace (or all namespaces).
    pub fn stacks(&self, all: bool) -> Api<DynamicObject> {
        let ar = stack_resource();
        if all {
            Api::all_with(self.client.clone(), &ar)
        } else {
            Api::namespaced_with(self.client.clone(), &self.namespace, &ar)
        }
    }

    /// Any namespaced kind in the command's namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// An [`Action`] on `resource` in the command's namespace.
    pub fn action<'a>(
        &'a self,
        verb: &'a str,
        resource: &'a str,
        name: Option<&'a str>,
    ) -> Action<'a> {
        Action {
            verb,
            resource,
            name,
            namespace: Some(&self.namespace),
        }
    }

    /// The Stack `name`; a clear error when it does not exist or may not be read.
    pub async fn stack(&self, name: &str) -> Result<Viewed> {
        let raw = self
            .stacks(false)
            .get(name)
            .await
            .map_err(|e| api_error(e, self.action("get", STACKS, Some(name))))?;
        to_viewed(raw)
    }

    /// The Updates labelled with the Stack's name (use [`crate::view::history::owned_by`] to
    /// keep those the Stack owns).
    pub async fn updates(&self, stack: &str) -> Result<Vec<Update>> {
        let params = ListParams::default().labels(&format!("{}={stack}", names::STACK_NAME_LABEL));
        let list = self
            .api::<Update>()
            .list(&params)
            .await
            .map_err(|e| api_error(e, self.action("list", UPDATES, None)))?;
        Ok(list.items)
    }
}

/// A raw Stack object as a [`Viewed`].
pub fn to_viewed(raw: DynamicObject) -> Result<Viewed> {
    let name = raw.metadata.name.clone().unwrap_or_default();
    let value = serde_json::to_value(raw).context("encoding a Stack")?;
    Viewed::from_json(value)
        .with_context(|| format!("the Stack {name:?} does not parse as pulumi.com/v1"))
}
