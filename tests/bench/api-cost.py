#!/usr/bin/env python3
"""What the API server spends on each request an operation needs, and the floor of
"N Stacks applied at once -> all Jobs" on this machine. Measurement tool for docs/benchmarks.md,
run by hand against the local cluster (tests/local-cluster.sh up); never shipped.

  tests/bench/api-cost.py requests [N]   N requests of each kind the operator sends for one
                                         operation (shapes from fixtures/operation-objects.json),
                                         4 clients; API server, etcd, controller-manager and
                                         scheduler CPU seconds per 1,000 from /proc
  tests/bench/api-cost.py floor [N]      stands in for an operator that costs nothing: it
                                         watches Stacks and POSTs one Job (the operator's shape)
                                         per Stack the moment it appears, while
                                         `kubectl apply --server-side` sends N Stacks from one
                                         file; prints the time to the last Job
  tests/bench/api-cost.py api-floor [N]  the same with what a Stack's first operation needs in
                                         this API, per Stack: one status write (merge patch of
                                         the Stack's status: currentUpdate, the Ready and
                                         Reconciling conditions), the Update (owned by the
                                         Stack, with the operator's finalizer) and its Job
                                         (owned by the Update)

All three scale the installed operator (deployment pulumi-operator/pulumi-operator) to 0 and
cordon the nodes for the run (pods held Pending, as in tests/bench.rs), then put both back and
wait for the operator's rollout. `floor` and `api-floor` end with one JSON line of their figures
(read by tests/bench.rs, BENCH_FLOORS).
"""
import base64
import copy
import http.client
import json
import os
import queue
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
KUBECONFIG = os.environ.get("KUBECONFIG", os.path.join(ROOT, ".local-cluster", "kubeconfig"))
OBJECTS = json.load(open(os.path.join(HERE, "fixtures", "operation-objects.json")))
CLIENTS = 4


def kubectl(*args, check=True):
    env = dict(os.environ, KUBECONFIG=KUBECONFIG)
    return subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, check=check)


class Client:
    """One keep-alive HTTPS connection with the kubeconfig's bearer token or client cert."""

    def __init__(self):
        cfg = json.loads(kubectl("config", "view", "--raw", "--minify", "-o", "json").stdout)
        cluster = cfg["clusters"][0]["cluster"]
        user = cfg["users"][0]["user"]
        hostport = cluster["server"].removeprefix("https://")
        self.host, _, port = hostport.partition(":")
        self.port = int(port or 443)
        self.ctx = ssl.create_default_context()
        if "certificate-authority" in cluster:
            self.ctx.load_verify_locations(cafile=cluster["certificate-authority"])
        elif "certificate-authority-data" in cluster:
            self.ctx.load_verify_locations(
                cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        self.ctx.check_hostname = False
        self.headers = {"Accept": "application/json"}
        if "token" in user:
            self.headers["Authorization"] = "Bearer " + user["token"]
        elif "client-certificate" in user:
            self.ctx.load_cert_chain(user["client-certificate"], user["client-key"])
        self.conn = None

    def send(self, method, path, body=None, ctype="application/json"):
        if self.conn is None:
            self.conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx)
        headers = dict(self.headers, **{"Content-Type": ctype})
        try:
            self.conn.request(method, path, body=None if body is None else json.dumps(body),
                              headers=headers)
            response = self.conn.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException):
            self.conn = None
            raise
        if response.status >= 300:
            raise RuntimeError(f"{method} {path}: {response.status} {data[:300]!r}")
        return data

    def stream(self, path):
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx)
        conn.request("GET", path, headers=self.headers)
        return conn.getresponse()


PROCESSES = ["kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler"]


def cpu_seconds():
    """CPU seconds used so far by each control-plane process of the local cluster."""
    ticks = os.sysconf("SC_CLK_TCK")
    used = dict.fromkeys(PROCESSES, 0.0)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        # /proc's comm holds the first 15 characters of the name.
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        for name in PROCESSES:
            if name[:15] == comm:
                fields = stat[stat.rindex(")") + 2:].split()
                used[name] += (int(fields[11]) + int(fields[12])) / ticks
    return used


