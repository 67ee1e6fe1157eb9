// Command ratelimit runs envoyproxy/ratelimit's service as its own
// service_cmd does, configured by the same environment variables
// (REDIS_URL, REDIS_SOCKET_TYPE, RUNTIME_ROOT, GRPC_PORT, ...), for
// tollgate-bench's RLS suite. It is a module of its own so that
// ratelimit's dependencies stay out of the bench module. tollgate-bench
// builds it and runs it as one of its target processes: once the service
// answers its health check, it prints its gRPC address, then answers each
// line on its standard input with the CPU time it has used so far
// (nanoseconds, user and system), and exits when its standard input
// closes.
package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/envoyproxy/ratelimit/src/service_cmd/runner"
	"github.com/envoyproxy/ratelimit/src/settings"
)

func main() {
	s := settings.NewSettings()
	r := runner.NewRunner(s)
	go r.Run()
	if err := awaitHealthy(fmt.Sprintf("http://%s/healthcheck", net.JoinHostPort(s.Host, fmt.Sprint(s.Port))), 30*time.Second); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(net.JoinHostPort(s.GrpcHost, fmt.Sprint(s.GrpcPort)))
	for sc := bufio.NewScanner(os.Stdin); sc.Scan(); {
		fmt.Println(int64(cpuTime()))
	}
	r.Stop()
}

// awaitHealthy polls url until it answers 200 OK, for at most d.
func awaitHealthy(url string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for ratelimit's health check at %s: %w", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cpuTime returns the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fmt.Fprintln(os.Stderr, "reading the CPU time:", err)
		os.Exit(1)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
