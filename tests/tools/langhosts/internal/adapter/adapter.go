// Package adapter is a TEST ADAPTER (never shipped) that the test tools put in front of the real
// Pulumi Node.js and Python language hosts of github.com/pulumi/pulumi/sdk/v3 v3.68.0 (the newest
// the Go module proxy serves; see ../../go.mod), so that the v3.259 Pulumi CLI the tests run can
// use them for policy packs too. That CLI runs a local policy pack directory (`--policy-pack DIR`)
// through the language host's RunPlugin call with kind "analyzer"; current hosts start the pack
// themselves, but the v3.68 Node.js host answers RunPlugin with "not supported" and the v3.68
// Python host runs `python <program>`, knowing nothing of analyzers. The adapter starts the real
// host beside it (`<name>-host`), serves gRPC on 127.0.0.1 itself and forwards every call byte for
// byte to that host, except RunPlugin of kind "analyzer": that one it runs as the CLI ran a policy
// pack before language hosts did (its "legacy" path, still in pkg/resource/plugin NewPolicyAnalyzer):
// the sdk's own dist script (pulumi-analyzer-policy / pulumi-analyzer-policy-python, of the same
// sdk version, installed beside the hosts) with the arguments [engine address, "."] and
// `-key=value` for each runtime option of PulumiPolicy.yaml, in the pack's directory, streaming
// its output and exit code back as RunPlugin responses. Users run current hosts (in the
// pulumi/pulumi-nodejs and pulumi/pulumi-python images), which need nothing of the kind.
package adapter

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// Config names one language's adapter.
type Config struct {
	// Name is the adapter's own name (pulumi-language-nodejs), for messages.
	Name string
	// Host is the file name of the real host beside the adapter.
	Host string
	// Script is the file name of the sdk's policy-pack script beside the adapter.
	Script string
	// HostArgs, if set, gives arguments to put before the CLI's own when starting the real host;
	// cwd is the directory the CLI started the adapter in.
	HostArgs func(cwd string) []string
}

const runPlugin = "/pulumirpc.LanguageRuntime/RunPlugin"

// Main runs the adapter; it does not return.
func Main(cfg Config) {
	fail := func(err error) {
		fmt.Fprintf(os.Stderr, "%s (test adapter): %v\n", cfg.Name, err)
		os.Exit(1)
	}
	self, err := os.Executable()
	if err != nil {
		fail(err)
	}
	dir := filepath.Dir(self)
	cwd, err := os.Getwd()
	if err != nil {
		fail(err)
	}
	var args []string
	if cfg.HostArgs != nil {
		args = cfg.HostArgs(cwd)
	}
	args = append(args, os.Args[1:]...)

	host := exec.Command(filepath.Join(dir, cfg.Host), args...)
	host.Stdin = os.Stdin
	host.Stderr = os.Stderr
	hostOut, err := host.StdoutPipe()
	if err != nil {
		fail(err)
	}
	// The host dies with the adapter. Pdeathsig follows the thread that started the child; the
	// main goroutine stays on its thread, which lives as long as the process.
	runtime.LockOSThread()
	host.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := host.Start(); err != nil {
		fail(fmt.Errorf("cannot start %s: %w", host.Path, err))
	}

	a := &adapter{cfg: cfg, dir: dir, groups: map[int]struct{}{}}
	exited := make(chan int, 1)
	out := bufio.NewReader(hostOut)
	line, readErr := out.ReadString('\n')
	if readErr != nil {
		// The host ended before it printed its port: pass on what it said and how it ended.
		os.Stdout.WriteString(line)
		_ = host.Wait()
		os.Exit(exitCode(host.ProcessState))
	}
	port, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		_ = host.Process.Kill()
		fail(fmt.Errorf("%s printed %q, not a port", cfg.Host, line))
	}

	conn, err := grpc.Dial(fmt.Sprintf("127.0.0.1:%d", port),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}),
			grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(math.MaxInt32)))
	if err != nil {
		_ = host.Process.Kill()
		fail(err)
	}
	a.conn = conn
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = host.Process.Kill()
		fail(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(a.handle),
		grpc.MaxRecvMsgSize(math.MaxInt32), grpc.MaxSendMsgSize(math.MaxInt32))
	go func() { _ = srv.Serve(lis) }()
	fmt.Printf("%d\n", lis.Addr().(*net.TCPAddr).Port)
	// Whatever else the host prints goes on to the CLI.
	go func() { _, _ = io.Copy(os.Stdout, out) }()

	go func() {
		_ = host.Wait()
		exited <- exitCode(host.ProcessState)
	}()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	for {
		select {
		case code := <-exited:
			// The adapter ends with its host.
			a.killAnalyzers(syscall.SIGKILL)
			os.Exit(code)
		case sig := <-signals:
			// Pass the signal on to the host (it is usually in the same process group, and got it
			// already) and to the policy packs (each in a group of its own); exit with the host,
			// or a little later if it does not end.
			a.killAnalyzers(sig.(syscall.Signal))
			_ = host.Process.Signal(sig)
			go func() {
				time.Sleep(5 * time.Second)
				a.killAnalyzers(syscall.SIGKILL)
				os.Exit(1)
			}()
		}
	}
}

