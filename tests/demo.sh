#!/usr/bin/env bash
# The demo: from a bare machine to a deployed Stack on a local Kubernetes cluster.
#   1. starts the local cluster (tests/local-cluster.sh up; builds Kubernetes once),
#   2. builds the operator and the runner,
#   3. installs the operator with `kubectl apply -k kustomize/quickstart`,
#   4. serves a git repository holding a Pulumi YAML program on loopback,
#   5. applies a Stack that points at it, waits for Ready, and shows its status, the real
#      Pulumi CLI's logs and the ConfigMap its program created in the cluster.
# The local cluster runs any pulumi/pulumi image with the real Pulumi CLI (built from its Go
# module by tests/build-tools.sh), with the real Kubernetes provider.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
step() { printf '\n==> %s\n' "$*" >&2; }

step "starting the local Kubernetes cluster"
cluster="$(tests/local-cluster.sh up)"
eval "$(tail -n1 <<<"$cluster")"
export KUBECONFIG

step "building the operator and the runner"
cargo build --release --workspace --bins

step "installing the operator: kubectl apply --server-side -k kustomize/quickstart"
kubectl apply --server-side --force-conflicts -k kustomize/quickstart >/dev/null
kubectl -n pulumi-operator rollout status deployment/pulumi-operator --timeout=180s

step "serving a git repository with a Pulumi YAML program on loopback"
DEMO_DIR="$(mktemp -d /tmp/pulumi-operator-demo.XXXXXX)"
chmod 0755 "$DEMO_DIR"
git init -q --bare -b main "$DEMO_DIR/demo.git"
git init -q -b main "$DEMO_DIR/work"
cat >"$DEMO_DIR/work/Pulumi.yaml" <<'YAML'
name: demo
runtime: yaml
config:
  greeting:
    type: string
    default: hello
resources:
  message:
    type: kubernetes:core/v1:ConfigMap
    properties:
      metadata:
        name: demo-message
      data:
        text: ${greeting}, world
outputs:
  configMap: ${message.metadata.name}
  message: ${message.data.text}
  token:
    fn::secret: not-for-your-eyes
YAML
git -C "$DEMO_DIR/work" add Pulumi.yaml
git -C "$DEMO_DIR/work" -c user.name=demo -c user.email=demo@example.com commit -q -m "demo program"
git -C "$DEMO_DIR/work" push -q "$DEMO_DIR/demo.git" main
COMMIT="$(git -C "$DEMO_DIR/work" rev-parse HEAD)"
mkfifo "$DEMO_DIR/server-out"
python3 tests/git-http-server.py --root "$DEMO_DIR" >"$DEMO_DIR/server-out" 2>"$DEMO_DIR/server.log" &
SERVER_PID=$!
trap 'kill $SERVER_PID 2>/dev/null || true' EXIT
read -r GIT_URL <"$DEMO_DIR/server-out"
echo "git repository: $GIT_URL/demo.git at $COMMIT" >&2
mkdir -p "$DEMO_DIR/state" && chmod 0777 "$DEMO_DIR/state"

step "applying the Stack default/demo (its ServiceAccount may manage ConfigMaps in default)"
kubectl delete stack demo --ignore-not-found --wait=true >/dev/null
kubectl apply -f - <<YAML
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: demo-config-maps, namespace: default}
rules: [{apiGroups: [""], resources: [configmaps], verbs: [get, list, watch, create, update, patch, delete]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: demo-config-maps, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: demo-config-maps}
subjects: [{kind: ServiceAccount, name: pulumi, namespace: default}]
---
apiVersion: v1
kind: Secret
metadata: {name: demo-passphrase, namespace: default}
stringData: {passphrase: demo-passphrase}
---
apiVersion: pulumi.com/v1
kind: Stack
metadata: {name: demo, namespace: default}
spec:
  stack: dev
  projectRepo: $GIT_URL/demo.git
  commit: $COMMIT
  backend: file://$DEMO_DIR/state
  serviceAccountName: pulumi
  envRefs:
    PULUMI_CONFIG_PASSPHRASE: {type: Secret, secret: {name: demo-passphrase, key: passphrase}}
  config:
    greeting: hello from Kubernetes
YAML

step "waiting for the Stack to be Ready"
kubectl wait --for=condition=Ready stack/demo --timeout=300s
kubectl get stack demo -o wide
UPDATE="$(kubectl get stack demo -o jsonpath='{.status.lastUpdate.name}')"
kubectl get updates,jobs -l pulumi.com/stack-name=demo

step "kubectl logs job/$UPDATE"
kubectl logs "job/$UPDATE"

step "the ConfigMap the program created: kubectl get configmap demo-message"
kubectl get configmap demo-message -o yaml

step "outputs (status.outputs)"
kubectl get stack demo -o jsonpath='{.status.outputs}'; echo

step "done. Explore with KUBECONFIG=$KUBECONFIG; stop the cluster with: tests/local-cluster.sh down"