class Quiet:
    """The operator stopped and the nodes cordoned for the run; both put back after."""

    def __enter__(self):
        deploy = kubectl("-n", "pulumi-operator", "get", "deployment", "pulumi-operator",
                         "-o", "jsonpath={.spec.replicas}", check=False)
        self.replicas = deploy.stdout.strip() if deploy.returncode == 0 else None
        if self.replicas:
            kubectl("-n", "pulumi-operator", "scale", "deployment", "pulumi-operator",
                    "--replicas=0")
            kubectl("-n", "pulumi-operator", "wait", "--for=delete", "pod",
                    "-l", "app.kubernetes.io/name=pulumi-operator", "--timeout=120s", check=False)
        nodes = json.loads(kubectl("get", "nodes", "-o", "json").stdout)["items"]
        self.cordoned = [n["metadata"]["name"] for n in nodes
                         if not n["spec"].get("unschedulable")]
        for node in self.cordoned:
            kubectl("cordon", node)
        return self

    def __exit__(self, *_):
        for node in self.cordoned:
            kubectl("uncordon", node, check=False)
        if self.replicas:
            kubectl("-n", "pulumi-operator", "scale", "deployment", "pulumi-operator",
                    f"--replicas={self.replicas}", check=False)
            # Back and Ready before whatever runs next measures it (tests/bench.rs).
            kubectl("-n", "pulumi-operator", "rollout", "status", "deployment/pulumi-operator",
                    "--timeout=180s", check=False)


def namespace(prefix):
    ns = f"{prefix}-{uuid.uuid4().hex[:5]}"
    kubectl("create", "namespace", ns)
    kubectl("-n", ns, "create", "serviceaccount", "pulumi")
    kubectl("-n", ns, "create", "secret", "generic", "passphrase", "--from-literal=passphrase=x")
    return ns


def fresh(obj, ns, name):
    obj = copy.deepcopy(obj)
    obj["metadata"]["name"] = name
    obj["metadata"]["namespace"] = ns
    return obj


def job_for(ns, name):
    job = fresh(OBJECTS["job"], ns, name)
    for volume in job["spec"]["template"]["spec"].get("volumes", []):
        if "secret" in volume:
            volume["secret"]["secretName"] = f"{name}-plan"
    return job


def stacks_yaml(count):
    docs = []
    for i in range(count):
        spec = dict(OBJECTS["stackSpec"], stack=f"s{i}")
        docs.append(json.dumps({"apiVersion": "pulumi.com/v1", "kind": "Stack",
                                "metadata": {"name": f"s{i}"}, "spec": spec}))
    # JSON documents are YAML; the leading separator keeps kubectl from reading one JSON value.
    return "".join(f"---\n{d}\n" for d in docs)


def apis(group, ns):
    return f"/apis/{group}/namespaces/{ns}"


def request_kinds(ns):
    """(kind, request for the i-th object): in the order one operation sends them."""
    st, auto = apis("pulumi.com/v1", ns), apis("auto.pulumi.com/v1alpha1", ns)
    apply = "application/apply-patch+yaml"

    def stack_status(i):
        status = copy.deepcopy(OBJECTS["stackStatus"])
        status["currentUpdate"]["name"] = f"s{i}-claim"
        return ("PATCH", f"{st}/stacks/s{i}/status?fieldManager=bench-stack-status&force=true",
                {"apiVersion": "pulumi.com/v1", "kind": "Stack", "status": status}, apply)

    return [
        ("Stack applied (as kubectl apply --server-side)", lambda i: (
            "PATCH", f"{st}/stacks/s{i}?fieldManager=kubectl&force=true",
            {"apiVersion": "pulumi.com/v1", "kind": "Stack", "metadata": {"name": f"s{i}"},
             "spec": dict(OBJECTS["stackSpec"], stack=f"s{i}")}, apply)),
        ("Stack finalizer (merge patch)", lambda i: (
            "PATCH", f"{st}/stacks/s{i}",
            {"metadata": {"finalizers": ["finalizer.stack.pulumi.com"]}},
            "application/merge-patch+json")),
        ("Stack status claim (apply)", stack_status),
        ("Workspace (apply)", lambda i: (
            "PATCH", f"{auto}/workspaces/s{i}?fieldManager=bench&force=true",
            {"apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Workspace",
             "metadata": {"name": f"s{i}"}, "spec": OBJECTS["workspaceSpec"]}, apply)),
        ("Workspace status (apply)", lambda i: (
            "PATCH", f"{auto}/workspaces/s{i}/status?fieldManager=bench-ws-status&force=true",
            {"apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Workspace",
             "status": OBJECTS["workspaceStatus"]}, apply)),
        ("Update created", lambda i: (
            "POST", f"{auto}/updates", fresh(OBJECTS["update"], ns, f"s{i}-op"), "application/json")),
        ("plan Secret created", lambda i: (
            "POST", f"/api/v1/namespaces/{ns}/secrets",
            fresh(OBJECTS["planSecret"], ns, f"s{i}-op-plan"), "application/json")),
        ("Update status (apply)", lambda i: (
            "PATCH", f"{auto}/updates/s{i}-op/status?fieldManager=bench-update-status&force=true",
            {"apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Update",
             "status": OBJECTS["updateStatus"]}, apply)),
        ("Event created", lambda i: (
            "POST", f"/api/v1/namespaces/{ns}/events",
            dict(fresh(OBJECTS["event"], ns, f"s{i}.bench"),
                 involvedObject=dict(OBJECTS["event"]["involvedObject"], name=f"s{i}",
                                     namespace=ns)), "application/json")),
        ("Job created (and its pod, made and found unschedulable)", lambda i: (
            "POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job_for(ns, f"s{i}-op"),
            "application/json")),
    ]


