#!/usr/bin/env bash
# A real Kubernetes control plane on loopback for tests: etcd, kube-apiserver,
# kube-controller-manager and kube-scheduler (the versions pinned in tests/tools/go.mod, built
# once by tests/build-tools.sh and cached), plus the test node agent (tests/node-agent), which
# stands in for the kubelet: the scheduler places pods on its Node, the agent runs them.
#
#   tests/local-cluster.sh up       start (or reuse) the cluster; last line: export KUBECONFIG=...
#   tests/local-cluster.sh down     stop exactly what `up` started and remove its state
#   tests/local-cluster.sh status   is it up, and where are its logs
#   tests/local-cluster.sh build    only install prerequisites and build/cache the binaries (tests/build-tools.sh)
#   tests/local-cluster.sh prerequisites   only install the Debian packages it needs
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE_DIR="${LOCAL_CLUSTER_DIR:-$REPO_ROOT/.local-cluster}"

log() { echo "local-cluster: $*" >&2; }
die() { echo "local-cluster: ERROR: $*" >&2; exit 1; }

apt_updated=""
apt_install() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ -z "$apt_updated" ]; then
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    apt_updated=1
  fi
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
}

install_prerequisites() {
  apt_install jq openssl ca-certificates curl git iproute2 util-linux tar openssh-client openssh-server
  command -v python3 >/dev/null || apt_install python3
  # What the test programs' pods run, as in the upstream pulumi images: Node.js with npm for
  # TypeScript, the system python3 with venv for Python.
  apt_install python3-venv
  command -v node >/dev/null && command -v npm >/dev/null || apt_install nodejs npm
  command -v kubectl >/dev/null || die "kubectl (>= 1.26, with built-in kustomize) is required on PATH"
}

# etcd, kube-apiserver, kube-controller-manager, kube-scheduler (and the Pulumi CLI) are built
# from the Go modules pinned in tests/tools (tests/build-tools.sh), once, into a cache.
TOOLS_BIN=""
build_tools() {
  install_prerequisites
  TOOLS_BIN="$("$REPO_ROOT/tests/build-tools.sh" | tail -n1)"
  [ -x "$TOOLS_BIN/kube-apiserver" ] || die "tests/build-tools.sh did not produce kube-apiserver"
}

# The images kustomize/ names for our own binaries, mapped by the node agent to the freshly
# built executables; any image starting with pulumi/pulumi finds the real Pulumi CLI on PATH.
OPERATOR_IMAGE="ghcr.io/pulumi-operator-rs/operator"
RUNNER_IMAGE="ghcr.io/pulumi-operator-rs/runner"

