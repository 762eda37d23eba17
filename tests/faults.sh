#!/usr/bin/env bash
# Test-only fault injector for the local cluster (tests/local-cluster.sh): it breaks what lies
# below the operator, as production does, for tests/e2e_faults.rs and by hand. Never shipped.
#
#   tests/faults.sh apiserver-restart hard|graceful   SIGKILL (or SIGTERM) kube-apiserver, start it
#                                                    again with its own command line, wait for /readyz
#   tests/faults.sh apiserver-pause SECONDS           SIGSTOP kube-apiserver for SECONDS, then SIGCONT:
#                                                    calls hang and time out instead of failing fast
#   tests/faults.sh controller-manager-pause SECONDS  SIGSTOP kube-controller-manager for SECONDS,
#                                                    then SIGCONT: its controllers (Jobs, garbage
#                                                    collection, node lifecycle) act on nothing
#                                                    meanwhile, as when their informers lag
#   tests/faults.sh etcd-restart                      SIGKILL etcd and start it again on the same data
#   tests/faults.sh etcd-compact                      compact etcd's history to its current revision,
#                                                    defragment it, and restart kube-apiserver
#                                                    (SIGKILL), whose watch cache would otherwise
#                                                    go on serving the compacted history: every watch
#                                                    resuming from an older resourceVersion then gets
#                                                    "410 Gone" (too old resource version) and re-lists
#   tests/faults.sh node-add NAME                     a second node: another node agent, registered as
#                                                    NAME, tainted pulumi-operator-rs.test/faults=NAME:
#                                                    NoSchedule (only pods that tolerate it go there) and
#                                                    labelled pulumi-operator-rs.test/node=NAME. A lost
#                                                    node's pods are evicted only while another node is
#                                                    Ready: the node lifecycle controller stops evicting
#                                                    when every node of a zone is down
#   tests/faults.sh node-down [NAME]                  the node dies: SIGKILL its agent and every
#                                                    container of its pods (each container's
#                                                    supervisor and PID 1; the kernel then ends the
#                                                    container's PID namespace); the node goes NotReady after the
#                                                    node-monitor grace period and the node lifecycle
#                                                    controller evicts its pods
#   tests/faults.sh node-partition [NAME]             the node is cut off, not dead: SIGSTOP its agent,
#                                                    so that it stops answering the API server while
#                                                    its pods' processes keep running (and reach the
#                                                    network). Their output is not drained meanwhile:
#                                                    a process that writes more than a pipe's 64 KiB
#                                                    blocks until node-heal
#   tests/faults.sh node-heal [NAME]                  the partition ends: SIGCONT the agent
#   tests/faults.sh agent-crash [NAME]                the node agent dies but its pods' processes live
#                                                    on (SIGKILL the agent alone; their output then
#                                                    goes nowhere)
#   tests/faults.sh node-up [NAME]                    the node comes back: processes an agent-crash
#                                                    left are ended first (a real kubelet re-attaches
#                                                    to its containers through the runtime; this
#                                                    stand-in cannot, so it ends them rather than
#                                                    report them ended while they run), then the
#                                                    agent starts again and finds its pods' processes
#                                                    gone
#   tests/faults.sh node-remove NAME                  stop NAME's agent and delete the Node
#   tests/faults.sh disk-mount DIR SIZE               a tmpfs of SIZE (e.g. 8m) at DIR (a file backend)
#   tests/faults.sh disk-fill DIR                     fill DIR's filesystem to the last byte
#   tests/faults.sh disk-free DIR                     remove what disk-fill wrote
#   tests/faults.sh disk-unmount DIR                  unmount the tmpfs
#
# Every command exits 0 once the fault is in place (or over), non-zero with a reason otherwise.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE_DIR="${LOCAL_CLUSTER_DIR:-$REPO_ROOT/.local-cluster}"

log() { echo "faults: $*" >&2; }
die() { echo "faults: ERROR: $*" >&2; exit 1; }

[ -d "$STATE_DIR/pids" ] || die "no local cluster in $STATE_DIR; start it with: tests/local-cluster.sh up"

pid_of() { cat "$STATE_DIR/pids/$1" 2>/dev/null || die "no pid recorded for $1"; }

alive() { kill -0 "$1" 2>/dev/null; }

stop_process() { # name, signal → the process has exited
  local name=$1 sig=$2 pid
  pid="$(pid_of "$name")"
  alive "$pid" || { log "$name (pid $pid) was not running"; return 0; }
  # A stopped process must be continued to act on SIGTERM.
  kill -CONT "$pid" 2>/dev/null || true
  kill "-$sig" "$pid" 2>/dev/null || true
  # kube-apiserver drains its requests for up to its request timeout (60 s).
  local start=$SECONDS
  for _ in $(seq 1 700); do
    alive "$pid" || { log "$name stopped $((SECONDS - start))s after SIG$sig"; return 0; }
    sleep 0.1
  done
  log "$name (pid $pid) did not stop within 70s of SIG$sig; SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do alive "$pid" || return 0; sleep 0.1; done
  die "$name (pid $pid) does not stop"
}