def run_requests(count, make):
    work = queue.Queue()
    for i in range(count):
        work.put(i)
    errors = []

    def worker():
        client = Client()
        while True:
            try:
                i = work.get_nowait()
            except queue.Empty:
                return
            try:
                client.send(*make(i))
            except Exception as e:  # counted and shown: a failed request is not measured
                errors.append(str(e))

    threads = [threading.Thread(target=worker) for _ in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def requests_table(count):
    with Quiet():
        ns = namespace("t-bench-cost")
        try:
            print(f"| request ({count} of each, {CLIENTS} clients) | wall s | "
                  "kube-apiserver CPU ms each | etcd | controller-manager | scheduler |")
            print("|---|---|---|---|---|---|")
            for kind, make in request_kinds(ns):
                before, start = cpu_seconds(), time.time()
                errors = run_requests(count, make)
                wall = time.time() - start
                # What a request sets off (a Job's pod, the scheduler's verdict) settles after.
                time.sleep(25 if kind.startswith("Job") else 2)
                after = cpu_seconds()
                each = {p: 1000 * (after[p] - before[p]) / count for p in PROCESSES}
                print(f"| {kind} | {wall:.2f} | {each['kube-apiserver']:.2f} | "
                      f"{each['etcd']:.2f} | {each['kube-controller-manager']:.2f} | "
                      f"{each['kube-scheduler']:.2f} |", flush=True)
                if errors:
                    sys.exit(f"{len(errors)} requests failed, e.g. {errors[0]}")
        finally:
            # The finalizers sent above (the Stacks' and the Updates') would hold the namespace:
            # nothing runs to remove them.
            for path in (f"{apis('pulumi.com/v1', ns)}/stacks/s{{i}}",
                         f"{apis('auto.pulumi.com/v1alpha1', ns)}/updates/s{{i}}-op"):
                run_requests(count, lambda i, path=path: (
                    "PATCH", path.format(i=i), {"metadata": {"finalizers": None}},
                    "application/merge-patch+json"))
            # Gone before the operator is back, or it would start operations for these Stacks.
            kubectl("delete", "namespace", ns, "--timeout=600s", check=False)


def burst(ns, count, for_stack):
    """`kubectl apply --server-side` of `count` Stacks from one file while CLIENTS clients run
    for_stack(client, stack) for each Stack the moment a watch shows it: (apply s, s from the
    apply's start until the last for_stack ended, control-plane CPU s until then)."""
    stacks, done, errors, lock = queue.Queue(), [], [], threading.Lock()

    def sender():
        client = Client()
        while (stack := stacks.get()) is not None:
            try:
                for_stack(client, stack)
            except Exception as e:  # shown below: a floor with failed requests is no floor
                errors.append(str(e))
            with lock:
                done.append(time.time())

    def watcher():
        seen = set()
        response = Client().stream(f"{apis('pulumi.com/v1', ns)}/stacks?watch=true")
        while len(seen) < count and (line := response.readline()):
            event = json.loads(line)
            name = event["object"]["metadata"]["name"]
            if event["type"] == "ADDED" and name not in seen:
                seen.add(name)
                stacks.put(event["object"])

    for target in [watcher] + [sender] * CLIENTS:
        threading.Thread(target=target, daemon=True).start()
    time.sleep(1)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(stacks_yaml(count))
        f.flush()
        before, start = cpu_seconds(), time.time()
        kubectl("-n", ns, "apply", "--server-side", "-f", f.name)
        applied = time.time() - start
    while True:
        with lock:
            if errors:
                sys.exit(f"{len(errors)} requests failed, e.g. {errors[0]}")
            if len(done) >= count:
                break
        if time.time() - start > 600:
            sys.exit(f"only {len(done)} of {count} Stacks served after 600 s")
        time.sleep(0.05)
    used = cpu_seconds()
    return applied, max(done) - start, {p: used[p] - before[p] for p in PROCESSES}


def report(mode, count, applied, last, cpu):
    text = " · ".join(f"{p} {cpu[p]:.1f}" for p in PROCESSES)
    print(f"{count} Stacks applied in {applied:.1f} s; all {count} Jobs created "
          f"{last:.1f} s after the apply began; CPU s until then: {text}")
    # The same figures for tests/bench.rs: one JSON line, the last one.
    print(json.dumps({"mode": mode, "stacks": count, "apply_seconds": round(applied, 3),
                      "all_jobs_seconds": round(last, 3),
                      "cpu_seconds": {p: round(cpu[p], 2) for p in PROCESSES}}), flush=True)


def post_job(client, ns, stack):
    client.send("POST", f"/apis/batch/v1/namespaces/{ns}/jobs",
                job_for(ns, f"{stack['metadata']['name']}-op"))


def owned_by(obj):
    meta = obj["metadata"]
    return [{"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"],
             "uid": meta["uid"], "controller": True}]


