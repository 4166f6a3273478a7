// Command gobench drives a NATS server with nats.go, fast enough that the benchmark measures
// the server rather than the client (nats-py saturates long before either server does).
//
// It runs one scenario and prints, as the last line of stdout, one JSON object that
// bench/loads_gobench.py reads: received, seconds, ok and client (the nats.go version), plus
// msgs_per_s, mb_per_s and, for the JetStream scenarios, stored (and storage, unless
// -existing-stream).
//
// Scenarios (payloads of -size zero bytes):
//
//	core_pub      -msgs publishes on gobench.core, no subscriber, then a flush
//	core_pubsub   the same with a subscriber on a second connection; counts what arrives.
//	              -sub-url puts the subscriber on another server of a cluster (default -url):
//	              the run then starts once a probe published at -url arrives there, so the
//	              subscription's interest has crossed the route before the clock starts
//	js_pub_async  stream GOBENCH (gobench.js, -storage), async publishes, -window in flight.
//	              -existing-stream publishes into a GOBENCH the caller created instead (so the
//	              caller chose which server of a cluster holds it): purged before the clock
//	              starts, kept at exit; -storage and -replicas are then refused
//	js_fetch      preloads GOBENCH, then durable pull consumer GOPULL fetches -batch and acks
//
// Without -existing-stream the JetStream scenarios recreate GOBENCH on every run and delete it
// at exit. When nats.go gives up on a full async window its error says "stalled"; gobench exits
// 1 with it on stderr so that the Python side can tell a stall (which it retries) from other
// failures.
//
// Built offline in GOPATH mode against Debian's nats.go (golang-github-nats-io-go-nats-dev):
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go build -o /tmp/headwater-gobench/gobench main.go
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

const (
	coreSubject = "gobench.core"
	// core_pubsub with -sub-url: published until it crosses the route (awaitRemoteInterest).
	probeSubject = "gobench.probe"
	jsSubject    = "gobench.js"
	streamName   = "GOBENCH"
	durableName  = "GOPULL"
	// core_pubsub: how far the publisher may run ahead of the subscriber. The server would
	// otherwise cut the subscriber off as a slow consumer and the run would lose messages.
	maxAhead = 100_000
	// How long a run may go without progress (nothing received, no ack) before it fails.
	idleLimit = 10 * time.Second
)

type options struct {
	url      string
	subURL   string
	scenario string
	msgs     int
	size     int
	storage  string
	window   int
	batch    int
	replicas int
	existing bool
}

// outcome is what a scenario measured; main turns it into the JSON line.
type outcome struct {
	received int64
	seconds  float64
	extra    map[string]any
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.url, "url", nats.DefaultURL, "server URL")
	flag.StringVar(&o.subURL, "sub-url", "", "core_pubsub: the subscriber's server URL (default -url)")
	flag.StringVar(&o.scenario, "scenario", "core_pubsub",
		"core_pub | core_pubsub | js_pub_async | js_fetch")
	flag.IntVar(&o.msgs, "msgs", 100_000, "messages to publish")
	flag.IntVar(&o.size, "size", 16, "payload size in bytes")
	flag.StringVar(&o.storage, "storage", "file", "JetStream storage: file | memory")
	flag.IntVar(&o.window, "window", 4000, "js_pub_async: most async publishes awaiting an ack")
	flag.IntVar(&o.batch, "batch", 500, "js_fetch: messages per Fetch")
	flag.IntVar(&o.replicas, "replicas", 1, "JetStream stream replicas")
	flag.BoolVar(&o.existing, "existing-stream", false,
		"js_pub_async: publish into the GOBENCH the caller created (purged first, kept at exit)")
	flag.Parse()
	if o.subURL == "" {
		o.subURL = o.url
	}
	return o
}

