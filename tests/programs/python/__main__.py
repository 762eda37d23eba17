"""A web Deployment and its Service in the Stack's namespace (the provider's default namespace,
`kubernetes:namespace` in the Stack's config), with outputs a person reads in the Stack's status."""
import pulumi
import pulumi_kubernetes as k8s

config = pulumi.Config()
message = config.get("message") or "hello"
token = config.require_secret("token")
labels = {"app": "web"}

deployment = k8s.apps.v1.Deployment(
    "web",
    spec={
        "replicas": config.get_int("replicas") or 1,
        "selector": {"match_labels": labels},
        "template": {
            "metadata": {"labels": labels},
            "spec": {
                "security_context": {
                    "run_as_non_root": True,
                    "run_as_user": 1000,
                    "seccomp_profile": {"type": "RuntimeDefault"},
                },
                "containers": [
                    {
                        "name": "web",
                        "image": "busybox",
                        "command": ["sleep", "86400"],
                        "env": [{"name": "MESSAGE", "value": message}],
                        "ports": [{"container_port": 8080, "name": "http"}],
                        "security_context": {
                            "allow_privilege_escalation": False,
                            "capabilities": {"drop": ["ALL"]},
                        },
                    }
                ],
            },
        },
    },
)

# The test cluster's pods have loopback addresses, which EndpointSlices refuse: the Service
# never gets endpoints, so the provider must not wait for them.
service = k8s.core.v1.Service(
    "web",
    metadata={"annotations": {"pulumi.com/skipAwait": "true"}},
    spec={"selector": labels, "ports": [{"port": 80, "target_port": "http"}]},
)

pulumi.export("deploymentName", deployment.metadata["name"])
pulumi.export("serviceName", service.metadata["name"])
pulumi.export("greeting", message)
pulumi.export("apiToken", token)