def first_operation(client, ns, stack):
    """What a Stack's first operation needs in this API, in the operator's order: the Stack's
    status naming the Update (the claim: currentUpdate, the Ready and Reconciling conditions, one
    merge patch), the Update (owned by the Stack, with the operator's finalizer), its Job (owned
    by the Update)."""
    name = stack["metadata"]["name"]
    status = copy.deepcopy(OBJECTS["stackStatus"])
    status["currentUpdate"]["name"] = f"{name}-op"
    client.send("PATCH", f"{apis('pulumi.com/v1', ns)}/stacks/{name}/status", {"status": status},
                "application/merge-patch+json")
    update = fresh(OBJECTS["update"], ns, f"{name}-op")
    update["metadata"]["ownerReferences"] = owned_by(stack)
    update = json.loads(client.send("POST", f"{apis('auto.pulumi.com/v1alpha1', ns)}/updates",
                                    update))
    job = job_for(ns, f"{name}-op")
    job["metadata"]["ownerReferences"] = owned_by(update)
    client.send("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job)


def floor(count):
    with Quiet():
        ns = namespace("t-bench-floor")
        try:
            report("floor", count, *burst(ns, count, lambda c, stack: post_job(c, ns, stack)))
        finally:
            # Gone before the operator is back, or it would start operations for these Stacks.
            kubectl("delete", "namespace", ns, "--timeout=600s", check=False)


def api_floor(count):
    with Quiet():
        ns = namespace("t-bench-api-floor")
        try:
            report("api-floor", count,
                   *burst(ns, count, lambda c, stack: first_operation(c, ns, stack)))
        finally:
            # The Updates' finalizer would hold the namespace: nothing runs to remove it (an
            # Update never created fails here, unseen).
            run_requests(count, lambda i: (
                "PATCH", f"{apis('auto.pulumi.com/v1alpha1', ns)}/updates/s{i}-op",
                {"metadata": {"finalizers": None}}, "application/merge-patch+json"))
            # Gone before the operator is back, or it would start operations for these Stacks.
            kubectl("delete", "namespace", ns, "--timeout=600s", check=False)


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    if mode == "requests":
        requests_table(n)
    elif mode == "floor":
        floor(n)
    elif mode == "api-floor":
        api_floor(n)
    else:
        sys.exit(__doc__)