func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return 1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

type adapter struct {
	cfg  Config
	dir  string
	conn *grpc.ClientConn

	mu     sync.Mutex
	groups map[int]struct{} // process groups of the running policy packs
}

func (a *adapter) killAnalyzers(sig syscall.Signal) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for pgid := range a.groups {
		_ = syscall.Kill(-pgid, sig)
	}
}

// frame is one message, undecoded.
type frame struct{ data []byte }

// rawCodec passes messages through as they are. It is named "proto" so that the content type on
// the wire is what both ends expect.
type rawCodec struct{}

func (rawCodec) Marshal(v interface{}) ([]byte, error) {
	f, ok := v.(*frame)
	if !ok {
		return nil, fmt.Errorf("rawCodec: cannot marshal %T", v)
	}
	return f.data, nil
}

func (rawCodec) Unmarshal(data []byte, v interface{}) error {
	f, ok := v.(*frame)
	if !ok {
		return fmt.Errorf("rawCodec: cannot unmarshal into %T", v)
	}
	f.data = append([]byte(nil), data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

// handle serves every call: RunPlugin of kind "analyzer" itself, all else by forwarding.
func (a *adapter) handle(_ interface{}, stream grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(stream)
	if !ok {
		return status.Error(codes.Internal, "no method name")
	}
	if method != runPlugin {
		return a.forward(stream, method, nil)
	}
	first := &frame{}
	if err := stream.RecvMsg(first); err != nil {
		return err
	}
	req, err := decodeRunPlugin(first.data)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "RunPluginRequest: %v", err)
	}
	if req.kind != "analyzer" {
		return a.forward(stream, method, first)
	}
	return a.runAnalyzer(stream, req)
}

// forward relays one call to the real host, messages, metadata and status unchanged. first, if
// set, is the client's first message, already read.
func (a *adapter) forward(stream grpc.ServerStream, method string, first *frame) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	md, _ := metadata.FromIncomingContext(ctx)
	out := metadata.MD{}
	for k, v := range md {
		// Transport headers are the client connection's own, set anew on the forwarded call.
		if strings.HasPrefix(k, ":") || k == "content-type" || k == "user-agent" || k == "te" ||
			strings.HasPrefix(k, "grpc-") {
			continue
		}
		out[k] = append([]string(nil), v...)
	}
	ctx = metadata.NewOutgoingContext(ctx, out)
	upstream, err := a.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		return err
	}

	// Client → host. SendMsg's io.EOF means the host already ended the call (a method it does
	// not know ends at once with Unimplemented, often before the request went on): sending is
	// over, and the call's real status comes from the host → client side.
	sent := make(chan error, 1)
	send := func(f *frame) (done bool, err error) {
		if err := upstream.SendMsg(f); err != nil {
			if errors.Is(err, io.EOF) {
				return true, nil
			}
			return true, err
		}
		return false, nil
	}
	go func() {
		if first != nil {
			if done, err := send(first); done {
				sent <- err
				return
			}
		}
		for {
			f := &frame{}
			if err := stream.RecvMsg(f); err != nil {
				if errors.Is(err, io.EOF) {
					sent <- upstream.CloseSend()
					return
				}
				sent <- err
				return
			}
			if done, err := send(f); done {
				sent <- err
				return
			}
		}
	}()

	// Host → client.
	received := make(chan error, 1)
	go func() {
		headerSent := false
		for {
			f := &frame{}
			err := upstream.RecvMsg(f)
			if !headerSent {
				if hdr, herr := upstream.Header(); herr == nil && len(hdr) > 0 {
					_ = stream.SendHeader(hdr)
				}
				headerSent = true
			}
			if err != nil {
				stream.SetTrailer(upstream.Trailer())
				if errors.Is(err, io.EOF) {
					received <- nil
				} else {
					received <- err
				}
				return
			}
			if err := stream.SendMsg(f); err != nil {
				received <- err
				return
			}
		}
	}()

	for {
		select {
		case err := <-sent:
			if err != nil {
				// The client went away (or the host refused a message): end the call.
				cancel()
				return status.Convert(err).Err()
			}
			sent = nil // sending done; wait for the host to finish
		case err := <-received:
			return err
		}
	}
}

