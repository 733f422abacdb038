package console_test

import (
	"context"
	"flag"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sproutmq/sprout/engine"
	"github.com/sproutmq/sprout/internal/admin"
	"github.com/sproutmq/sprout/internal/testproc"
	"github.com/sproutmq/sprout/store"
)

var update = flag.Bool("update", false, "TestScreenshots: write the console guide's screenshots into docs/")

// screenshotSpeed is how much faster than the wall clock the history's
// clock runs while the screenshots are made: an hour of history in 40 s.
const screenshotSpeed = 90

// TestScreenshots makes the pictures of the console in docs/console.md
// and the README:
//
//	go test ./internal/console -run TestScreenshots -args -update
//
// The server runs in this process, so that its history (admin.Config.Now
// and HistoryConfig.Interval) can run screenshotSpeed times faster than
// the wall clock: 40 s of made-up traffic on a few tubes fill the hour the
// charts show. Everything else (figures, lists, uptime) is real.
func TestScreenshots(t *testing.T) {
	if !*update {
		t.Skip("makes the console guide's screenshots with -args -update")
	}
	base, protocol := startInProcess(t)
	traffic := startTraffic(t, protocol, 40*time.Second)

	b := newTab(t, base)
	b.login(testToken)
	<-traffic // the hour is full; the traffic goes on at its last rates
	docs := filepath.Join("..", "..", "docs")
	if err := os.MkdirAll(docs, 0o755); err != nil {
		t.Fatal(err)
	}
	shoot := func(path, name string, width, height int64) {
		b.do(chromedp.EmulateViewport(width, height))
		b.open(path)
		b.waitFor(`document.querySelectorAll("tbody tr").length > 0 && !document.querySelector("[aria-busy]") &&
			[...document.querySelectorAll(".plot .waiting")].every(n => n.hidden)`)
		time.Sleep(300 * time.Millisecond) // the charts' first paint
		png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(docs, name)
		if err := os.WriteFile(file, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d bytes", file, len(png))
	}
	shoot("/", "console-overview.png", 1280, 900)
	shoot("/tubes/emails", "console-tube.png", 1280, 1040)
	shoot("/", "console-overview-390.png", 390, 844)
}

// startInProcess runs a server in memory in this process, with the admin
// API's clock screenshotSpeed times faster, and serves the API and the
// console on a side port. It returns the side port's base URL and the
// protocol's address.
func startInProcess(t *testing.T) (base, protocol string) {
	t.Helper()
	st := store.New(store.Options{})
	protocol = freeAddr(t)
	srv := engine.New(engine.Config{Network: "tcp", Address: protocol, Loops: 2, MaxJobSize: 65535, Version: "dev"}, st)
	errc := make(chan error, 1)
	go func() { errc <- srv.Run() }()
	select {
	case <-srv.Ready():
	case err := <-errc:
		t.Fatal(err)
	}
	start := time.Now()
	clock := func() time.Time {
		return start.Add(-time.Hour).Add(time.Since(start) * screenshotSpeed)
	}
	api := admin.New(admin.Config{
		Store: st, Engine: srv, MaxJobSize: 65535, Token: testToken, Now: clock,
		History: admin.HistoryConfig{Interval: admin.DefaultHistoryInterval / screenshotSpeed},
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: mount(t, api), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() {
		_ = hs.Close()
		api.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Stop(ctx)
		<-errc
		st.Close()
	})
	return "http://" + ln.Addr().String(), protocol
}

func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := testproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// load is one tube's made-up traffic: at f, the fraction of the run gone,
// puts and reserves per 20 ms (1.8 s of the history's clock), every buryEvery-th reserved job buried (0:
// none), and delay on one put in delayEvery (0: none).
type load struct {
	tube                  string
	puts, works           func(f float64) int
	buryEvery, delayEvery int
	body                  string
}

// wave is base plus amp times a sine of period periods over the run.
func wave(base, amp, periods, phase float64) func(float64) int {
	return func(f float64) int {
		return max(0, int(math.Round(base+amp*math.Sin(2*math.Pi*(f*periods+phase)))))
	}
}

// startTraffic runs a producer and a worker per tube for d, in ticks of
// 4 ms (many to a sample, so that the rates drawn are smooth), and goes on
// at the last rates until the test ends. The channel is closed after d.
func startTraffic(t *testing.T, addr string, d time.Duration) <-chan struct{} {
	loads := []load{
		{tube: "emails", puts: wave(30, 18, 2, 0), works: wave(30, 6, 1, 0.3), buryEvery: 150,
			body: `{"to":"user%d@example.com","template":"welcome","locale":"en"}`},
		{tube: "thumbnails", puts: wave(18, 14, 3, 0.1), works: wave(16, 0, 1, 0), delayEvery: 40,
			body: `{"image":"uploads/%d.jpg","sizes":[64,256,1024]}`},
		{tube: "webhooks/outbound", puts: wave(9, 5, 4, 0.5), works: wave(8, 3, 2, 0), buryEvery: 40,
			body: `{"endpoint":"https://hooks.example.net/%d","event":"order.paid"}`},
		{tube: "reports.monthly", puts: wave(2, 2, 1, 0.7), works: wave(1, 1, 1, 0.2),
			body: `{"report":"revenue","month":"2026-10","part":%d}`},
		{tube: "search-index", puts: wave(12, 10, 6, 0.2), works: wave(13, 0, 1, 0), delayEvery: 9,
			body: `{"doc":%d,"op":"upsert"}`},
	}
	const tick = 4 * time.Millisecond
	const perTick = float64(tick) / float64(20*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	start := time.Now()
	frac := func() float64 { return min(1, float64(time.Since(start))/float64(d)) }
	// ticks turns a rate per 20 ms into whole operations for one tick,
	// carrying the fractions over.
	ticks := func(rate func(float64) int) func(f float64) int {
		carry := 0.0
		return func(f float64) int {
			carry += float64(rate(f)) * perTick
			n := int(carry)
			carry -= float64(n)
			return n
		}
	}
	run := func(name string, step func(c *testproc.Conn, f float64) error) {
		c, err := testproc.Dial(addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			for next := time.Now(); ctx.Err() == nil; next = next.Add(tick) {
				time.Sleep(time.Until(next))
				if err := step(c, frac()); err != nil && ctx.Err() == nil {
					t.Errorf("%s: %v", name, err)
					return
				}
			}
		}()
	}
	for _, l := range loads {
		n, using, puts := 0, false, ticks(l.puts)
		run("producer of "+l.tube, func(c *testproc.Conn, f float64) error {
			if !using {
				if err := c.ExpectLine("use "+l.tube, "USING "+l.tube); err != nil {
					return err
				}
				using = true
			}
			for range puts(f) {
				n++
				delay := 0
				if l.delayEvery > 0 && n%l.delayEvery == 0 {
					delay = 30 + n%300
				}
				if _, err := c.Put(uint32(100+n%2000), delay, 60, fmt.Appendf(nil, l.body, n)); err != nil {
					return err
				}
			}
			return nil
		})
		reserved, watching, works := 0, false, ticks(l.works)
		run("worker of "+l.tube, func(c *testproc.Conn, f float64) error {
			if !watching {
				if err := c.ExpectLine("watch "+l.tube, "WATCHING 2"); err != nil {
					return err
				}
				if err := c.ExpectLine("ignore default", "WATCHING 1"); err != nil {
					return err
				}
				watching = true
			}
			for range works(f) {
				r, err := c.Do("reserve-with-timeout 0", nil)
				if err != nil {
					return err
				}
				if r.Kind != testproc.ReplyReserved {
					return nil // nothing ready
				}
				reserved++
				cmd := fmt.Sprintf("delete %d", r.N)
				if l.buryEvery > 0 && reserved%l.buryEvery == 0 {
					cmd = fmt.Sprintf("bury %d 1024", r.N)
				}
				if _, err := c.Do(cmd, nil); err != nil {
					return err
				}
			}
			return nil
		})
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
		close(done)
	}()
	return done
}
