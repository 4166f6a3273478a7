// gojs drives one JetStream scenario with the official nats.go client (legacy JetStream API,
// nats.go 1.22.1 as packaged by Debian) and prints one JSON object of what the client saw.
//
// The observations leave out what legitimately differs between two servers or two runs
// (timestamps, server-generated names, NUIDs), so running the same scenario against
// headwater-server and nats-server must print the same JSON. tests/interop/test_nats_go.py
// compares the two.
//
// Build offline in GOPATH mode:
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go build -o gojs
//
// Usage: gojs -url nats://127.0.0.1:4222 -scenario streams|consumers|kv|objects|policies
//
//	gojs -url URL1,URL2,URL3 -scenario cluster-core|cluster-jetstream|cluster-failover
//
// (cluster.go: three servers of one cluster, one URL per connection).
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// obs is the scenario's record: key -> value, printed as one JSON object (keys sorted).
type obs map[string]any

var out = obs{}

// fatal prints what was observed so far plus the failing step and exits non-zero.
func fatal(step string, err error) {
	out["fatal"] = map[string]any{"step": step, "error": errObs(err)}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
	os.Exit(1)
}

func must(step string, err error) {
	if err != nil {
		fatal(step, err)
	}
}

// errObs describes an error as a client sees it: its text and, for server errors, the
// JetStream API status and error code. nil stays nil.
func errObs(err error) any {
	if err == nil {
		return nil
	}
	r := map[string]any{"text": err.Error()}
	var apiErr *nats.APIError
	if errors.As(err, &apiErr) && apiErr != nil {
		r["code"] = apiErr.Code
		r["err_code"] = int(apiErr.ErrorCode)
		r["description"] = apiErr.Description
	}
	return r
}

func errIs(err error, target error) map[string]any {
	return map[string]any{"error": errObs(err), "is": errors.Is(err, target)}
}

// headerObs copies headers, replacing the server's timestamp (direct get) by a marker.
func headerObs(h nats.Header) map[string][]string {
	r := map[string][]string{}
	for k, v := range h {
		if k == "Nats-Time-Stamp" {
			v = []string{fmt.Sprintf("<%d timestamp(s)>", len(v))}
		}
		r[k] = v
	}
	return r
}

// ---------------------------------------------------------------------------------------
// streams

func streamState(si *nats.StreamInfo) map[string]any {
	s := si.State
	return map[string]any{
		"msgs": s.Msgs, "bytes": s.Bytes, "first_seq": s.FirstSeq, "last_seq": s.LastSeq,
		"num_subjects": s.NumSubjects, "num_deleted": s.NumDeleted, "consumers": s.Consumers,
	}
}

func streamConfig(c nats.StreamConfig) map[string]any {
	return map[string]any{
		"name": c.Name, "description": c.Description, "subjects": c.Subjects,
		"retention": c.Retention.String(), "max_consumers": c.MaxConsumers,
		"max_msgs": c.MaxMsgs, "max_bytes": c.MaxBytes, "discard": c.Discard.String(),
		"max_age": c.MaxAge.String(), "max_msgs_per_subject": c.MaxMsgsPerSubject,
		"max_msg_size": c.MaxMsgSize, "storage": c.Storage.String(), "replicas": c.Replicas,
		"duplicates": c.Duplicates.String(), "no_ack": c.NoAck, "sealed": c.Sealed,
		"deny_delete": c.DenyDelete, "deny_purge": c.DenyPurge,
		"allow_rollup": c.AllowRollup, "allow_direct": c.AllowDirect,
	}
}

func pubAck(pa *nats.PubAck, err error) any {
	if err != nil {
		return map[string]any{"error": errObs(err)}
	}
	return map[string]any{"stream": pa.Stream, "seq": pa.Sequence, "duplicate": pa.Duplicate,
		"domain": pa.Domain}
}

func rawMsg(m *nats.RawStreamMsg, err error) any {
	if err != nil {
		return map[string]any{"error": errObs(err), "not_found": errors.Is(err, nats.ErrMsgNotFound)}
	}
	return map[string]any{"subject": m.Subject, "seq": m.Sequence, "data": string(m.Data),
		"header": headerObs(m.Header)}
}