// flagSet reports whether name was given on the command line (not merely defaulted).
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func (o options) validate() error {
	switch {
	case flag.NArg() > 0:
		return fmt.Errorf("unexpected arguments: %v", flag.Args())
	case o.msgs < 1:
		return errors.New("-msgs must be at least 1")
	case o.size < 0:
		return errors.New("-size must not be negative")
	case o.window < 1:
		return errors.New("-window must be at least 1")
	case o.batch < 1:
		return errors.New("-batch must be at least 1")
	case o.storage != "file" && o.storage != "memory":
		return fmt.Errorf("-storage must be file or memory, not %q", o.storage)
	case flagSet("sub-url") && o.scenario != "core_pubsub":
		// Refused rather than ignored: only core_pubsub has a subscriber to place.
		return fmt.Errorf("-sub-url applies to core_pubsub only, not %q", o.scenario)
	case o.existing && o.scenario != "js_pub_async":
		return fmt.Errorf("-existing-stream applies to js_pub_async only, not %q", o.scenario)
	case o.existing && (flagSet("storage") || flagSet("replicas")):
		// The stream's config is the caller's: a flag that could not apply is refused.
		return errors.New(
			"-existing-stream uses the caller's stream: -storage and -replicas do not apply")
	}
	return nil
}

func main() {
	o := parseFlags()
	if err := o.validate(); err != nil {
		fail(err)
	}
	var run func(options) (outcome, error)
	switch o.scenario {
	case "core_pub":
		run = corePub
	case "core_pubsub":
		run = corePubSub
	case "js_pub_async":
		run = jsPubAsync
	case "js_fetch":
		run = jsFetch
	default:
		fail(fmt.Errorf("unknown -scenario %q", o.scenario))
	}
	got, err := run(o)
	if err != nil {
		fail(err)
	}
	report(o, got)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gobench:", err)
	os.Exit(1)
}

func report(o options, got outcome) {
	line := map[string]any{
		"scenario": o.scenario,
		"msgs":     o.msgs,
		"size":     o.size,
		"client":   "nats.go " + nats.Version,
		"received": got.received,
		"seconds":  got.seconds,
		"ok":       got.received == int64(o.msgs),
	}
	rate := 0.0
	if got.seconds > 0 {
		rate = float64(got.received) / got.seconds
	}
	line["msgs_per_s"] = rate
	line["mb_per_s"] = rate * float64(o.size) / 1e6
	for k, v := range got.extra {
		line[k] = v
	}
	out, err := json.Marshal(line)
	if err != nil {
		fail(err)
	}
	fmt.Println(string(out))
}

func connect(url, name string) (*nats.Conn, error) {
	return nats.Connect(url, nats.Name(name), nats.Timeout(10*time.Second))
}

func corePub(o options) (outcome, error) {
	nc, err := connect(o.url, "gobench-pub")
	if err != nil {
		return outcome{}, err
	}
	defer nc.Close()
	payload := make([]byte, o.size)
	start := time.Now()
	for i := 0; i < o.msgs; i++ {
		if err := nc.Publish(coreSubject, payload); err != nil {
			return outcome{}, err
		}
	}
	// The flush's round trip means the server has read every publish before the clock stops.
	if err := nc.FlushTimeout(idleLimit * 6); err != nil {
		return outcome{}, err
	}
	return outcome{received: int64(o.msgs), seconds: time.Since(start).Seconds()}, nil
}

func corePubSub(o options) (outcome, error) {
	subConn, err := connect(o.subURL, "gobench-sub")
	if err != nil {
		return outcome{}, err
	}
	defer subConn.Close()
	pubConn, err := connect(o.url, "gobench-pub")
	if err != nil {
		return outcome{}, err
	}
	defer pubConn.Close()

	var received atomic.Int64
	var lastAt atomic.Int64 // UnixNano of the latest delivery: the clock stops there
	all := make(chan struct{})
	sub, err := subConn.Subscribe(coreSubject, func(*nats.Msg) {
		lastAt.Store(time.Now().UnixNano())
		if received.Add(1) == int64(o.msgs) {
			close(all)
		}
	})
	if err != nil {
		return outcome{}, err
	}
	// The client-side buffer is unbounded: flow control below keeps it small anyway.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return outcome{}, err
	}
	if err := subConn.Flush(); err != nil { // the interest reached the server
		return outcome{}, err
	}
	if o.subURL != o.url {
		if err := awaitRemoteInterest(pubConn, subConn); err != nil {
			return outcome{}, err
		}
	}

	payload := make([]byte, o.size)
	start := time.Now()
	for i := 0; i < o.msgs; i++ {
		if err := pubConn.Publish(coreSubject, payload); err != nil {
			return outcome{}, err
		}
		if i%1024 == 0 {
			if err := waitBehind(&received, int64(i), maxAhead); err != nil {
				return outcome{}, err
			}
		}
	}
	if err := pubConn.FlushTimeout(idleLimit * 6); err != nil {
		return outcome{}, err
	}
	// Wait for the rest; a run that stops making progress ends with ok=false, not a hang.
	progress := received.Load()
	for {
		select {
		case <-all:
			end := time.Unix(0, lastAt.Load())
			return outcome{received: received.Load(), seconds: end.Sub(start).Seconds()}, nil
		case <-time.After(idleLimit):
			now := received.Load()
			if now == progress {
				return outcome{received: now, seconds: time.Since(start).Seconds()}, nil
			}
			progress = now
		}
	}
}