free_ports() {
  python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

pid_alive() { [ -f "$STATE_DIR/pids/$1" ] && kill -0 "$(cat "$STATE_DIR/pids/$1")" 2>/dev/null; }

api_ready() {
  [ -f "$STATE_DIR/kubeconfig" ] || return 1
  kubectl --kubeconfig "$STATE_DIR/kubeconfig" get --raw /readyz >/dev/null 2>&1
}

start_bg() { # name, command... (the command line is kept, for tests/faults.sh to restart it)
  local name=$1; shift
  mkdir -p "$STATE_DIR/cmds"
  printf '%q ' "$@" >"$STATE_DIR/cmds/$name"
  nohup "$@" >>"$STATE_DIR/logs/$name.log" 2>&1 &
  echo $! >"$STATE_DIR/pids/$name"
}

supervise() { # name, command... : started again whenever it exits, as the kubelet restarts a
  # control-plane static pod (kube-scheduler exits on purpose when its cache is inconsistent,
  # e.g. after an apiserver restart, and relies on that)
  local name=$1; shift
  mkdir -p "$STATE_DIR/cmds"
  printf '%q ' "$@" >"$STATE_DIR/cmds/$name"
  (
    child=""
    trap '[ -z "$child" ] || kill -TERM "$child" 2>/dev/null; wait; exit 0' TERM INT
    while :; do
      "$@" &
      child=$!
      wait "$child" && status=0 || status=$?
      echo "--- $name exited ($status); started again by local-cluster.sh in 1s"
      sleep 1
    done
  ) >>"$STATE_DIR/logs/$name.log" 2>&1 &
  echo $! >"$STATE_DIR/pids/$name"
}

wait_for() { # seconds, description, command...
  local secs=$1 what=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || die "timed out after ${secs}s waiting for $what (logs: $STATE_DIR/logs)"
    sleep 0.5
  done
}

target_dir() {
  (cd "$REPO_ROOT" && cargo metadata --format-version 1 --no-deps 2>/dev/null | jq -r .target_directory)
}

# The image of `pulumi/pulumi*` containers: the real Pulumi CLI with its YAML language host and
# the test provider plugins (ambient plugins, found on PATH), copied (hard-linked) next to each
# other so that a non-root container can reach them. Needs build_tools first.
pulumi_image_dir() {
  local dir="$STATE_DIR/pulumi-image" f
  # Not emptied: running containers have it on their PATH. Each tool's link is replaced in place
  # (a tool built since the last `up`, such as the provider that .ci/run builds beside the first
  # tests, is added).
  mkdir -p "$dir"
  # As in the upstream image: the CLI, its language hosts with the policy-pack launch scripts
  # (pulumi-analyzer-policy{,-python}), and the provider plugins.
  for f in "$TOOLS_BIN"/pulumi "$TOOLS_BIN"/pulumi-language-* "$TOOLS_BIN"/pulumi-analyzer-* "$TOOLS_BIN"/pulumi-resource-*; do
    [ -e "$f" ] || continue
    ln -f "$f" "$dir/" 2>/dev/null || cp "$f" "$dir/"
  done
  chmod 0755 "$dir"
  echo "$dir"
}

# The cluster runs the release build of the operator and runner (what the images ship; tests/run.sh
# and CI build it); BINARY_PROFILE=debug runs the debug build. The map is read at each pod start,
# so `BINARY_PROFILE=debug tests/local-cluster.sh up` on a running cluster switches the next pods.
binary_profile() { echo "${BINARY_PROFILE:-release}"; }
cargo_build_bins() {
  local flags=(); [ "$(binary_profile)" = release ] && flags=(--release)
  (cd "$REPO_ROOT" && cargo build -q "${flags[@]}" --workspace --bins >&2)
}

write_image_map() {
  local target; target="$(target_dir)/$(binary_profile)"
  local pulumi_path; pulumi_path="$(pulumi_image_dir)"
  # The previous release's binaries (tests/previous-release.sh; the upgrade test).
  local previous="${XDG_CACHE_HOME:-$HOME/.cache}/pulumi-operator-rs/previous-release/bin"
  # As in the upstream images: node and npm, python3 with venv (the machine's, on the image's
  # PATH) and Go for Go programs.
  # The node agent links PATH entries under /run/node-agent, where a go binary cannot find its
  # GOROOT by itself: the image says where it is, as the upstream image's environment does.
  local go_path="" go_env="" go_bin; go_bin="$(command -v go || true)"
  if [ -n "$go_bin" ]; then
    go_path=", \"$(dirname "$(readlink -f "$go_bin")")\""
    go_env=", \"GOROOT\": \"$("$go_bin" env GOROOT)\""
  fi
  cat >"$STATE_DIR/image-map.json" <<JSON
{
  "images": [
    {"image": "$OPERATOR_IMAGE", "entrypoint": ["$target/pulumi-operator"], "user": 65532},
    {"image": "$RUNNER_IMAGE", "entrypoint": ["$target/pulumi-runner"], "user": 65532},
    {"image": "test.local/pulumi-operator-previous", "entrypoint": ["$previous/pulumi-operator"], "user": 65532},
    {"image": "test.local/pulumi-runner-previous", "entrypoint": ["$previous/pulumi-runner"], "user": 65532},
    {"image": "pulumi/pulumi", "prefix": true, "path": ["$pulumi_path"$go_path], "user": 1000,
     "home": "/home/pulumi", "env": {"PULUMI_SKIP_UPDATE_CHECK": "true", "AWS_EC2_METADATA_DISABLED": "true"$go_env}},
    {"image": "test.local/pulumi-cloud-standin", "path": ["$REPO_ROOT/tests/pulumi-cloud-shim", "$pulumi_path"$go_path],
     "user": 1000, "home": "/home/pulumi", "env": {"PULUMI_SKIP_UPDATE_CHECK": "true", "AWS_EC2_METADATA_DISABLED": "true"$go_env}}
  ]
}
JSON
}

cmd_up() {
  if pid_alive apiserver && pid_alive scheduler && pid_alive node-agent && api_ready; then
    log "cluster already running (state in $STATE_DIR)"
    # The Pulumi image follows the pinned tools, rebuilt here when they changed.
    build_tools
    write_image_map
    echo "export KUBECONFIG=$STATE_DIR/kubeconfig"
    return 0
  fi
  [ ! -d "$STATE_DIR/pids" ] || cmd_down
  build_tools
  log "building the test node agent"
  # With the workspace's binaries, as tests/run.sh builds them: `-p node-agent` alone would
  # compile its dependencies again with other features.
  cargo_build_bins
  local agent_bin; agent_bin="$(target_dir)/$(binary_profile)/node-agent"

  mkdir -p "$STATE_DIR"/{pids,logs,certs,pki}
  local etcd_data="$STATE_DIR/etcd"
  if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    etcd_data="/dev/shm/local-cluster-etcd-$$-$RANDOM"
  fi
  echo "$etcd_data" >"$STATE_DIR/etcd-data-dir"
  read -r ETCD_PORT PEER_PORT API_PORT KCM_PORT SCHED_PORT AGENT_PORT <<<"$(free_ports 6)"

  log "generating keys and an admin token"
  openssl genrsa -out "$STATE_DIR/pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$STATE_DIR/pki/sa.key" -pubout -out "$STATE_DIR/pki/sa.pub" 2>/dev/null
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=local-node" \
    -addext "subjectAltName=IP:127.0.0.1,DNS:local-node" \
    -keyout "$STATE_DIR/pki/kubelet.key" -out "$STATE_DIR/pki/kubelet.crt" 2>/dev/null
  local token; token="$(openssl rand -hex 24)"
  echo "$token,admin,admin,system:masters" >"$STATE_DIR/pki/tokens.csv"
  chmod 600 "$STATE_DIR/pki/tokens.csv" "$STATE_DIR/pki/sa.key"

  log "starting etcd on 127.0.0.1:$ETCD_PORT"
  start_bg etcd "$TOOLS_BIN/etcd" --name default --data-dir "$etcd_data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" \
    --initial-cluster "default=http://127.0.0.1:$PEER_PORT" --unsafe-no-fsync --log-level=warn

  # The operator's own requests are audited (metadata only), so that a test can compare the
  # rights it uses with the rights its ClusterRole grants (tests/rbac_audit.rs).
  cat >"$STATE_DIR/pki/audit-policy.yaml" <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: ["system:serviceaccount:pulumi-operator:pulumi-operator"]
- level: None
POLICY

  log "starting kube-apiserver $("$TOOLS_BIN/kube-apiserver" --version) on 127.0.0.1:$API_PORT"
  start_bg apiserver "$TOOLS_BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 --secure-port="$API_PORT" --advertise-address=127.0.0.1 \
    --cert-dir="$STATE_DIR/certs" --token-auth-file="$STATE_DIR/pki/tokens.csv" --authorization-mode=RBAC \
    --service-account-key-file="$STATE_DIR/pki/sa.pub" --service-account-signing-key-file="$STATE_DIR/pki/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc --service-cluster-ip-range=10.96.0.0/16 \
    --kubelet-preferred-address-types=InternalIP --enable-admission-plugins=PodSecurity --endpoint-reconciler-type=none \
    --disable-admission-plugins=TaintNodesByCondition \
    --default-not-ready-toleration-seconds=30 --default-unreachable-toleration-seconds=30 \
    --max-requests-inflight=800 --max-mutating-requests-inflight=400 \
    --audit-policy-file="$STATE_DIR/pki/audit-policy.yaml" --audit-log-path="$STATE_DIR/logs/audit.log" \
    --audit-log-maxsize=200 --audit-log-maxbackup=3

  cat >"$STATE_DIR/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $STATE_DIR/certs/apiserver.crt
users:
- name: admin
  user:
    token: $token
contexts:
- name: local
  context: {cluster: local, user: admin, namespace: default}
current-context: local
KC
  chmod 600 "$STATE_DIR/kubeconfig"
  wait_for 90 "kube-apiserver to answer" api_ready

  # The node lifecycle controller runs, as in a real cluster: a node that stops posting its
  # status (tests/faults.sh node-down) goes NotReady after 20 s, is tainted NoExecute, and its
  # pods are evicted once their default toleration (30 s here, set on the apiserver; 300 s by
  # default) ends. The node agent posts its status every 5 s.
  log "starting kube-controller-manager"
  supervise controller-manager "$TOOLS_BIN/kube-controller-manager" --kubeconfig="$STATE_DIR/kubeconfig" \
    --service-account-private-key-file="$STATE_DIR/pki/sa.key" --root-ca-file="$STATE_DIR/certs/apiserver.crt" \
    --use-service-account-credentials=true --leader-elect=false --bind-address=127.0.0.1 \
    --secure-port="$KCM_PORT" \
    --kube-api-qps=200 --kube-api-burst=400 --concurrent-gc-syncs=40 \
    --controllers='*,-node-ipam-controller' --node-monitor-grace-period=20s

  log "starting kube-scheduler"
  supervise scheduler "$TOOLS_BIN/kube-scheduler" --kubeconfig="$STATE_DIR/kubeconfig" \
    --authentication-kubeconfig="$STATE_DIR/kubeconfig" --authorization-kubeconfig="$STATE_DIR/kubeconfig" \
    --leader-elect=false --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" \
    --kube-api-qps=200 --kube-api-burst=400

  log "starting the node agent (stand-in for the kubelet) on 127.0.0.1:$AGENT_PORT"
  write_image_map
  start_bg node-agent env KUBECONFIG="$STATE_DIR/kubeconfig" RUST_LOG="${NODE_AGENT_LOG:-info}" "$agent_bin" \
    --node-name local-node --port "$AGENT_PORT" --tls-cert "$STATE_DIR/pki/kubelet.crt" \
    --tls-key "$STATE_DIR/pki/kubelet.key" --state-dir "$STATE_DIR/node" \
    --image-map "$STATE_DIR/image-map.json" --api-host 127.0.0.1 --api-port "$API_PORT"

  local k=(kubectl --kubeconfig "$STATE_DIR/kubeconfig")
  wait_for 60 "the node to be Ready" bash -c \
    "[ \"\$(${k[*]} get node local-node -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}')\" = True ]"
  wait_for 60 "the default ServiceAccount" "${k[@]}" -n default get serviceaccount default
  wait_for 60 "the cluster's root CA ConfigMap" "${k[@]}" -n default get configmap kube-root-ca.crt
  log "cluster is up: $("${k[@]}" version -o json 2>/dev/null | jq -r .serverVersion.gitVersion), logs in $STATE_DIR/logs"
  echo "export KUBECONFIG=$STATE_DIR/kubeconfig"
}

cmd_down() {
  [ -d "$STATE_DIR/pids" ] || { log "no cluster state in $STATE_DIR"; rm -rf "$STATE_DIR"; return 0; }
  # Stop in reverse order, by recorded pid only: the agent first so that it ends its pods.
  local extra_agents; extra_agents="$(cd "$STATE_DIR/pids" && ls -d node-agent-* 2>/dev/null || true)"
  # shellcheck disable=SC2086 # the names of nodes tests/faults.sh added, without spaces
  for name in $extra_agents node-agent scheduler controller-manager apiserver etcd; do
    local f="$STATE_DIR/pids/$name"
    [ -f "$f" ] || continue
    local pid; pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then
      log "stopping $name (pid $pid)"
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  # Node agents tests/faults.sh added whose pid file a later one replaced (a test killed before
  # it removed its node): every agent of this cluster works in its state directory.
  pkill -TERM -f -- "--state-dir $STATE_DIR/node" 2>/dev/null || true
  if [ -f "$STATE_DIR/etcd-data-dir" ]; then rm -rf "$(cat "$STATE_DIR/etcd-data-dir")"; fi
  rm -rf "$STATE_DIR"
  log "cluster stopped and its state removed"
}

cmd_status() {
  if [ ! -d "$STATE_DIR/pids" ]; then
    echo "local cluster: down (no state in $STATE_DIR); start it with: tests/local-cluster.sh up"
    return 1
  fi
  local all=0
  for name in etcd apiserver controller-manager scheduler node-agent; do
    if pid_alive "$name"; then echo "$name: running (pid $(cat "$STATE_DIR/pids/$name"))"; else echo "$name: NOT running"; all=1; fi
  done
  if api_ready; then echo "API: ready"; else echo "API: not answering"; all=1; fi
  echo "logs: $STATE_DIR/logs"
  echo "export KUBECONFIG=$STATE_DIR/kubeconfig"
  return $all
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  build) build_tools; echo "$TOOLS_BIN" ;;
  prerequisites) install_prerequisites ;;
  *) echo "usage: $0 up|down|status|build|prerequisites" >&2; exit 2 ;;
esac