start_process() { # name → started again with the command line local-cluster.sh recorded
  local name=$1 cmd
  cmd="$(cat "$STATE_DIR/cmds/$name" 2>/dev/null)" || die "no command line recorded for $name (restart the cluster: tests/local-cluster.sh down && tests/local-cluster.sh up)"
  echo "--- restarted by tests/faults.sh at $(date -u +%FT%TZ)" >>"$STATE_DIR/logs/$name.log"
  eval "nohup $cmd >>\"\$STATE_DIR/logs/\$name.log\" 2>&1 &"
  echo $! >"$STATE_DIR/pids/$name"
}

kubectl_admin() { kubectl --kubeconfig "$STATE_DIR/kubeconfig" "$@"; }

wait_api_ready() {
  for _ in $(seq 1 900); do
    kubectl_admin get --raw /readyz >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "kube-apiserver is not ready 90s after the fault (logs: $STATE_DIR/logs/apiserver.log)"
}

etcd_url() { # the client URL from etcd's recorded command line
  grep -o -- '--listen-client-urls [^ ]*' "$STATE_DIR/cmds/etcd" | cut -d' ' -f2
}

etcd_post() { # path, JSON body → the response (etcd's gRPC gateway)
  curl -sS --fail --max-time 60 -X POST -d "$2" "$(etcd_url)$1"
}

wait_etcd() {
  for _ in $(seq 1 300); do
    etcd_post /v3/kv/range '{"key":"AA=="}' >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "etcd does not answer 30s after its restart (logs: $STATE_DIR/logs/etcd.log)"
}

containers_of() { # agent pid → its containers' supervisors (its children) and their PID 1s
  local supervisor
  for supervisor in $(pgrep -P "$1" || true); do
    echo "$supervisor"
    # A container's PID 1 does not die with its supervisor once it has changed its user (the
    # kernel clears the parent-death signal then): it is ended directly, which ends its whole
    # PID namespace.
    pgrep -P "$supervisor" || true
  done
}

