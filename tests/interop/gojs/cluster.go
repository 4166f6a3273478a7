// Cluster scenarios: nats.go against three servers of one cluster. The -url flag then lists
// the three client URLs (comma-separated, server order s1,s2,s3), and every connection is
// given exactly one of them: whatever else the client knows of the cluster it learned from
// the servers' INFO (connect_urls).
//
//	cluster-core       subscribe on s2, publish on s1; a queue group on s2 and s3; request
//	                   to a responder on s3; what each connection discovered
//	cluster-jetstream  a stream created through s1, published to through s2 and s3, consumed
//	                   by a pull consumer made through s3; KV put through s1, read through s3.
//	                   After each create it waits until the host's new interest has reached
//	                   every server (reachable), as a publish or fetch elsewhere needs it
//	cluster-failover   the server of a connection is killed (by the harness, see killServer)
//	                   and its subscription keeps receiving from a third server
//
// Servers are named by position ("s1".."s3") in the observations, never by port, so the
// runs against Headwater and nats-server print the same JSON.
package main

import (
	"bufio"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// clusterScenarios maps a cluster scenario's name to its function (given the three URLs).
var clusterScenarios = map[string]func([]string){
	"cluster-core":      scenarioClusterCore,
	"cluster-jetstream": scenarioClusterJetStream,
	"cluster-failover":  scenarioClusterFailover,
}

// label names a server URL ("nats://127.0.0.1:4222" or "127.0.0.1:4222") by its position
// among urls, or "?host:port" when it is none of them.
func label(urls []string, u string) string {
	hostport := u
	if parsed, err := url.Parse(u); err == nil && parsed.Host != "" {
		hostport = parsed.Host
	}
	for i, known := range urls {
		if parsed, err := url.Parse(known); err == nil && parsed.Host == hostport {
			return fmt.Sprintf("s%d", i+1)
		}
	}
	return "?" + hostport
}

func labels(urls []string, list []string) []string {
	r := []string{}
	for _, u := range list {
		r = append(r, label(urls, u))
	}
	sort.Strings(r)
	return r
}

func connectOne(u, name string, opts ...nats.Option) *nats.Conn {
	nc, err := nats.Connect(u, append([]nats.Option{nats.Name(name)}, opts...)...)
	must("connect "+name, err)
	return nc
}

func connectAll(urls []string, scenario string) []*nats.Conn {
	conns := []*nats.Conn{}
	for i, u := range urls {
		conns = append(conns, connectOne(u, fmt.Sprintf("gojs-%s-s%d", scenario, i+1)))
	}
	return conns
}

func closeAll(conns []*nats.Conn) {
	for _, nc := range conns {
		nc.Close()
	}
}

// discovered waits (two seconds at most) until nc knows want servers besides its own.
func discovered(nc *nats.Conn, urls []string, want int) []string {
	deadline := time.Now().Add(2 * time.Second)
	for len(nc.DiscoveredServers()) < want && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	return labels(urls, nc.DiscoveredServers())
}

var probes = 0

// propagated waits until the subscriptions sub's server has made so far (sub's own, and the
// server's internal ones: a stream's subjects, a consumer's pull and ack subjects) are known
// on pub's server: a probe responder subscribed after them answers a request from pub (a
// server forwards interest to another in order, on one route for the account, so the
// earlier subscriptions have arrived too). Five seconds and 100 requests at most.
func propagated(step string, pub, sub *nats.Conn) {
	probes++
	subject := fmt.Sprintf("iop.cl.probe.%d", probes)
	probe, err := sub.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond([]byte("pong")) })
	must(step+": probe subscribe", err)
	defer func() { _ = probe.Unsubscribe() }()
	must(step+": probe flush", sub.Flush())
	deadline := time.Now().Add(5 * time.Second)
	for attempt := 1; ; attempt++ {
		_, err := pub.Request(subject, nil, 250*time.Millisecond)
		if err == nil {
			return
		}
		if attempt >= 100 || time.Now().After(deadline) {
			fatal(step+": interest never propagated", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// reachable waits until what the server named leader (the host of an R1 stream and its
// consumers) has subscribed so far is known on every other server. Its answer to a create
// crosses one route only, to the server the client asked through; the same interest reaches
// the other servers over their own routes, asynchronously (in nats-server too), so a
// publish or pull sent through them right after the create could find no responders.
func reachable(step string, conns []*nats.Conn, leader string) {
	host := -1
	for i, nc := range conns {
		if nc.ConnectedServerName() == leader {
			host = i
		}
	}
	if host < 0 {
		fatal(step, fmt.Errorf("the leader %q is none of the servers", leader))
	}
	for i, nc := range conns {
		if i != host {
			propagated(fmt.Sprintf("%s: s%d from s%d", step, host+1, i+1), nc, conns[host])
		}
	}
}

// leaderOf is the server name of the stream's leader, or a fatal error.
func leaderOf(step string, si *nats.StreamInfo) string {
	if si.Cluster == nil || si.Cluster.Leader == "" {
		fatal(step, fmt.Errorf("no leader in the stream info's cluster: %+v", si.Cluster))
	}
	return si.Cluster.Leader
}

// receive takes n messages from sub (five seconds at most for all) and returns their payloads.
func receive(step string, sub *nats.Subscription, n int) []string {
	got := []string{}
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < n {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			fatal(fmt.Sprintf("%s: got %d of %d (%v)", step, len(got), n, got), err)
		}
		got = append(got, string(m.Data))
	}
	return got
}

// extra is what else arrives on sub within d: nothing, when the routing is right.
func extra(sub *nats.Subscription, d time.Duration) []string {
	got := []string{}
	deadline := time.Now().Add(d)
	for i := 0; i < 1000; i++ {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			break
		}
		got = append(got, string(m.Data))
	}
	return got
}

// receiveChan takes up to n payloads from ch, waiting d at most for all of them.
func receiveChan(ch chan *nats.Msg, n int, d time.Duration) []string {
	got := []string{}
	timeout := time.After(d)
	for len(got) < n {
		select {
		case m := <-ch:
			got = append(got, string(m.Data))
		case <-timeout:
			return got
		}
	}
	return got
}

func publishAll(step string, nc *nats.Conn, subject string, payloads []string) {
	for _, p := range payloads {
		must(step, nc.Publish(subject, []byte(p)))
	}
	must(step+" flush", nc.Flush())
}

func numbered(prefix string, n int) []string {
	r := []string{}
	for i := 1; i <= n; i++ {
		r = append(r, fmt.Sprintf("%s-%d", prefix, i))
	}
	return r
}

// ---------------------------------------------------------------------------------------
// cluster-core

func scenarioClusterCore(urls []string) {
	conns := connectAll(urls, "core")
	defer closeAll(conns)
	names := []string{}
	found := []any{}
	for _, nc := range conns {
		names = append(names, nc.ConnectedServerName())
		found = append(found, discovered(nc, urls, len(urls)-1))
	}
	out["connected_to"] = names
	out["discovered"] = found
	out["servers_s1"] = labels(urls, conns[0].Servers())

	// Subscribe on s2, publish on s1.
	sub, err := conns[1].SubscribeSync("iop.cl.core")
	must("subscribe s2", err)
	propagated("core", conns[0], conns[1])
	sent := numbered("m", 10)
	publishAll("publish s1", conns[0], "iop.cl.core", sent)
	out["core_received"] = receive("core receive", sub, 10)
	out["core_extra"] = extra(sub, 200*time.Millisecond)

	// A queue group with one member on s2 and one on s3, published to from s1: each
	// message reaches exactly one member.
	queued := make(chan *nats.Msg, 64)
	_, err = conns[1].ChanQueueSubscribe("iop.cl.q", "workers", queued)
	must("queue subscribe s2", err)
	_, err = conns[2].ChanQueueSubscribe("iop.cl.q", "workers", queued)
	must("queue subscribe s3", err)
	propagated("queue s2", conns[0], conns[1])
	propagated("queue s3", conns[0], conns[2])
	publishAll("publish queue", conns[0], "iop.cl.q", numbered("q", 20))
	got := receiveChan(queued, 20, 5*time.Second)
	got = append(got, receiveChan(queued, 1000, 200*time.Millisecond)...)
	distinct := map[string]bool{}
	for _, p := range got {
		distinct[p] = true
	}
	out["queue"] = map[string]any{"received": len(got), "distinct": len(distinct)}

	// Request on s1, responder on s3; the reply names the responder's server.
	_, err = conns[2].Subscribe("iop.cl.svc", func(m *nats.Msg) {
		_ = m.Respond([]byte("re:" + string(m.Data) + "@" + conns[2].ConnectedServerName()))
	})
	must("responder s3", err)
	propagated("responder", conns[0], conns[2])
	replies := []string{}
	for i := 1; i <= 5; i++ {
		m, err := conns[0].Request("iop.cl.svc", []byte(fmt.Sprintf("r-%d", i)), 2*time.Second)
		must("request s1", err)
		replies = append(replies, string(m.Data))
	}
	out["replies"] = replies
	_, err = conns[0].Request("iop.cl.nobody", []byte("x"), 2*time.Second)
	out["request_nobody"] = errIs(err, nats.ErrNoResponders)
}

// ---------------------------------------------------------------------------------------
// cluster-jetstream

func clusterStreamObs(si *nats.StreamInfo) map[string]any {
	r := map[string]any{"config": streamConfig(si.Config), "state": streamState(si)}
	if si.Cluster != nil {
		// The leader is wherever the stream was placed, which differs between runs.
		r["cluster"] = map[string]any{"name": si.Cluster.Name,
			"has_leader": si.Cluster.Leader != "", "replicas": len(si.Cluster.Replicas)}
	}
	return r
}

func scenarioClusterJetStream(urls []string) {
	const stream = "IOP_CLUSTER"
	conns := connectAll(urls, "jetstream")
	defer closeAll(conns)
	jss := []nats.JetStreamContext{}
	for i, nc := range conns {
		js, err := nc.JetStream(nats.MaxWait(5 * time.Second))
		must(fmt.Sprintf("jetstream s%d", i+1), err)
		jss = append(jss, js)
	}

	si, err := jss[0].AddStream(&nats.StreamConfig{Name: stream,
		Subjects: []string{"iop.cl.js.>"}, Storage: nats.FileStorage, Replicas: 1,
		Duplicates: time.Minute})
	must("add stream s1", err)
	out["add_s1"] = clusterStreamObs(si)
	reachable("stream subjects", conns, leaderOf("add stream s1", si))

	acks := []any{}
	for i := 1; i <= 5; i++ {
		acks = append(acks, pubAck(jss[1].Publish("iop.cl.js.a", []byte(fmt.Sprintf("js-%d", i)),
			nats.MsgId(fmt.Sprintf("id-%d", i)))))
	}
	out["pub_acks_s2"] = acks
	// The same message ID again, through s3: the stream's duplicate window spans servers.
	out["pub_duplicate_s3"] = pubAck(jss[2].Publish("iop.cl.js.a", []byte("again"),
		nats.MsgId("id-3")))
	out["pub_s3"] = pubAck(jss[2].Publish("iop.cl.js.b", []byte("js-b")))
	infos := []any{}
	for i, js := range jss {
		si, err := js.StreamInfo(stream)
		must(fmt.Sprintf("stream info s%d", i+1), err)
		infos = append(infos, clusterStreamObs(si))
	}
	out["info_via"] = infos

	// A durable pull consumer made and fetched from through s3.
	sub, err := jss[2].PullSubscribe("iop.cl.js.>", "pull3", nats.BindStream(stream))
	must("pull subscribe s3", err)
	// An R1 consumer lives on its stream's server. (Its own info names that server too on
	// nats-server, not yet on Headwater: test_nats_py_cluster.py's consumer-leader test.)
	reachable("consumer subjects", conns, leaderOf("add stream s1", si))
	msgs, seen := fetchObs(sub, 6)
	out["fetch_s3"] = seen
	for _, m := range msgs {
		must("ack", m.AckSync())
	}
	ci := settledInfo(jss[0], stream, "pull3", func(ci *nats.ConsumerInfo) bool {
		return ci.NumAckPending == 0 && ci.AckFloor.Stream == 6
	})
	out["consumer_info_s1"] = consumerInfo(ci)
	names := []string{}
	for name := range jss[1].ConsumerNames(stream) {
		names = append(names, name)
	}
	out["consumer_names_s2"] = names
	_, err = sub.Fetch(1, nats.MaxWait(300*time.Millisecond))
	out["fetch_s3_empty"] = errIs(err, nats.ErrTimeout)

	// KV: put through s1, read through s3, update through s2.
	kv1, err := jss[0].CreateKeyValue(&nats.KeyValueConfig{Bucket: "iop_cluster", History: 3})
	must("create kv s1", err)
	kvInfo, err := jss[0].StreamInfo("KV_iop_cluster")
	must("kv stream info s1", err)
	reachable("kv subjects", conns, leaderOf("kv stream info s1", kvInfo))
	out["kv_put_s1"] = revObs(kv1.Put("k", []byte("v1")))
	kv3, err := jss[2].KeyValue("iop_cluster")
	must("bind kv s3", err)
	out["kv_get_s3"] = getObs(kv3.Get("k"))
	kv2, err := jss[1].KeyValue("iop_cluster")
	must("bind kv s2", err)
	out["kv_update_s2"] = revObs(kv2.Update("k", []byte("v2"), 1))
	out["kv_update_s2_stale"] = revObs(kv2.Update("k", []byte("v3"), 1))
	out["kv_get_s3_after"] = getObs(kv3.Get("k"))
	history, err := kv1.History("k")
	must("kv history s1", err)
	entries := []any{}
	for _, e := range history {
		entries = append(entries, entryObs(e))
	}
	out["kv_history_s1"] = entries

	// Deleted through one server, gone when asked through another.
	must("delete kv s2", jss[1].DeleteKeyValue("iop_cluster"))
	_, err = jss[0].KeyValue("iop_cluster")
	out["kv_bind_deleted_s1"] = errIs(err, nats.ErrBucketNotFound)
	must("delete stream s3", jss[2].DeleteStream(stream))
	_, err = jss[0].StreamInfo(stream)
	out["info_deleted_s1"] = errIs(err, nats.ErrStreamNotFound)
}

// ---------------------------------------------------------------------------------------
// cluster-failover

// killServer asks the harness to kill the server at u: it prints "KILL <url>" on its own
// line and waits for the harness's answer on stdin, sent once the process is gone.
func killServer(u string) {
	fmt.Printf("KILL %s\n", u)
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "killed" {
		fatal("kill "+u, fmt.Errorf("harness answered %q (%v)", line, err))
	}
}

func scenarioClusterFailover(urls []string) {
	reconnected := make(chan struct{}, 8)
	sc := connectOne(urls[0], "gojs-failover-sub", nats.ReconnectWait(100*time.Millisecond),
		nats.MaxReconnects(100), nats.ReconnectJitter(0, 0), nats.Timeout(time.Second),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
	defer sc.Close()
	pubs := []*nats.Conn{nil}
	for i, u := range urls[1:] {
		nc := connectOne(u, fmt.Sprintf("gojs-failover-s%d", i+2))
		defer nc.Close()
		pubs = append(pubs, nc)
	}
	known := discovered(sc, urls, len(urls)-1)
	out["discovered_before"] = known
	out["connected_before"] = sc.ConnectedServerName()

	sub, err := sc.SubscribeSync("iop.cl.fo")
	must("subscribe", err)
	propagated("before", pubs[2], sc)
	publishAll("publish before", pubs[2], "iop.cl.fo", numbered("before", 3))
	out["received_before"] = receive("receive before", sub, 3)

	killServer(sc.ConnectedUrl())
	select {
	case <-reconnected:
	case <-time.After(10 * time.Second):
		fatal("reconnect", fmt.Errorf("no reconnect within 10s (status %v)", sc.Status()))
	}
	now := label(urls, sc.ConnectedUrl())
	out["reconnected_to_killed"] = now == "s1"
	out["reconnected_to_discovered"] = contains(known, now)
	out["connected_name_matches"] = sc.ConnectedServerName() == now

	// Publish from the server the subscriber is not on now.
	var pub *nats.Conn
	for i := 1; i < len(urls); i++ {
		if fmt.Sprintf("s%d", i+1) != now {
			pub = pubs[i]
			break
		}
	}
	propagated("after", pub, sc)
	publishAll("publish after", pub, "iop.cl.fo", numbered("after", 3))
	out["received_after"] = receive("receive after", sub, 3)
	out["extra_after"] = extra(sub, 200*time.Millisecond)
	out["sub_valid"] = sub.IsValid()
	out["reconnects"] = sc.Stats().Reconnects
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
