package redistest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// A minimal RESP2 client for administrative commands: one connection per
// helper call, explicit deadlines, no background goroutines, and no
// cluster or sentinel discovery (which rueidis would do on its own).

// respError is an error reply of Redis.
type respError string

func (e respError) Error() string { return string(e) }

type respConn struct {
	c net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

func dialResp(ctx context.Context, addr string) (*respConn, error) {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &respConn{c: c, r: bufio.NewReader(c), w: bufio.NewWriter(c)}, nil
}

func (rc *respConn) Close() { rc.c.Close() }

// do pipelines cmds and returns one reply per command; error replies are
// returned as respError values, not as err.
func (rc *respConn) do(ctx context.Context, cmds ...[]string) ([]any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(adminTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	rc.c.SetDeadline(deadline)
	for _, cmd := range cmds {
		fmt.Fprintf(rc.w, "*%d\r\n", len(cmd))
		for _, a := range cmd {
			fmt.Fprintf(rc.w, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	if err := rc.w.Flush(); err != nil {
		return nil, err
	}
	out := make([]any, len(cmds))
	for i := range cmds {
		v, err := readReply(rc.r)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// query sends cmds to addr on a new connection and returns their replies.
// It fails on the first error reply.
func query(addr string, cmds ...[]string) ([]any, error) {
	rc, err := dialResp(context.Background(), addr)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	out, err := rc.do(context.Background(), cmds...)
	if err != nil {
		return nil, err
	}
	for i, v := range out {
		if e, ok := v.(respError); ok {
			return nil, fmt.Errorf("%s: %w", strings.Join(cmds[i], " "), e)
		}
	}
	return out, nil
}

// readReply reads one RESP2 reply: string, int64, nil, []any or respError.
func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || !strings.HasSuffix(line, "\r\n") {
		return nil, fmt.Errorf("malformed reply line %q", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return respError(body), nil
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, fmt.Errorf("malformed bulk length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, fmt.Errorf("malformed array length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		arr := make([]any, n)
		for i := range arr {
			if arr[i], err = readReply(r); err != nil {
				return nil, err
			}
		}
		return arr, nil
	}
	return nil, fmt.Errorf("unsupported reply %q", line)
}

// asString returns a string reply, or the error it is.
func asString(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case respError:
		return "", v
	}
	return "", fmt.Errorf("unexpected reply %v", v)
}

// infoField returns the value of field in an INFO or CLUSTER INFO reply.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}