// awaitRemoteInterest returns once the publisher's server routes to the subscriber's server.
// The subscriber's server announces subscriptions over the route in the order they were made,
// so once a probe subscribed after the measured subscription gets a message published on the
// other server, the measured subscription's interest has arrived there too.
func awaitRemoteInterest(pubConn, subConn *nats.Conn) error {
	probe, err := subConn.SubscribeSync(probeSubject)
	if err != nil {
		return err
	}
	defer func() { _ = probe.Unsubscribe() }()
	if err := subConn.Flush(); err != nil {
		return err
	}
	deadline := time.Now().Add(idleLimit)
	for time.Now().Before(deadline) {
		if err := pubConn.Publish(probeSubject, nil); err != nil {
			return err
		}
		if err := pubConn.Flush(); err != nil {
			return err
		}
		if _, err := probe.NextMsg(50 * time.Millisecond); err == nil {
			return nil
		} else if !errors.Is(err, nats.ErrTimeout) {
			return err
		}
	}
	return fmt.Errorf("no route from %s to %s after %v", pubConn.ConnectedUrl(),
		subConn.ConnectedUrl(), idleLimit)
}

// waitBehind blocks while the publisher is more than ahead messages past the subscriber.
func waitBehind(received *atomic.Int64, sent, ahead int64) error {
	deadline := time.Now().Add(idleLimit)
	for sent-received.Load() > ahead {
		if time.Now().After(deadline) {
			return fmt.Errorf("subscriber stuck at %d of %d sent messages", received.Load(), sent)
		}
		time.Sleep(50 * time.Microsecond)
	}
	return nil
}

// jsSetup connects and recreates stream GOBENCH with an async publish window of -window;
// failed counts publishes whose ack was an error. cleanup deletes the stream and disconnects.
func jsSetup(o options, failed *atomic.Int64) (*nats.Conn, nats.JetStreamContext, func(), error) {
	nc, err := connect(o.url, "gobench-js")
	if err != nil {
		return nil, nil, nil, err
	}
	js, err := nc.JetStream(
		nats.MaxWait(idleLimit),
		nats.PublishAsyncMaxPending(o.window),
		nats.PublishAsyncErrHandler(func(nats.JetStream, *nats.Msg, error) { failed.Add(1) }),
	)
	if err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	if o.existing {
		if err := reuseStream(js); err != nil {
			nc.Close()
			return nil, nil, nil, err
		}
		return nc, js, nc.Close, nil
	}
	storage := nats.FileStorage
	if o.storage == "memory" {
		storage = nats.MemoryStorage
	}
	// A previous run that was killed may have left its stream behind.
	if err := js.DeleteStream(streamName); err != nil && !errors.Is(err, nats.ErrStreamNotFound) {
		nc.Close()
		return nil, nil, nil, fmt.Errorf("deleting the old stream: %w", err)
	}
	_, err = js.AddStream(&nats.StreamConfig{
		Name:     streamName,
		Subjects: []string{jsSubject},
		Storage:  storage,
		Replicas: o.replicas,
	})
	if err != nil {
		nc.Close()
		return nil, nil, nil, fmt.Errorf("creating stream %s: %w", streamName, err)
	}
	cleanup := func() {
		_ = js.DeleteStream(streamName)
		nc.Close()
	}
	return nc, js, cleanup, nil
}

