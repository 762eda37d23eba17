// A web Deployment and its Service in the Stack's namespace (the provider's default namespace,
// `kubernetes:namespace` in the Stack's config), with outputs a person reads in the Stack's
// status.
package main

import (
	appsv1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/apps/v1"
	corev1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/core/v1"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/config"
)

func main() {
	pulumi.Run(func(ctx *pulumi.Context) error {
		cfg := config.New(ctx, "")
		message := cfg.Get("message")
		if message == "" {
			message = "hello"
		}
		replicas := cfg.GetInt("replicas")
		if replicas == 0 {
			replicas = 1
		}
		token := cfg.RequireSecret("token")
		labels := pulumi.StringMap{"app": pulumi.String("web")}

		deployment, err := appsv1.NewDeployment(ctx, "web", &appsv1.DeploymentArgs{
			Spec: &appsv1.DeploymentSpecArgs{
				Replicas: pulumi.Int(replicas),
				Selector: &metav1.LabelSelectorArgs{MatchLabels: labels},
				Template: &corev1.PodTemplateSpecArgs{
					Metadata: &metav1.ObjectMetaArgs{Labels: labels},
					Spec: &corev1.PodSpecArgs{
						SecurityContext: &corev1.PodSecurityContextArgs{
							RunAsNonRoot:   pulumi.Bool(true),
							RunAsUser:      pulumi.Int(1000),
							SeccompProfile: &corev1.SeccompProfileArgs{Type: pulumi.String("RuntimeDefault")},
						},
						Containers: corev1.ContainerArray{
							&corev1.ContainerArgs{
								Name:    pulumi.String("web"),
								Image:   pulumi.String("busybox"),
								Command: pulumi.StringArray{pulumi.String("sleep"), pulumi.String("86400")},
								Env: corev1.EnvVarArray{
									&corev1.EnvVarArgs{Name: pulumi.String("MESSAGE"), Value: pulumi.String(message)},
								},
								Ports: corev1.ContainerPortArray{
									&corev1.ContainerPortArgs{ContainerPort: pulumi.Int(8080), Name: pulumi.String("http")},
								},
								SecurityContext: &corev1.SecurityContextArgs{
									AllowPrivilegeEscalation: pulumi.Bool(false),
									Capabilities: &corev1.CapabilitiesArgs{
										Drop: pulumi.StringArray{pulumi.String("ALL")},
									},
								},
							},
						},
					},
				},
			},
		})
		if err != nil {
			return err
		}

		// The test cluster's pods have loopback addresses, which EndpointSlices refuse: the
		// Service never gets endpoints, so the provider must not wait for them.
		service, err := corev1.NewService(ctx, "web", &corev1.ServiceArgs{
			Metadata: &metav1.ObjectMetaArgs{
				Annotations: pulumi.StringMap{"pulumi.com/skipAwait": pulumi.String("true")},
			},
			Spec: &corev1.ServiceSpecArgs{
				Selector: labels,
				Ports: corev1.ServicePortArray{
					&corev1.ServicePortArgs{Port: pulumi.Int(80), TargetPort: pulumi.String("http")},
				},
			},
		})
		if err != nil {
			return err
		}

		ctx.Export("deploymentName", deployment.Metadata.Name())
		ctx.Export("serviceName", service.Metadata.Name())
		ctx.Export("greeting", pulumi.String(message))
		ctx.Export("apiToken", token)
		return nil
	})
}
