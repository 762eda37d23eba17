// A web Deployment and its Service in the Stack's namespace (the provider's default namespace,
// `kubernetes:namespace` in the Stack's config), with outputs a person reads in the Stack's status.
import * as pulumi from "@pulumi/pulumi";
import * as k8s from "@pulumi/kubernetes";

const config = new pulumi.Config();
const message = config.get("message") ?? "hello";
const token = config.requireSecret("token");
const replicas = config.getNumber("replicas") ?? 1;
const labels = { app: "web" };

const deployment = new k8s.apps.v1.Deployment("web", {
    spec: {
        replicas,
        selector: { matchLabels: labels },
        template: {
            metadata: { labels },
            spec: {
                securityContext: { runAsNonRoot: true, runAsUser: 1000, seccompProfile: { type: "RuntimeDefault" } },
                containers: [{
                    name: "web",
                    image: "busybox",
                    command: ["sleep", "86400"],
                    env: [{ name: "MESSAGE", value: message }],
                    ports: [{ containerPort: 8080, name: "http" }],
                    securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] } },
                }],
            },
        },
    },
});

// The test cluster's pods have loopback addresses, which EndpointSlices refuse: the Service
// never gets endpoints, so the provider must not wait for them.
const service = new k8s.core.v1.Service("web", {
    metadata: { annotations: { "pulumi.com/skipAwait": "true" } },
    spec: { selector: labels, ports: [{ port: 80, targetPort: "http" }] },
});

export const deploymentName = deployment.metadata.name;
export const serviceName = service.metadata.name;
export const greeting = message;
export const apiToken = token;
