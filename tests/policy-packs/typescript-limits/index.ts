// A policy pack as users write them: every container of a Kubernetes Deployment must declare
// resource limits for both CPU and memory. Mandatory: a violation fails the preview or update.
import { PolicyPack } from "@pulumi/policy";

// The Deployment's inputs as the program gives them (only what this policy reads).
interface Container {
    name?: string;
    resources?: { limits?: { cpu?: string; memory?: string } };
}
interface DeploymentArgs {
    spec?: { template?: { spec?: { containers?: Container[] } } };
}

new PolicyPack("k8s-limits", {
    policies: [{
        name: "deployment-resource-limits",
        description: "Every container of a Deployment has CPU and memory limits.",
        enforcementLevel: "mandatory",
        validateResource: (args, reportViolation) => {
            if (args.type !== "kubernetes:apps/v1:Deployment") {
                return;
            }
            const deployment = args.props as DeploymentArgs;
            for (const container of deployment.spec?.template?.spec?.containers ?? []) {
                const limits = container.resources?.limits;
                const missing = ["cpu", "memory"].filter(k => !limits?.[k as "cpu" | "memory"]);
                if (missing.length > 0) {
                    reportViolation(`Container "${container.name ?? "?"}" has no ${missing.join(" or ")} limit ` +
                        "(spec.template.spec.containers[].resources.limits).");
                }
            }
        },
    }],
});