func scenarioStreams(nc *nats.Conn, js nats.JetStreamContext) {
	const name = "IOP_STREAMS"
	si, err := js.AddStream(&nats.StreamConfig{
		Name: name, Subjects: []string{"iop.st.>"}, Storage: nats.FileStorage,
		Duplicates: time.Minute,
	})
	must("add", err)
	out["add_config"] = streamConfig(si.Config)
	out["add_state"] = streamState(si)

	// Adding it again with the same config is fine; with another config it is not.
	_, err = js.AddStream(&si.Config)
	out["add_same_again"] = errObs(err)
	_, err = js.AddStream(&nats.StreamConfig{Name: name, Subjects: []string{"iop.other"}})
	out["add_different"] = errIs(err, nats.ErrStreamNameAlreadyInUse)

	acks := []any{}
	pub := func(subj, data, id string, hdr map[string]string) {
		m := nats.NewMsg(subj)
		m.Data = []byte(data)
		for k, v := range hdr {
			m.Header.Set(k, v)
		}
		var opts []nats.PubOpt
		if id != "" {
			opts = append(opts, nats.MsgId(id))
		}
		acks = append(acks, pubAck(js.PublishMsg(m, opts...)))
	}
	pub("iop.st.a", "one", "id-1", nil)
	pub("iop.st.a", "one again", "id-1", nil) // duplicate: same sequence, flagged
	pub("iop.st.a", "two", "id-2", nil)
	pub("iop.st.b", "three", "", map[string]string{"X-Test": "v3"})
	pub("iop.st.b", "four", "", nil)
	pub("iop.st.c", "five", "", nil)
	out["pub_acks"] = acks

	// Optimistic concurrency on the stream: wrong and right expected last sequence.
	_, err = js.Publish("iop.st.c", []byte("six?"), nats.ExpectLastSequence(2))
	out["pub_wrong_last_seq"] = errObs(err)
	out["pub_right_last_seq"] = pubAck(js.Publish("iop.st.c", []byte("six"),
		nats.ExpectLastSequence(5)))
	// No stream listens on this subject: the client reports no responders.
	_, err = js.Publish("iop.nostream.x", []byte("x"))
	out["pub_no_stream"] = errIs(err, nats.ErrNoStreamResponse)

	si, err = js.StreamInfo(name)
	must("info", err)
	out["info_state"] = streamState(si)
	si, err = js.StreamInfo(name, &nats.StreamInfoRequest{SubjectsFilter: "iop.st.>"})
	must("info with subjects", err)
	out["info_subjects"] = si.State.Subjects

	cfg := si.Config
	cfg.Subjects = append(cfg.Subjects, "iop.st2.*")
	cfg.MaxMsgs = 100
	cfg.Description = "updated by gojs"
	cfg.AllowDirect = true
	si, err = js.UpdateStream(&cfg)
	must("update", err)
	out["update_config"] = streamConfig(si.Config)
	bad := si.Config
	bad.Storage = nats.MemoryStorage
	_, err = js.UpdateStream(&bad)
	out["update_storage_change"] = errObs(err)
	pub("iop.st2.x", "seven", "", nil) // a subject added by the update
	out["pub_after_update"] = acks[len(acks)-1]

	names := []string{}
	for n := range js.StreamNames() {
		if strings.HasPrefix(n, "IOP_") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	out["stream_names"] = names
	filtered := []string{}
	for n := range js.StreamNames(nats.StreamListFilter("iop.st2.q")) {
		filtered = append(filtered, n)
	}
	out["stream_names_by_subject"] = filtered
	listed := []any{}
	for s := range js.Streams() {
		if s.Config.Name == name {
			listed = append(listed, map[string]any{"name": s.Config.Name,
				"msgs": s.State.Msgs, "subjects": s.Config.Subjects})
		}
	}
	out["streams_listed"] = listed

	out["get_3"] = rawMsg(js.GetMsg(name, 3))
	out["get_1"] = rawMsg(js.GetMsg(name, 1))
	out["get_missing"] = rawMsg(js.GetMsg(name, 99))
	out["get_last_b"] = rawMsg(js.GetLastMsg(name, "iop.st.b"))
	out["get_last_none"] = rawMsg(js.GetLastMsg(name, "iop.st.zzz"))
	out["direct_get_3"] = rawMsg(js.GetMsg(name, 3, nats.DirectGet()))
	out["direct_get_missing"] = rawMsg(js.GetMsg(name, 99, nats.DirectGet()))
	out["direct_get_last_b"] = rawMsg(js.GetLastMsg(name, "iop.st.b", nats.DirectGet()))
	out["direct_get_next_c"] = rawMsg(js.GetMsg(name, 1, nats.DirectGetNext("iop.st.c")))

	out["delete_2"] = errObs(js.DeleteMsg(name, 2))
	out["delete_2_again"] = errObs(js.DeleteMsg(name, 2))
	out["get_deleted_2"] = rawMsg(js.GetMsg(name, 2))
	si, err = js.StreamInfo(name)
	must("info after delete", err)
	out["after_delete_state"] = streamState(si)

	out["purge_b"] = errObs(js.PurgeStream(name, &nats.StreamPurgeRequest{Subject: "iop.st.b"}))
	si, err = js.StreamInfo(name)
	must("info after purge", err)
	out["after_purge_state"] = streamState(si)
	out["after_purge_get_last_b"] = rawMsg(js.GetLastMsg(name, "iop.st.b"))

	// Errors.
	_, err = js.StreamInfo("IOP_MISSING")
	out["info_missing"] = errIs(err, nats.ErrStreamNotFound)
	_, err = js.AddStream(&nats.StreamConfig{Name: "IOP.BAD", Subjects: []string{"iop.bad"}})
	out["add_dotted_name"] = errIs(err, nats.ErrInvalidStreamName)
	_, err = js.AddStream(&nats.StreamConfig{Name: "IOP_OVERLAP", Subjects: []string{"iop.st.a"}})
	out["add_overlapping_subjects"] = errObs(err)
	_, err = js.AddStream(&nats.StreamConfig{Name: "IOP_BADSUBJ", Subjects: []string{"iop..x"}})
	out["add_bad_subject"] = errObs(err)
	_, err = js.AddStream(&nats.StreamConfig{Name: "IOP_BADRET", Subjects: []string{"iop.br"},
		Retention: nats.WorkQueuePolicy, MaxMsgsPerSubject: -5, Discard: nats.DiscardNew,
		DiscardNewPerSubject: true})
	out["add_bad_discard_per_subject"] = errObs(err)

	out["delete_stream"] = errObs(js.DeleteStream(name))
	_, err = js.StreamInfo(name)
	out["info_after_delete"] = errIs(err, nats.ErrStreamNotFound)
	out["delete_stream_again"] = errIs(js.DeleteStream(name), nats.ErrStreamNotFound)
}

// ---------------------------------------------------------------------------------------
// consumers

func metaObs(m *nats.Msg) map[string]any {
	md, err := m.Metadata()
	if err != nil {
		return map[string]any{"error": errObs(err)}
	}
	return map[string]any{"data": string(m.Data), "subject": m.Subject,
		"stream_seq": md.Sequence.Stream, "consumer_seq": md.Sequence.Consumer,
		"delivered": md.NumDelivered, "pending": md.NumPending, "stream": md.Stream,
		"consumer": md.Consumer}
}

func consumerInfo(ci *nats.ConsumerInfo) map[string]any {
	c := ci.Config
	return map[string]any{
		"name": ci.Name, "stream": ci.Stream, "durable": c.Durable,
		"deliver_policy": int(c.DeliverPolicy), "ack_policy": c.AckPolicy.String(),
		"ack_wait": c.AckWait.String(), "max_deliver": c.MaxDeliver,
		"filter_subject": c.FilterSubject, "replay_policy": int(c.ReplayPolicy),
		"max_ack_pending": c.MaxAckPending, "max_waiting": c.MaxWaiting,
		"deliver_group": c.DeliverGroup, "push": c.DeliverSubject != "",
		"delivered_consumer": ci.Delivered.Consumer, "delivered_stream": ci.Delivered.Stream,
		"ack_floor_consumer": ci.AckFloor.Consumer, "ack_floor_stream": ci.AckFloor.Stream,
		"num_ack_pending": ci.NumAckPending, "num_redelivered": ci.NumRedelivered,
		"num_pending": ci.NumPending,
	}
}

// settledInfo polls ConsumerInfo until ok() holds (acks sent without waiting for a reply
// are applied asynchronously by either server) or two seconds pass.
func settledInfo(js nats.JetStreamContext, stream, name string,
	ok func(*nats.ConsumerInfo) bool) *nats.ConsumerInfo {
	deadline := time.Now().Add(2 * time.Second)
	for {
		ci, err := js.ConsumerInfo(stream, name)
		must("consumer info "+name, err)
		if ok(ci) || time.Now().After(deadline) {
			return ci
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func fetchObs(sub *nats.Subscription, n int) ([]*nats.Msg, []any) {
	msgs, err := sub.Fetch(n, nats.MaxWait(2*time.Second))
	must(fmt.Sprintf("fetch %d", n), err)
	seen := []any{}
	for _, m := range msgs {
		seen = append(seen, metaObs(m))
	}
	return msgs, seen
}

func scenarioConsumers(nc *nats.Conn, js nats.JetStreamContext, url string) {
	const stream = "IOP_CONSUMERS"
	_, err := js.AddStream(&nats.StreamConfig{Name: stream, Subjects: []string{"iop.co.>"}})
	must("add stream", err)
	for i := 1; i <= 10; i++ {
		_, err := js.Publish("iop.co.pull", []byte(fmt.Sprintf("p-%d", i)))
		must("publish pull", err)
	}

	// Durable pull consumer.
	sub, err := js.PullSubscribe("iop.co.pull", "pull1", nats.AckExplicit(),
		nats.MaxDeliver(5))
	must("pull subscribe", err)
	ci, err := js.ConsumerInfo(stream, "pull1")
	must("pull info", err)
	out["pull_info_created"] = consumerInfo(ci)

	msgs, seen := fetchObs(sub, 3)
	out["fetch_1"] = seen
	for _, m := range msgs {
		must("ack", m.AckSync())
	}
	out["info_after_acks"] = consumerInfo(settledInfo(js, stream, "pull1",
		func(ci *nats.ConsumerInfo) bool { return ci.NumAckPending == 0 }))

	msgs, seen = fetchObs(sub, 2)
	out["fetch_2"] = seen
	must("nak", msgs[0].Nak())
	must("ack sync", msgs[1].AckSync())
	out["ack_sync_twice"] = errIs(msgs[1].AckSync(), nats.ErrMsgAlreadyAckd)
	msgs, seen = fetchObs(sub, 1) // the Nak'd message, delivered a second time
	out["fetch_redelivered"] = seen
	must("term", msgs[0].Term())
	out["info_after_term"] = consumerInfo(settledInfo(js, stream, "pull1",
		func(ci *nats.ConsumerInfo) bool { return ci.NumAckPending == 0 }))

	_, seen = fetchObs(sub, 10) // the five left; not acked
	out["fetch_rest"] = seen
	out["info_unacked"] = consumerInfo(settledInfo(js, stream, "pull1",
		func(ci *nats.ConsumerInfo) bool { return ci.NumAckPending == 5 }))
	_, err = sub.Fetch(1, nats.MaxWait(300*time.Millisecond))
	out["fetch_empty"] = errIs(err, nats.ErrTimeout)
	names := []string{}
	for n := range js.ConsumerNames(stream) {
		names = append(names, n)
	}
	sort.Strings(names)
	out["consumer_names"] = names
	// nats.go deletes a consumer that its subscribe call created, durable or not.
	must("unsubscribe pull", sub.Unsubscribe())
	_, err = js.ConsumerInfo(stream, "pull1")
	out["info_after_unsubscribe"] = errIs(err, nats.ErrConsumerNotFound)

	// Push durable shared by a queue group of two members on two connections.
	var mu sync.Mutex
	perMember := []map[uint64]int{{}, {}}
	total := 0
	done := make(chan struct{})
	const queued = 40
	var subs []*nats.Subscription
	for i := 0; i < 2; i++ {
		i := i
		c, err := nats.Connect(url)
		must("connect queue member", err)
		defer c.Close()
		cjs, err := c.JetStream()
		must("jetstream queue member", err)
		s, err := cjs.QueueSubscribe("iop.co.q", "workers", func(m *nats.Msg) {
			md, err := m.Metadata()
			if err != nil {
				return
			}
			if m.AckSync() != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			perMember[i][md.Sequence.Stream]++
			total++
			if total == queued {
				close(done)
			}
		}, nats.Durable("qd"), nats.ManualAck(), nats.AckExplicit(), nats.DeliverAll())
		must("queue subscribe", err)
		subs = append(subs, s)
	}
	for i := 1; i <= queued; i++ {
		_, err := js.Publish("iop.co.q", []byte(fmt.Sprintf("q-%d", i)))
		must("publish queue", err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	time.Sleep(100 * time.Millisecond) // any duplicate delivery would show up here
	mu.Lock()
	seqs := map[uint64]int{}
	counts := []int{}
	for _, pm := range perMember {
		n := 0
		for seq, k := range pm {
			seqs[seq] += k
			n += k
		}
		counts = append(counts, n)
	}
	dups := 0
	for _, k := range seqs {
		if k > 1 {
			dups++
		}
	}
	out["queue"] = map[string]any{"received": total, "distinct": len(seqs), "duplicates": dups,
		"both_members_got_some": counts[0] > 0 && counts[1] > 0}
	mu.Unlock()
	qi := settledInfo(js, stream, "qd",
		func(ci *nats.ConsumerInfo) bool { return ci.NumAckPending == 0 })
	out["queue_info"] = consumerInfo(qi)
	for _, s := range subs {
		must("unsubscribe queue", s.Unsubscribe())
	}

	// Ordered consumer over 1,000 messages.
	const ordered = 1000
	for i := 1; i <= ordered; i++ {
		_, err := js.PublishAsync("iop.co.ord", []byte(fmt.Sprintf("o-%d", i)))
		must("publish async", err)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(20 * time.Second):
		fatal("publish async", errors.New("acks did not arrive"))
	}
	got := 0
	inOrder := true
	var lastStream uint64
	odone := make(chan struct{})
	var first, last string
	osub, err := js.Subscribe("iop.co.ord", func(m *nats.Msg) {
		md, err := m.Metadata()
		if err != nil {
			return
		}
		got++
		if string(m.Data) != fmt.Sprintf("o-%d", got) || md.Sequence.Consumer != uint64(got) ||
			md.Sequence.Stream <= lastStream {
			inOrder = false
		}
		lastStream = md.Sequence.Stream
		if got == 1 {
			first = string(m.Data)
		}
		if got == ordered {
			last = string(m.Data)
			close(odone)
		}
	}, nats.OrderedConsumer())
	must("ordered subscribe", err)
	select {
	case <-odone:
	case <-time.After(20 * time.Second):
	}
	must("unsubscribe ordered", osub.Unsubscribe())
	out["ordered"] = map[string]any{"received": got, "in_order": inOrder, "first": first,
		"last": last}

	// MaxDeliver 2: after two Naks the message is not offered again.
	_, err = js.Publish("iop.co.md", []byte("md-1"))
	must("publish md", err)
	mdSub, err := js.PullSubscribe("iop.co.md", "md", nats.AckExplicit(), nats.MaxDeliver(2))
	must("pull subscribe md", err)
	mdSeen := []any{}
	for i := 0; i < 2; i++ {
		msgs, seen := fetchObs(mdSub, 1)
		mdSeen = append(mdSeen, seen...)
		must("nak md", msgs[0].Nak())
	}
	out["max_deliver_fetches"] = mdSeen
	_, err = mdSub.Fetch(1, nats.MaxWait(300*time.Millisecond))
	out["max_deliver_exhausted"] = errIs(err, nats.ErrTimeout)
	out["max_deliver_info"] = consumerInfo(settledInfo(js, stream, "md",
		func(ci *nats.ConsumerInfo) bool { return ci.NumRedelivered <= 1 }))
	must("unsubscribe md", mdSub.Unsubscribe())

	_, err = js.ConsumerInfo(stream, "nope")
	out["info_missing_consumer"] = errIs(err, nats.ErrConsumerNotFound)
	_, err = js.ConsumerInfo("IOP_NO_SUCH_STREAM", "nope")
	out["info_consumer_missing_stream"] = errIs(err, nats.ErrStreamNotFound)
	_, err = js.AddConsumer(stream, &nats.ConsumerConfig{Durable: "made",
		AckPolicy: nats.AckExplicitPolicy, FilterSubject: "iop.co.pull"})
	out["add_consumer"] = errObs(err)
	out["delete_consumer"] = errObs(js.DeleteConsumer(stream, "made"))
	out["delete_consumer_again"] = errIs(js.DeleteConsumer(stream, "made"),
		nats.ErrConsumerNotFound)
	must("delete stream", js.DeleteStream(stream))
}

// ---------------------------------------------------------------------------------------
// kv

func entryObs(e nats.KeyValueEntry) map[string]any {
	if e == nil {
		return nil
	}
	return map[string]any{"bucket": e.Bucket(), "key": e.Key(), "value": string(e.Value()),
		"revision": e.Revision(), "op": e.Operation().String(), "delta": e.Delta()}
}

func getObs(e nats.KeyValueEntry, err error) any {
	if err != nil {
		return map[string]any{"error": errObs(err),
			"key_not_found": errors.Is(err, nats.ErrKeyNotFound)}
	}
	return entryObs(e)
}

func revObs(rev uint64, err error) any {
	if err != nil {
		return map[string]any{"error": errObs(err),
			"key_exists": errors.Is(err, nats.ErrKeyExists)}
	}
	return rev
}

func kvStatus(kv nats.KeyValue) map[string]any {
	st, err := kv.Status()
	must("kv status", err)
	return map[string]any{"bucket": st.Bucket(), "values": st.Values(),
		"history": st.History(), "ttl": st.TTL().String(), "backing": st.BackingStore(),
		"bytes": st.Bytes()}
}

func scenarioKV(nc *nats.Conn, js nats.JetStreamContext) {
	kv, err := js.CreateKeyValue(&nats.KeyValueConfig{Bucket: "iop_kv", History: 5,
		TTL: time.Hour, Description: "gojs"})
	must("create kv", err)
	out["status_empty"] = kvStatus(kv)
	keys, err := kv.Keys()
	out["keys_empty"] = map[string]any{"keys": keys, "error": errObs(err),
		"no_keys": errors.Is(err, nats.ErrNoKeysFound)}
	si, err := js.StreamInfo("KV_iop_kv")
	must("kv stream info", err)
	out["stream_config"] = streamConfig(si.Config)

	out["put_a"] = revObs(kv.Put("a", []byte("1")))
	out["put_b"] = revObs(kv.PutString("b", "2"))
	out["get_a"] = getObs(kv.Get("a"))
	out["get_missing"] = getObs(kv.Get("zzz"))
	out["create_a_exists"] = revObs(kv.Create("a", []byte("again")))
	out["create_c"] = revObs(kv.Create("c", []byte("c1")))
	out["update_a_wrong_rev"] = revObs(kv.Update("a", []byte("x"), 99))
	out["update_a_right_rev"] = revObs(kv.Update("a", []byte("1b"), 1))
	for i := 0; i < 5; i++ {
		_, err := kv.Put("a", []byte(fmt.Sprintf("a-%d", i)))
		must("put a", err)
	}
	out["get_a_latest"] = getObs(kv.Get("a"))
	out["get_a_rev_1_gone"] = getObs(kv.GetRevision("a", 1))
	out["get_a_rev_8"] = getObs(kv.GetRevision("a", 8))

	hist, err := kv.History("a")
	must("history a", err)
	hs := []any{}
	for _, e := range hist {
		hs = append(hs, entryObs(e))
	}
	out["history_a"] = hs

	out["delete_b"] = errObs(kv.Delete("b"))
	out["get_b_deleted"] = getObs(kv.Get("b"))
	out["create_b_after_delete"] = revObs(kv.Create("b", []byte("b-new")))
	out["purge_c"] = errObs(kv.Purge("c"))
	out["get_c_purged"] = getObs(kv.Get("c"))
	hist, err = kv.History("c")
	hc := []any{}
	for _, e := range hist {
		hc = append(hc, entryObs(e))
	}
	out["history_c"] = map[string]any{"entries": hc, "error": errObs(err)}
	keys, err = kv.Keys()
	sort.Strings(keys)
	out["keys"] = map[string]any{"keys": keys, "error": errObs(err)}
	out["status"] = kvStatus(kv)

	// Watch: the latest entry of each key, a nil marker, then live updates.
	w, err := kv.WatchAll()
	must("watch", err)
	initial := []any{}
	marker := false
	timeout := time.After(5 * time.Second)
initialLoop:
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				marker = true
				break initialLoop
			}
			initial = append(initial, entryObs(e))
		case <-timeout:
			break initialLoop
		}
	}
	out["watch_initial"] = initial
	out["watch_marker"] = marker
	// One change at a time, each read before the next is made: an entry's delta is the
	// count of messages stored after it when it is delivered, so batching would race.
	updates := []any{}
	for _, op := range []func() error{
		func() error { _, err := kv.Put("d", []byte("d1")); return err },
		func() error { return kv.Delete("d") },
		func() error { _, err := kv.Put("a", []byte("a-last")); return err },
	} {
		must("watched change", op())
		select {
		case e := <-w.Updates():
			updates = append(updates, entryObs(e))
		case <-time.After(5 * time.Second):
			updates = append(updates, "timeout")
		}
	}
	out["watch_updates"] = updates
	must("watch stop", w.Stop())

	wh, err := kv.WatchAll(nats.IncludeHistory())
	must("watch history", err)
	hist2 := []any{}
	timeout = time.After(5 * time.Second)
historyLoop:
	for {
		select {
		case e := <-wh.Updates():
			if e == nil {
				break historyLoop
			}
			hist2 = append(hist2, []any{e.Key(), e.Revision(), e.Operation().String()})
		case <-timeout:
			hist2 = append(hist2, "timeout")
			break historyLoop
		}
	}
	out["watch_history"] = hist2
	must("watch history stop", wh.Stop())

	wk, err := kv.Watch("a")
	must("watch a", err)
	select {
	case e := <-wk.Updates():
		out["watch_key_a_first"] = entryObs(e)
	case <-time.After(5 * time.Second):
		out["watch_key_a_first"] = "timeout"
	}
	must("watch a stop", wk.Stop())

	out["purge_deletes"] = errObs(kv.PurgeDeletes(nats.DeleteMarkersOlderThan(-1)))
	out["status_final"] = kvStatus(kv)
	_, err = js.KeyValue("iop_kv_missing")
	out["bind_missing"] = map[string]any{"error": errObs(err),
		"bucket_not_found": errors.Is(err, nats.ErrBucketNotFound)}
	out["delete_bucket"] = errObs(js.DeleteKeyValue("iop_kv"))
	_, err = js.KeyValue("iop_kv")
	out["bind_deleted"] = map[string]any{"error": errObs(err),
		"bucket_not_found": errors.Is(err, nats.ErrBucketNotFound)}
}

// ---------------------------------------------------------------------------------------
// object store

func objInfo(info *nats.ObjectInfo, err error) any {
	if err != nil {
		return map[string]any{"error": errObs(err),
			"not_found": errors.Is(err, nats.ErrObjectNotFound)}
	}
	if info == nil {
		return nil
	}
	r := map[string]any{"name": info.Name, "bucket": info.Bucket, "size": info.Size,
		"chunks": info.Chunks, "digest": info.Digest, "deleted": info.Deleted,
		"description": info.Description, "has_nuid": info.NUID != ""}
	if info.Opts != nil && info.Opts.Link != nil {
		r["link"] = map[string]any{"bucket": info.Opts.Link.Bucket, "name": info.Opts.Link.Name}
	}
	return r
}

func scenarioObjects(nc *nats.Conn, js nats.JetStreamContext) {
	obj, err := js.CreateObjectStore(&nats.ObjectStoreConfig{Bucket: "iop_obj",
		Description: "gojs"})
	must("create object store", err)
	w, err := obj.Watch()
	must("watch", err)

	_, err = obj.List()
	out["list_empty"] = map[string]any{"error": errObs(err),
		"no_objects": errors.Is(err, nats.ErrNoObjectsFound)}

	data := make([]byte, 5*1024*1024)
	rand.New(rand.NewSource(42)).Read(data)
	sum := sha256.Sum256(data)
	out["local_sha256"] = hex.EncodeToString(sum[:])
	info, err := obj.PutBytes("big", data)
	must("put big", err)
	out["put_big"] = objInfo(info, nil)
	out["put_small"] = objInfo(obj.PutString("small", "hello object"))

	res, err := obj.Get("big")
	must("get big", err)
	h := sha256.New()
	n, err := io.Copy(h, res)
	out["get_big"] = map[string]any{"read": n, "error": errObs(err),
		"sha256": hex.EncodeToString(h.Sum(nil))}
	rinfo, err := res.Info()
	out["get_big_info"] = objInfo(rinfo, err)
	must("close result", res.Close())
	small, err := obj.GetString("small")
	out["get_small"] = map[string]any{"value": small, "error": errObs(err)}
	out["get_info_big"] = objInfo(obj.GetInfo("big"))
	out["get_info_missing"] = objInfo(obj.GetInfo("nope"))

	list := func() any {
		infos, err := obj.List()
		if err != nil {
			return map[string]any{"error": errObs(err)}
		}
		r := []any{}
		for _, i := range infos {
			r = append(r, objInfo(i, nil))
		}
		sort.Slice(r, func(a, b int) bool {
			return r[a].(map[string]any)["name"].(string) < r[b].(map[string]any)["name"].(string)
		})
		return r
	}
	out["list"] = list()

	out["rename"] = errObs(obj.UpdateMeta("big", &nats.ObjectMeta{Name: "big2",
		Description: "renamed"}))
	out["get_info_old_name"] = objInfo(obj.GetInfo("big"))
	big2, err := obj.GetInfo("big2")
	out["get_info_new_name"] = objInfo(big2, err)
	must("info big2", err)
	back, err := obj.GetBytes("big2")
	bsum := sha256.Sum256(back)
	out["get_renamed"] = map[string]any{"error": errObs(err),
		"sha256": hex.EncodeToString(bsum[:])}

	out["add_link"] = objInfo(obj.AddLink("lnk", big2))
	lres, err := obj.GetBytes("lnk")
	lsum := sha256.Sum256(lres)
	out["get_via_link"] = map[string]any{"error": errObs(err), "size": len(lres),
		"sha256": hex.EncodeToString(lsum[:])}
	out["rename_onto_existing"] = errObs(obj.UpdateMeta("small",
		&nats.ObjectMeta{Name: "big2"}))

	out["put_small_again"] = objInfo(obj.PutString("small", "hello again, object"))
	out["get_small_again"] = objInfo(obj.GetInfo("small"))
	out["delete_small"] = errObs(obj.Delete("small"))
	out["get_info_deleted"] = objInfo(obj.GetInfo("small"))
	out["get_info_deleted_shown"] = objInfo(obj.GetInfo("small",
		nats.GetObjectInfoShowDeleted()))
	_, err = obj.GetString("small")
	out["get_deleted"] = map[string]any{"error": errObs(err),
		"not_found": errors.Is(err, nats.ErrObjectNotFound)}
	out["list_after_delete"] = list()

	updates := []any{}
	for {
		select {
		case i := <-w.Updates():
			updates = append(updates, objInfo(i, nil))
			continue
		case <-time.After(time.Second):
		}
		break
	}
	out["watch"] = updates
	must("watch stop", w.Stop())

	st, err := obj.Status()
	must("status", err)
	out["status"] = map[string]any{"bucket": st.Bucket(), "description": st.Description(),
		"sealed": st.Sealed(), "storage": st.Storage().String(), "backing": st.BackingStore()}
	si, err := js.StreamInfo("OBJ_iop_obj")
	must("object stream info", err)
	out["stream_msgs"] = si.State.Msgs
	out["seal"] = errObs(obj.Seal())
	st, err = obj.Status()
	must("status after seal", err)
	out["sealed"] = st.Sealed()
	_, err = obj.PutString("late", "too late")
	out["put_after_seal"] = errObs(err)
	out["stream_subjects"] = si.Config.Subjects
	out["delete_store"] = errObs(js.DeleteObjectStore("iop_obj"))
	_, err = js.ObjectStore("iop_obj")
	out["bind_deleted"] = errObs(err)
}

// ---------------------------------------------------------------------------------------
// policies: retention, limits, ack wait, deliver policies, consumer config errors

func pubsObs(js nats.JetStreamContext, subj string, payloads ...string) []any {
	r := []any{}
	for _, p := range payloads {
		r = append(r, pubAck(js.Publish(subj, []byte(p))))
	}
	return r
}

func fetchData(sub *nats.Subscription, n int, ack bool) any {
	msgs, err := sub.Fetch(n, nats.MaxWait(400*time.Millisecond))
	r := []any{}
	for _, m := range msgs {
		r = append(r, metaObs(m))
		if ack {
			must("ack", m.AckSync())
		}
	}
	return map[string]any{"msgs": r, "error": errObs(err)}
}

func stateOf(js nats.JetStreamContext, stream string) map[string]any {
	si, err := js.StreamInfo(stream)
	must("info "+stream, err)
	return streamState(si)
}

func scenarioPolicies(nc *nats.Conn, js nats.JetStreamContext) {
	// Work queue: one consumer per subject, acked messages leave the stream.
	_, err := js.AddStream(&nats.StreamConfig{Name: "IOP_WQ", Subjects: []string{"iop.wq.>"},
		Retention: nats.WorkQueuePolicy})
	must("add wq", err)
	pubsObs(js, "iop.wq.a", "a1", "a2", "a3")
	pubsObs(js, "iop.wq.b", "b1", "b2")
	wa, err := js.PullSubscribe("iop.wq.a", "wa")
	must("wq consumer", err)
	_, err = js.PullSubscribe("iop.wq.>", "wall")
	out["wq_overlapping_consumer"] = errObs(err)
	out["wq_fetch"] = fetchData(wa, 2, true)
	out["wq_state_after_acks"] = stateOf(js, "IOP_WQ")

	// Interest: kept only while some consumer still needs a message.
	_, err = js.AddStream(&nats.StreamConfig{Name: "IOP_INT", Subjects: []string{"iop.in.>"},
		Retention: nats.InterestPolicy})
	must("add interest", err)
	out["int_pub_no_consumers"] = pubsObs(js, "iop.in.x", "n1", "n2")
	out["int_state_no_consumers"] = stateOf(js, "IOP_INT")
	c1, err := js.PullSubscribe("iop.in.x", "c1")
	must("interest c1", err)
	c2, err := js.PullSubscribe("iop.in.x", "c2")
	must("interest c2", err)
	out["int_pub"] = pubsObs(js, "iop.in.x", "i1", "i2", "i3")
	// nats-server counts a consumer's pending messages asynchronously after a publish; wait
	// for the count so the delivered messages' pending values do not race it.
	for _, c := range []string{"c1", "c2"} {
		settledInfo(js, "IOP_INT", c, func(ci *nats.ConsumerInfo) bool { return ci.NumPending == 3 })
	}
	out["int_fetch_c1"] = fetchData(c1, 3, true)
	out["int_state_c1_acked"] = stateOf(js, "IOP_INT")
	out["int_fetch_c2"] = fetchData(c2, 3, true)
	out["int_state_all_acked"] = stateOf(js, "IOP_INT")

	// Limits.
	_, err = js.AddStream(&nats.StreamConfig{Name: "IOP_LIM", Subjects: []string{"iop.lim.>"},
		MaxMsgsPerSubject: 2, Discard: nats.DiscardNew, DiscardNewPerSubject: true,
		MaxMsgSize: 64, MaxConsumers: 1})
	must("add limits", err)
	out["lim_per_subject"] = pubsObs(js, "iop.lim.a", "1", "2", "3")
	out["lim_other_subject"] = pubsObs(js, "iop.lim.b", "1")
	out["lim_too_big"] = pubsObs(js, "iop.lim.c", strings.Repeat("x", 100))
	out["lim_state"] = stateOf(js, "IOP_LIM")
	_, err = js.AddConsumer("IOP_LIM", &nats.ConsumerConfig{Durable: "one",
		AckPolicy: nats.AckExplicitPolicy})
	out["lim_first_consumer"] = errObs(err)
	_, err = js.AddConsumer("IOP_LIM", &nats.ConsumerConfig{Durable: "two",
		AckPolicy: nats.AckExplicitPolicy})
	out["lim_second_consumer"] = errObs(err)

	_, err = js.AddStream(&nats.StreamConfig{Name: "IOP_OLD", Subjects: []string{"iop.old"},
		MaxMsgs: 3})
	must("add old", err)
	pubsObs(js, "iop.old", "1", "2", "3", "4", "5")
	out["old_state"] = stateOf(js, "IOP_OLD")
	out["old_get_1"] = rawMsg(js.GetMsg("IOP_OLD", 1))

	// Ack wait: an unacked message comes back after AckWait.
	_, err = js.AddStream(&nats.StreamConfig{Name: "IOP_AW", Subjects: []string{"iop.aw"}})
	must("add aw", err)
	pubsObs(js, "iop.aw", "w1")
	aw, err := js.PullSubscribe("iop.aw", "aw", nats.AckWait(300*time.Millisecond))
	must("aw consumer", err)
	out["aw_first"] = fetchData(aw, 1, false)
	time.Sleep(700 * time.Millisecond)
	out["aw_again"] = fetchData(aw, 1, true)
	out["aw_info"] = consumerInfo(settledInfo(js, "IOP_AW", "aw",
		func(ci *nats.ConsumerInfo) bool { return ci.NumAckPending == 0 }))

	// Deliver policies.
	_, err = js.AddStream(&nats.StreamConfig{Name: "IOP_DP", Subjects: []string{"iop.dp.*"}})
	must("add dp", err)
	pubsObs(js, "iop.dp.x", "x1")
	pubsObs(js, "iop.dp.y", "y1")
	pubsObs(js, "iop.dp.x", "x2")
	pubsObs(js, "iop.dp.y", "y2")
	pubsObs(js, "iop.dp.x", "x3")
	lps, err := js.PullSubscribe("iop.dp.*", "lps", nats.DeliverLastPerSubject())
	must("last per subject", err)
	out["dp_last_per_subject"] = fetchData(lps, 5, true)
	seq, err := js.PullSubscribe("iop.dp.x", "seq", nats.StartSequence(3))
	must("start seq", err)
	out["dp_start_seq"] = fetchData(seq, 5, true)
	last, err := js.PullSubscribe("iop.dp.*", "last", nats.DeliverLast())
	must("deliver last", err)
	out["dp_last"] = fetchData(last, 5, true)
	nw, err := js.PullSubscribe("iop.dp.*", "new", nats.DeliverNew())
	must("deliver new", err)
	out["dp_new_before"] = fetchData(nw, 1, true)
	pubsObs(js, "iop.dp.y", "y3")
	out["dp_new_after"] = fetchData(nw, 1, true)

	// Consumer config errors and updates.
	bad := func(cfg nats.ConsumerConfig) any {
		_, err := js.AddConsumer("IOP_DP", &cfg)
		return errObs(err)
	}
	out["cc_start_seq_with_all"] = bad(nats.ConsumerConfig{Durable: "b1",
		DeliverPolicy: nats.DeliverAllPolicy, OptStartSeq: 2, AckPolicy: nats.AckExplicitPolicy})
	out["cc_filter_outside"] = bad(nats.ConsumerConfig{Durable: "b2",
		FilterSubject: "iop.nope", AckPolicy: nats.AckExplicitPolicy})
	out["cc_dotted_name"] = bad(nats.ConsumerConfig{Durable: "b.3",
		AckPolicy: nats.AckExplicitPolicy})
	out["cc_by_seq_without_seq"] = bad(nats.ConsumerConfig{Durable: "b4",
		DeliverPolicy: nats.DeliverByStartSequencePolicy, AckPolicy: nats.AckExplicitPolicy})
	out["cc_max_waiting_push"] = bad(nats.ConsumerConfig{Durable: "b5",
		DeliverSubject: "iop.deliver.b5", MaxWaiting: 10, AckPolicy: nats.AckExplicitPolicy})
	_, err = js.AddConsumer("IOP_MISSING", &nats.ConsumerConfig{Durable: "b6",
		AckPolicy: nats.AckExplicitPolicy})
	out["cc_missing_stream"] = errIs(err, nats.ErrStreamNotFound)

	ci, err := js.ConsumerInfo("IOP_DP", "seq")
	must("info seq", err)
	upd := ci.Config
	upd.AckWait = 10 * time.Second
	upd.Description = "updated"
	ci, err = js.UpdateConsumer("IOP_DP", &upd)
	out["cc_update"] = map[string]any{"error": errObs(err)}
	if err == nil {
		out["cc_update"] = map[string]any{"ack_wait": ci.Config.AckWait.String(),
			"description": ci.Config.Description, "opt_start_seq": ci.Config.OptStartSeq}
	}
	upd.DeliverPolicy = nats.DeliverNewPolicy
	upd.OptStartSeq = 0
	_, err = js.UpdateConsumer("IOP_DP", &upd)
	out["cc_update_deliver_policy"] = errObs(err)
	_, err = js.UpdateConsumer("IOP_DP", &nats.ConsumerConfig{Durable: "absent",
		AckPolicy: nats.AckExplicitPolicy})
	out["cc_update_missing"] = errObs(err)

	for _, s := range []string{"IOP_WQ", "IOP_INT", "IOP_LIM", "IOP_OLD", "IOP_AW", "IOP_DP"} {
		must("delete "+s, js.DeleteStream(s))
	}
}

func main() {
	url := flag.String("url", "nats://127.0.0.1:4222", "server URL")
	scenario := flag.String("scenario", "streams", "streams|consumers|kv|objects|policies|cluster-*")
	flag.Parse()
	if run, ok := clusterScenarios[*scenario]; ok {
		out["scenario"] = *scenario
		run(strings.Split(*url, ","))
		b, err := json.Marshal(out)
		must("marshal", err)
		fmt.Println(string(b))
		return
	}
	nc, err := nats.Connect(*url, nats.Name("gojs-"+*scenario))
	must("connect", err)
	defer nc.Close()
	js, err := nc.JetStream(nats.MaxWait(5 * time.Second))
	must("jetstream", err)
	out["scenario"] = *scenario
	switch *scenario {
	case "streams":
		scenarioStreams(nc, js)
	case "consumers":
		scenarioConsumers(nc, js, *url)
	case "kv":
		scenarioKV(nc, js)
	case "objects":
		scenarioObjects(nc, js)
	case "policies":
		scenarioPolicies(nc, js)
	default:
		fatal("scenario", fmt.Errorf("unknown scenario %q", *scenario))
	}
	b, err := json.Marshal(out)
	must("marshal", err)
	fmt.Println(string(b))
}
