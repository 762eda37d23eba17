// One ConfigMap with a fixed name that a test edits with kubectl behind Pulumi's back.
import * as k8s from "@pulumi/kubernetes";

const settings = new k8s.core.v1.ConfigMap("settings", {
    metadata: { name: "drift-target" },
    data: { greeting: "hello" },
});

export const greeting = settings.data.apply(d => d["greeting"]);