end_containers() { # agent name → SIGKILL the containers recorded when it went down
  local file="$STATE_DIR/pids/$1.containers" pid
  [ -f "$file" ] || return 0
  while read -r pid; do
    [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true
  done <"$file"
  rm -f "$file"
}

node_ready() { # node name
  [ "$(kubectl_admin get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

agent_of() { # node name → the name its agent's pid and command line are recorded under
  if [ "$1" = local-node ]; then echo node-agent; else echo "node-agent-$1"; fi
}

wait_node_ready() { # node name
  for _ in $(seq 1 600); do node_ready "$1" && return 0; sleep 0.1; done
  die "node $1 is not Ready 60s after its agent started (logs: $STATE_DIR/logs/$(agent_of "$1").log)"
}

case "${1:-}" in
  apiserver-restart)
    case "${2:-}" in
      hard) sig=KILL ;;
      graceful) sig=TERM ;;
      *) die "usage: $0 apiserver-restart hard|graceful" ;;
    esac
    stop_process apiserver "$sig"
    start_process apiserver
    wait_api_ready
    log "kube-apiserver restarted ($2)"
    ;;
  apiserver-pause)
    secs="${2:?usage: $0 apiserver-pause SECONDS}"
    pid="$(pid_of apiserver)"
    kill -STOP "$pid"
    sleep "$secs"
    kill -CONT "$pid"
    wait_api_ready
    log "kube-apiserver paused for ${secs}s"
    ;;
  controller-manager-pause)
    secs="${2:?usage: $0 controller-manager-pause SECONDS}"
    pid="$(pid_of controller-manager)"
    kill -STOP "$pid"
    sleep "$secs"
    kill -CONT "$pid"
    log "kube-controller-manager paused for ${secs}s"
    ;;
  etcd-restart)
    stop_process etcd KILL
    start_process etcd
    wait_etcd
    wait_api_ready
    log "etcd restarted"
    ;;
  etcd-compact)
    revision="$(etcd_post /v3/kv/range '{"key":"AA=="}' | jq -r '.header.revision')"
    [ -n "$revision" ] && [ "$revision" != null ] || die "cannot read etcd's revision"
    etcd_post /v3/kv/compaction "{\"revision\":\"$revision\",\"physical\":true}" >/dev/null
    etcd_post /v3/maintenance/defragment '{}' >/dev/null
    # At once: a graceful stop drains requests for up to a minute, which this fault is not about.
    stop_process apiserver KILL
    start_process apiserver
    wait_api_ready
    log "etcd compacted to revision $revision and defragmented; kube-apiserver restarted on it"
    ;;
  node-add)
    node="${2:?usage: $0 node-add NAME}" agent="$(agent_of "${2:-}")"
    [ "$node" != local-node ] || die "local-node is the cluster's own node"
    port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    # The first agent's command line with another name and port. The state directory is
    # shared: claims are directories under it, so a workspace keeps its cache on either node.
    sed -E "s/--node-name local-node/--node-name $node/; s/--port [0-9]+/--port $port/" \
      "$STATE_DIR/cmds/node-agent" >"$STATE_DIR/cmds/$agent"
    start_process "$agent"
    for _ in $(seq 1 600); do kubectl_admin get node "$node" >/dev/null 2>&1 && break; sleep 0.1; done
    kubectl_admin taint node "$node" "pulumi-operator-rs.test/faults=$node:NoSchedule" --overwrite >/dev/null
    kubectl_admin label node "$node" "pulumi-operator-rs.test/node=$node" --overwrite >/dev/null
    wait_node_ready "$node"
    log "node $node added (its agent listens on 127.0.0.1:$port)"
    ;;
  node-down)
    node="${2:-local-node}" agent="$(agent_of "${2:-local-node}")"
    pid="$(pid_of "$agent")"
    if alive "$pid"; then
      # Frozen first, so that it starts no container between the listing and the kill.
      kill -STOP "$pid" 2>/dev/null || true
      containers_of "$pid" >"$STATE_DIR/pids/$agent.containers"
    fi
    stop_process "$agent" KILL
    end_containers "$agent"
    log "node $node is dead with its pods' processes; it goes NotReady after the grace period"
    ;;
  node-partition)
    node="${2:-local-node}" pid="$(pid_of "$(agent_of "${2:-local-node}")")"
    alive "$pid" || die "the agent of node $node is not running"
    kill -STOP "$pid"
    log "node $node is cut off (agent pid $pid stopped); its pods' processes run on"
    ;;
  node-heal)
    node="${2:-local-node}" pid="$(pid_of "$(agent_of "${2:-local-node}")")"
    alive "$pid" || die "the agent of node $node is not running"
    kill -CONT "$pid"
    wait_node_ready "$node"
    log "node $node answers again and is Ready"
    ;;
  agent-crash)
    node="${2:-local-node}" agent="$(agent_of "${2:-local-node}")"
    pid="$(pid_of "$agent")"
    alive "$pid" || die "the agent of node $node is not running"
    kill -STOP "$pid"
    containers_of "$pid" >"$STATE_DIR/pids/$agent.containers"
    stop_process "$agent" KILL
    log "the agent of node $node died; $(wc -l <"$STATE_DIR/pids/$agent.containers") container(s) live on"
    ;;
  node-up)
    node="${2:-local-node}" agent="$(agent_of "${2:-local-node}")"
    alive "$(pid_of "$agent")" && die "the agent of node $node is running"
    end_containers "$agent"
    start_process "$agent"
    wait_node_ready "$node"
    log "node $node is back and Ready"
    ;;
  node-remove)
    node="${2:?usage: $0 node-remove NAME}" agent="$(agent_of "${2:-}")"
    [ "$node" != local-node ] || die "local-node is the cluster's own node"
    if alive "$(pid_of "$agent" 2>/dev/null || echo 0)"; then
      containers_of "$(pid_of "$agent")" >"$STATE_DIR/pids/$agent.containers"
    fi
    stop_process "$agent" TERM
    end_containers "$agent"
    kubectl_admin delete node "$node" --wait=false >/dev/null 2>&1 || true
    rm -f "$STATE_DIR/pids/$agent" "$STATE_DIR/cmds/$agent"
    log "node $node removed"
    ;;
  disk-mount)
    dir="${2:?usage: $0 disk-mount DIR SIZE}" size="${3:?usage: $0 disk-mount DIR SIZE}"
    mkdir -p "$dir"
    mount -t tmpfs -o "size=$size,mode=0777" tmpfs "$dir" || die "cannot mount a tmpfs at $dir (root is required)"
    log "tmpfs of $size at $dir"
    ;;
  disk-fill)
    dir="${2:?usage: $0 disk-fill DIR}"
    dd if=/dev/zero of="$dir/.faults-fill" bs=64k status=none 2>/dev/null || true
    # dd stops at ENOSPC; the last blocks go to a second file.
    dd if=/dev/zero of="$dir/.faults-fill-tail" bs=512 status=none 2>/dev/null || true
    log "$dir is full ($(df -h --output=avail "$dir" | tail -n1 | tr -d ' ') left)"
    ;;
  disk-free)
    dir="${2:?usage: $0 disk-free DIR}"
    rm -f "$dir/.faults-fill" "$dir/.faults-fill-tail"
    log "$dir has room again"
    ;;
  disk-unmount)
    dir="${2:?usage: $0 disk-unmount DIR}"
    umount "$dir" || die "cannot unmount $dir"
    ;;
  *)
    sed -n '2,47p' "$0" >&2
    exit 2
    ;;
esac
