#!/usr/bin/env python3
"""A tiny loopback git HTTP server for tests: git's own `git http-backend` (smart HTTP,
protocol v0/v2) run as CGI behind Python's http.server, serving the bare repositories under
--root read-only (pushes are refused).

    python3 tests/git-http-server.py --root DIR [--port N] [--user U --password P] [--token T]

The first line on stdout is the base URL, `http://127.0.0.1:PORT` (a repository DIR/x.git is
at `http://127.0.0.1:PORT/x.git`); logs go to stderr. With --user/--password, HTTP basic auth
with exactly that pair is required; with --token, `Authorization: Bearer T` or basic auth
whose password is T (any user, as GitHub accepts tokens) is required; with both, either works.
Stdlib only. Listens on 127.0.0.1 only. Stops on SIGTERM/SIGINT.
"""

import argparse
import base64
import hmac
import http.server
import os
import signal
import subprocess
import sys
import urllib.parse


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", required=True, help="directory of bare repositories")
    p.add_argument("--port", type=int, default=0, help="port (default: any free one)")
    p.add_argument("--user", help="required basic-auth user name")
    p.add_argument("--password", help="required basic-auth password")
    p.add_argument("--token", help="accepted bearer token (or basic-auth password)")
    p.add_argument("--quiet", action="store_true", help="no request log on stderr")
    args = p.parse_args()
    if (args.user is None) != (args.password is None):
        p.error("--user and --password go together")
    return args


ARGS = None


def authorized(header):
    """Whether the Authorization header satisfies the configured credentials."""
    if ARGS.user is None and ARGS.token is None:
        return True
    if not header:
        return False
    scheme, _, value = header.partition(" ")
    scheme = scheme.lower()
    value = value.strip()
    if scheme == "bearer" and ARGS.token is not None:
        return hmac.compare_digest(value, ARGS.token)
    if scheme == "basic":
        try:
            user, _, password = base64.b64decode(value).decode("utf-8").partition(":")
        except Exception:
            return False
        if ARGS.user is not None and hmac.compare_digest(user, ARGS.user) and hmac.compare_digest(
            password, ARGS.password
        ):
            return True
        if ARGS.token is not None and hmac.compare_digest(password, ARGS.token):
            return True
    return False


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "git-http-server.py"

    def log_message(self, fmt, *args):
        if not ARGS.quiet:
            sys.stderr.write("git-http-server: %s %s\n" % (self.address_string(), fmt % args))

    def do_GET(self):
        self.serve()

    def do_POST(self):
        self.serve()

    def reply(self, code, text, headers=()):
        body = (text + "\n").encode()
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size_line = self.rfile.readline()
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    # Trailers until the empty line.
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def serve(self):
        if not authorized(self.headers.get("Authorization")):
            self.reply(401, "authentication required", [("WWW-Authenticate", 'Basic realm="git"')])
            return
        url = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(url.path)
        query = url.query
        if path.endswith("/git-receive-pack") or "service=git-receive-pack" in query:
            self.reply(403, "this server is read-only")
            return
        if ".." in path.split("/"):
            self.reply(404, "not found")
            return
        body = self.read_body() if self.command == "POST" else b""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": os.path.abspath(ARGS.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": "HTTP/1.0",
            "SERVER_SOFTWARE": self.server_version,
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "REMOTE_ADDR": self.client_address[0],
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
        }
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol"):
            env["HTTP_GIT_PROTOCOL"] = self.headers["Git-Protocol"]
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        proc = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, check=False
        )
        if proc.stderr:
            sys.stderr.write(proc.stderr.decode("utf-8", "replace"))
        out = proc.stdout
        sep = out.find(b"\r\n\r\n")
        sep_len = 4
        if sep < 0:
            sep = out.find(b"\n\n")
            sep_len = 2
        if sep < 0:
            self.reply(500, "git http-backend failed")
            return
        head, payload = out[:sep], out[sep + sep_len :]
        status = 200
        headers = []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers.append((name.strip(), value.strip()))
        self.send_response(status)
        for k, v in headers:
            if k.lower() != "content-length":
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def main():
    global ARGS
    ARGS = parse_args()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("http://127.0.0.1:%d" % server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
