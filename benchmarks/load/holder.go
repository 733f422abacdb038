package load

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Idle connections beside a cluster's traffic are held by child
// processes, one per member: each process has the machine's open-file
// limit to itself (20,000 here), and a cluster's members together hold
// more idle connections than one process may (3 × 19,000 for issue 23's
// goal). A holder is this program run again with holderEnv set; the
// program's main calls RunHolderIfAsked first.

// holderEnv, set to "ADDR N", makes a process an idle holder.
const holderEnv = "SPROUTBENCH_HOLD_IDLE"

// RunHolderIfAsked makes this process an idle holder, if holderEnv says
// so, and then exits it: it opens N connections to ADDR that send
// nothing, writes "held N" (or "error: ...") on its standard output, and
// holds them until its standard input ends. Otherwise it returns at once.
func RunHolderIfAsked() {
	spec, ok := os.LookupEnv(holderEnv)
	if !ok {
		return
	}
	addr, count, _ := strings.Cut(spec, " ")
	n, err := strconv.Atoi(count)
	if err != nil || n <= 0 {
		fmt.Printf("error: %s=%q: want \"ADDR N\"\n", holderEnv, spec)
		os.Exit(2)
	}
	var opened atomic.Int64
	conns, err := dialIdle(context.Background(), addr, n, &opened)
	if err != nil {
		fmt.Printf("error: %v\n", err)
	} else {
		fmt.Printf("held %d\n", opened.Load())
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	closeIdle(conns)
	os.Exit(0)
}

// holder is a running idle holder.
type holder struct {
	cmd   *exec.Cmd
	stdin io.Closer
	held  int64
}

// startHolder runs an idle holder of n connections to addr, and returns
// once it holds them all.
func startHolder(ctx context.Context, addr string, n int) (*holder, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d", holderEnv, addr, n))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	h := &holder{cmd: cmd, stdin: stdin}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- strings.TrimSpace(s)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case s := <-line:
		if held, ok := strings.CutPrefix(s, "held "); ok {
			h.held, _ = strconv.ParseInt(held, 10, 64)
			return h, nil
		}
		h.stop()
		if s == "" {
			return nil, errors.New("load: an idle holder ended without a word")
		}
		return nil, fmt.Errorf("load: an idle holder of %d connections to %s: %s", n, addr, s)
	case <-time.After(2 * memoryTimeout):
		h.stop()
		return nil, fmt.Errorf("load: an idle holder of %d connections to %s did not report within %v", n, addr, 2*memoryTimeout)
	}
}

// stop has the holder close its connections and waits for it to end.
func (h *holder) stop() {
	_ = h.stdin.Close()
	done := make(chan struct{})
	go func() {
		_ = h.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(memoryTimeout):
		_ = h.cmd.Process.Kill()
		<-done
	}
}
