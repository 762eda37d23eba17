package adapter

import (
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// serve starts a gRPC server on loopback with handler for every method; it returns its address.
func serve(t *testing.T, handler grpc.StreamHandler) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(handler))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.Dial(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// A method the real host does not know (the CLI's GetRequiredPackages to a v3.68 host) ends at
// once with Unimplemented, often before the adapter has sent the request on: the CLI must get
// that status, on which it falls back to the older call, and never a bare "EOF" (seen in CI:
// "failed to discover package requirements: EOF").
func TestAnUnknownMethodsStatusReachesTheClient(t *testing.T) {
	host := serve(t, func(_ interface{}, stream grpc.ServerStream) error {
		return status.Error(codes.Unimplemented, "unknown method")
	})
	a := &adapter{conn: dial(t, host), groups: map[int]struct{}{}}
	client := dial(t, serve(t, a.handle))

	const calls = 2000
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for i := 0; i < calls; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reply := &frame{}
			err := client.Invoke(context.Background(), "/pulumirpc.LanguageRuntime/GetRequiredPackages",
				&frame{data: make([]byte, 64)}, reply)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	wrong := map[string]int{}
	for err := range errs {
		if status.Code(err) != codes.Unimplemented {
			wrong[status.Convert(err).Message()]++
		}
	}
	if len(wrong) > 0 {
		t.Fatalf("of %d calls, these did not end Unimplemented (message: count): %v", calls, wrong)
	}
}
