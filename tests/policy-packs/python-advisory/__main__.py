"""A policy pack as users write them: every Kubernetes Deployment names its owning team in a
`team` label (metadata.labels). Advisory: a violation is reported as a warning, and the preview
or update goes on."""

from pulumi_policy import (
    EnforcementLevel,
    PolicyPack,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)


def deployment_team_label(args: ResourceValidationArgs, report_violation: ReportViolation):
    if args.resource_type != "kubernetes:apps/v1:Deployment":
        return
    labels = (args.props.get("metadata") or {}).get("labels") or {}
    if not labels.get("team"):
        report_violation("The Deployment has no `team` label in metadata.labels.")


PolicyPack(
    name="k8s-labels",
    enforcement_level=EnforcementLevel.ADVISORY,
    policies=[
        ResourceValidationPolicy(
            name="deployment-team-label",
            description="Every Deployment has a `team` label naming its owners.",
            enforcement_level=EnforcementLevel.ADVISORY,
            validate=deployment_team_label,
        ),
    ],
)