// runPluginRequest holds the fields of pulumirpc.RunPluginRequest the adapter reads (the
// module's pulumirpc is v3.68's, which lacks `info` and `kind`).
type runPluginRequest struct {
	pwd        string
	args       []string
	env        []string
	root       string
	programDir string
	options    map[string]interface{}
	kind       string
}

func decodeRunPlugin(b []byte) (*runPluginRequest, error) {
	req := &runPluginRequest{}
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			req.pwd = string(v)
		case 3:
			req.args = append(req.args, string(v))
		case 4:
			req.env = append(req.env, string(v))
		case 5: // ProgramInfo
			return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				if typ != protowire.BytesType {
					return nil
				}
				switch num {
				case 1:
					req.root = string(v)
				case 2:
					req.programDir = string(v)
				case 4:
					var s structpb.Struct
					if err := proto.Unmarshal(v, &s); err != nil {
						return fmt.Errorf("ProgramInfo.options: %w", err)
					}
					req.options = s.AsMap()
				}
				return nil
			})
		case 6:
			req.kind = string(v)
		}
		return nil
	})
	return req, err
}

// eachField calls f with each field of a message; v is the content of a length-delimited field.
func eachField(b []byte, f func(protowire.Number, protowire.Type, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(b)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, typ, v); err != nil {
			return err
		}
	}
	return nil
}

// RunPluginResponse: oneof output { bytes stdout = 1; bytes stderr = 2; int32 exitcode = 3; }
func outputMessage(field protowire.Number, data []byte) *frame {
	b := protowire.AppendTag(nil, field, protowire.BytesType)
	return &frame{data: protowire.AppendBytes(b, data)}
}

func exitMessage(code int32) *frame {
	b := protowire.AppendTag(nil, 3, protowire.VarintType)
	return &frame{data: protowire.AppendVarint(b, uint64(int64(code)))}
}

// runAnalyzer runs a policy pack as the CLI's legacy path did: the sdk's script with
// [engine address, "."] and `-key=value` per runtime option, in the pack's directory.
func (a *adapter) runAnalyzer(stream grpc.ServerStream, req *runPluginRequest) error {
	dir := req.programDir
	if dir == "" {
		dir = req.root
	}
	if dir == "" {
		dir = req.pwd
	}
	if len(req.args) == 0 {
		return status.Error(codes.InvalidArgument, "RunPlugin(analyzer): no engine address in args")
	}
	// The CLI's own flags (-v, --logtostderr, --tracing X) come first, the engine address last.
	args := []string{req.args[len(req.args)-1], "."}
	keys := make([]string, 0, len(req.options))
	for k := range req.options {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if v := fmt.Sprintf("%v", req.options[k]); v != "" {
			args = append(args, fmt.Sprintf("-%s=%s", k, v))
		}
	}

	cmd := exec.Command(filepath.Join(a.dir, a.cfg.Script), args...)
	cmd.Dir = dir
	if len(req.env) > 0 {
		cmd.Env = req.env
	}
	// A group of its own, so that the script and what it starts (node, python) end together.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	a.mu.Lock()
	err = cmd.Start()
	if err == nil {
		a.groups[cmd.Process.Pid] = struct{}{}
	}
	a.mu.Unlock()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return status.Errorf(codes.Internal, "cannot run %s: %v", cmd.Path, err)
	}
	pgid := cmd.Process.Pid

	var sendMu sync.Mutex
	send := func(f *frame) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.SendMsg(f)
	}
	var wg sync.WaitGroup
	relay := func(r *os.File, field protowire.Number) {
		defer wg.Done()
		defer r.Close()
		buf := make([]byte, 32*1024)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				_ = send(outputMessage(field, append([]byte(nil), buf[:n]...)))
			}
			if err != nil {
				return
			}
		}
	}
	wg.Add(2)
	go relay(outR, 1)
	go relay(errR, 2)

	// The CLI ends the call (cancels it) when it closes the policy pack: end the pack's processes.
	done := make(chan struct{})
	go func() {
		select {
		case <-done:
		case <-stream.Context().Done():
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(3 * time.Second):
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
		}
	}()

	waitErr := cmd.Wait()
	// What the script started may still hold the pipes; once the script is gone, so are they.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	wg.Wait()
	close(done)
	a.mu.Lock()
	delete(a.groups, pgid)
	a.mu.Unlock()
	if stream.Context().Err() != nil {
		return status.FromContextError(stream.Context().Err()).Err()
	}
	code := exitCode(cmd.ProcessState)
	if waitErr != nil && cmd.ProcessState == nil {
		code = 1
	}
	return send(exitMessage(int32(code)))
}