// reuseStream empties the caller's GOBENCH, after checking that it takes gobench's subject.
func reuseStream(js nats.JetStreamContext) error {
	info, err := js.StreamInfo(streamName)
	if err != nil {
		return fmt.Errorf("-existing-stream: stream %s: %w", streamName, err)
	}
	found := false
	for _, subject := range info.Config.Subjects {
		found = found || subject == jsSubject
	}
	if !found {
		return fmt.Errorf("-existing-stream: stream %s does not take %s (subjects %v)",
			streamName, jsSubject, info.Config.Subjects)
	}
	if err := js.PurgeStream(streamName); err != nil {
		return fmt.Errorf("-existing-stream: purging %s: %w", streamName, err)
	}
	return nil
}

// publishAll publishes -msgs asynchronously and waits for every ack. nats.go's own "stalled"
// error (no ack freed the full window for 200 ms) is returned wrapped, its text intact.
func publishAll(js nats.JetStreamContext, o options) error {
	payload := make([]byte, o.size)
	for i := 0; i < o.msgs; i++ {
		if _, err := js.PublishAsync(jsSubject, payload); err != nil {
			return fmt.Errorf("async publish %d of %d: %w", i+1, o.msgs, err)
		}
	}
	// Waiting for the last acks is bounded by progress, never by a fixed total.
	pending := js.PublishAsyncPending()
	for {
		select {
		case <-js.PublishAsyncComplete():
			return nil
		case <-time.After(idleLimit):
			now := js.PublishAsyncPending()
			if now == pending {
				return fmt.Errorf("%d async publishes never acked", now)
			}
			pending = now
		}
	}
}

func storedMsgs(js nats.JetStreamContext) (uint64, error) {
	info, err := js.StreamInfo(streamName)
	if err != nil {
		return 0, fmt.Errorf("stream info: %w", err)
	}
	return info.State.Msgs, nil
}

func jsPubAsync(o options) (outcome, error) {
	var failed atomic.Int64
	_, js, cleanup, err := jsSetup(o, &failed)
	if err != nil {
		return outcome{}, err
	}
	defer cleanup()
	start := time.Now()
	if err := publishAll(js, o); err != nil {
		return outcome{}, err
	}
	seconds := time.Since(start).Seconds()
	stored, err := storedMsgs(js)
	if err != nil {
		return outcome{}, err
	}
	// Received means stored: a run is only ok if the stream holds every message.
	extra := map[string]any{"stored": stored, "ack_errors": failed.Load()}
	if !o.existing { // an existing stream's storage is the caller's, not -storage
		extra["storage"] = o.storage
	}
	return outcome{received: int64(stored), seconds: seconds, extra: extra}, nil
}

func jsFetch(o options) (outcome, error) {
	var failed atomic.Int64
	nc, js, cleanup, err := jsSetup(o, &failed)
	if err != nil {
		return outcome{}, err
	}
	defer cleanup()
	if err := publishAll(js, o); err != nil {
		return outcome{}, fmt.Errorf("preloading: %w", err)
	}
	stored, err := storedMsgs(js)
	if err != nil {
		return outcome{}, err
	}
	if stored != uint64(o.msgs) {
		return outcome{}, fmt.Errorf("preloading stored %d of %d messages", stored, o.msgs)
	}
	sub, err := js.PullSubscribe(jsSubject, durableName, nats.AckExplicit())
	if err != nil {
		return outcome{}, fmt.Errorf("creating pull consumer %s: %w", durableName, err)
	}
	var received int64
	start := time.Now()
	for received < int64(o.msgs) {
		// A Fetch that times out returns nats.ErrTimeout: no progress for idleLimit ends the run.
		batch, err := sub.Fetch(o.batch, nats.MaxWait(idleLimit))
		if err != nil {
			return outcome{}, fmt.Errorf("fetch after %d of %d messages: %w", received, o.msgs, err)
		}
		for _, m := range batch {
			if err := m.Ack(); err != nil {
				return outcome{}, fmt.Errorf("ack: %w", err)
			}
		}
		received += int64(len(batch))
	}
	// The flush's round trip: the server has read every ack before the clock stops.
	if err := nc.FlushTimeout(idleLimit); err != nil {
		return outcome{}, err
	}
	seconds := time.Since(start).Seconds()
	extra := map[string]any{"storage": o.storage, "stored": stored, "batch": o.batch}
	return outcome{received: received, seconds: seconds, extra: extra}, nil
}
