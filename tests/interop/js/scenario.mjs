// scenario.mjs drives one JetStream scenario with the official nats.js v3 client
// (@nats-io/transport-node, @nats-io/jetstream, @nats-io/kv, @nats-io/obj; versions pinned in
// package.json) and prints one JSON object of what the client saw.
//
// The observations leave out what legitimately differs between two servers or two runs
// (timestamps, server-generated names, NUIDs), so running the same scenario against
// headwater-server and nats-server must print the same JSON. tests/interop/test_nats_js.py
// compares the two.
//
// Usage: node scenario.mjs nats://127.0.0.1:4222 streams|consumers|kv|objects|extras|more
//        node scenario.mjs URL1,URL2,URL3 cluster-core|cluster-jetstream|cluster-failover
// (cluster.mjs: three servers of one cluster, one URL per connection).
import { createHash } from "node:crypto";

import { connect } from "@nats-io/transport-node";
import { headers } from "@nats-io/nats-core";
import {
  AckPolicy,
  JetStreamApiError,
  jetstream,
  jetstreamManager,
  StorageType,
} from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { Objm } from "@nats-io/obj";

import { clusterScenarios } from "./cluster.mjs";

// The scenario's record: key -> value, printed as one JSON object.
const out = {};

function print() {
  process.stdout.write(JSON.stringify(out) + "\n");
}

class Fatal extends Error {}

// fatal records the failing step and what was observed so far; main() prints it and exits 1.
function fatal(step, err) {
  out.fatal = { step, error: errObs(err) };
  throw new Fatal(step);
}

// The last step started, reported if the watchdog in main() fires.
let currentStep = "start";

async function must(step, promise) {
  currentStep = step;
  if (process.env.NATSJS_DEBUG) {
    console.error(step); // NATSJS_DEBUG=1 traces the steps on stderr
  }
  try {
    return await promise;
  } catch (err) {
    fatal(step, err);
  }
}

// errObs describes an error as a client sees it: its class, its text and, for JetStream API
// errors, the HTTP-like status and the API error code. null stays null.
function errObs(err) {
  if (err === null || err === undefined) {
    return null;
  }
  const r = { name: err.constructor?.name ?? String(err), message: String(err.message ?? err) };
  if (err instanceof JetStreamApiError) {
    r.status = err.status;
    r.code = err.code;
    r.description = err.apiError().description;
  } else if (typeof err.code === "number" || typeof err.code === "string") {
    r.code = err.code;
  }
  if (err.cause instanceof Error) {
    r.cause = errObs(err.cause);
  }
  return r;
}

// attempt runs fn and records its result (through ok) or the error it raised.
async function attempt(fn, ok = (v) => v) {
  try {
    return ok(await fn());
  } catch (err) {
    if (err instanceof Fatal) {
      throw err;
    }
    return { error: errObs(err) };
  }
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// headerObs copies headers, replacing the server's timestamp (direct get) by a marker.
function headerObs(h) {
  if (!h) {
    return null;
  }
  const r = {};
  for (const [k, v] of h) {
    r[k] = k === "Nats-Time-Stamp" ? [`<${v.length} timestamp(s)>`] : v;
  }
  return r;
}

// reader wraps an async iterator so that a read can time out without losing the value that
// arrives later: the pending read is kept for the next call.
function reader(iterable) {
  const it = iterable[Symbol.asyncIterator]();
  let pending = null;
  return async (ms) => {
    pending ??= it.next();
    const timer = sleep(ms).then(() => "timeout");
    const r = await Promise.race([pending, timer]);
    if (r === "timeout") {
      return "timeout";
    }
    pending = null;
    return r.done ? "done" : r.value;
  };
}

// ---------------------------------------------------------------------------------------
// streams

function streamState(si) {
  const s = si.state;
  return {
    msgs: s.messages,
    bytes: s.bytes,
    first_seq: s.first_seq,
    last_seq: s.last_seq,
    num_subjects: s.num_subjects ?? 0,
    num_deleted: s.num_deleted ?? 0,
    consumers: s.consumer_count,
  };
}

function streamConfig(c) {
  return {
    name: c.name,
    description: c.description ?? null,
    subjects: c.subjects,
    retention: c.retention,
    max_consumers: c.max_consumers,
    max_msgs: c.max_msgs,
    max_bytes: c.max_bytes,
    discard: c.discard,
    max_age: c.max_age,
    max_msgs_per_subject: c.max_msgs_per_subject,
    max_msg_size: c.max_msg_size,
    storage: c.storage,
    num_replicas: c.num_replicas,
    duplicate_window: c.duplicate_window,
    no_ack: c.no_ack ?? false,
    sealed: c.sealed,
    deny_delete: c.deny_delete,
    deny_purge: c.deny_purge,
    allow_rollup_hdrs: c.allow_rollup_hdrs,
    allow_direct: c.allow_direct,
    mirror_direct: c.mirror_direct ?? false,
  };
}

function pubAck(pa) {
  return { stream: pa.stream, seq: pa.seq, duplicate: pa.duplicate, domain: pa.domain ?? null };
}

function storedMsg(m) {
  if (m === null) {
    return { not_found: true };
  }
  return { subject: m.subject, seq: m.seq, data: m.string(), header: headerObs(m.header) };
}

async function scenarioStreams(nc, js, jsm) {
  const name = "IOP_STREAMS";
  let si = await must(
    "add",
    jsm.streams.add({
      name,
      subjects: ["iop.st.>"],
      storage: StorageType.File,
      duplicate_window: 60 * 1e9,
    }),
  );
  out.add_config = streamConfig(si.config);
  out.add_state = streamState(si);

  // Adding it again with the same config is fine; with another config it is not.
  out.add_same_again = await attempt(
    () => jsm.streams.add({ ...si.config }),
    (r) => streamState(r),
  );
  out.add_different = await attempt(
    () => jsm.streams.add({ name, subjects: ["iop.other"] }),
    () => "added",
  );

  const acks = [];
  const pub = async (subj, data, msgID, hdr) => {
    const opts = {};
    if (msgID) {
      opts.msgID = msgID;
    }
    if (hdr) {
      const h = headers();
      for (const [k, v] of Object.entries(hdr)) {
        h.set(k, v);
      }
      opts.headers = h;
    }
    acks.push(await attempt(() => js.publish(subj, data, opts), pubAck));
  };
  await pub("iop.st.a", "one", "id-1");
  await pub("iop.st.a", "one again", "id-1"); // duplicate: same sequence, flagged
  await pub("iop.st.a", "two", "id-2");
  await pub("iop.st.b", "three", "", { "X-Test": "v3" });
  await pub("iop.st.b", "four");
  await pub("iop.st.c", "five");
  out.pub_acks = acks.slice();

  // Optimistic concurrency on the stream: wrong and right expected last sequence.
  out.pub_wrong_last_seq = await attempt(
    () => js.publish("iop.st.c", "six?", { expect: { lastSequence: 2 } }),
    pubAck,
  );
  out.pub_right_last_seq = await attempt(
    () => js.publish("iop.st.c", "six", { expect: { lastSequence: 5 } }),
    pubAck,
  );
  out.pub_wrong_last_subject_seq = await attempt(
    () => js.publish("iop.st.c", "seven?", { expect: { lastSubjectSequence: 5 } }),
    pubAck,
  );
  // No stream listens on this subject: the client reports no responders.
  out.pub_no_stream = await attempt(() => js.publish("iop.nostream.x", "x"), pubAck);

  si = await must("info", jsm.streams.info(name));
  out.info_state = streamState(si);
  si = await must("info with subjects", jsm.streams.info(name, { subjects_filter: "iop.st.>" }));
  out.info_subjects = si.state.subjects;

  const cfg = {
    ...si.config,
    subjects: [...si.config.subjects, "iop.st2.*"],
    max_msgs: 100,
    description: "updated by natsjs",
    allow_direct: true,
  };
  si = await must("update", jsm.streams.update(name, cfg));
  out.update_config = streamConfig(si.config);
  out.update_storage_change = await attempt(
    () => jsm.streams.update(name, { ...si.config, storage: StorageType.Memory }),
    () => "updated",
  );
  await pub("iop.st2.x", "seven"); // a subject added by the update
  out.pub_after_update = acks[acks.length - 1];

  const names = [];
  for await (const n of jsm.streams.names()) {
    if (n.startsWith("IOP_")) {
      names.push(n);
    }
  }
  out.stream_names = names.sort();
  const filtered = [];
  for await (const n of jsm.streams.names("iop.st2.q")) {
    filtered.push(n);
  }
  out.stream_names_by_subject = filtered;
  const listed = [];
  for await (const s of jsm.streams.list()) {
    if (s.config.name === name) {
      listed.push({ name: s.config.name, msgs: s.state.messages, subjects: s.config.subjects });
    }
  }
  out.streams_listed = listed;
  out.find_stream = await attempt(() => jsm.streams.find("iop.st2.q"));

  const get = (q) => attempt(() => jsm.streams.getMessage(name, q), storedMsg);
  const direct = (q) => attempt(() => jsm.direct.getMessage(name, q), storedMsg);
  out.get_3 = await get({ seq: 3 });
  out.get_1 = await get({ seq: 1 });
  out.get_missing = await get({ seq: 99 });
  out.get_last_b = await get({ last_by_subj: "iop.st.b" });
  out.get_last_none = await get({ last_by_subj: "iop.st.zzz" });
  out.get_next_c = await get({ next_by_subj: "iop.st.c", seq: 1 });
  out.direct_get_3 = await direct({ seq: 3 });
  out.direct_get_missing = await direct({ seq: 99 });
  out.direct_get_last_b = await direct({ last_by_subj: "iop.st.b" });
  out.direct_get_next_c = await direct({ next_by_subj: "iop.st.c", seq: 1 });
  out.direct_get_last_none = await direct({ last_by_subj: "iop.st.zzz" });

  out.delete_2 = await attempt(() => jsm.streams.deleteMessage(name, 2));
  out.delete_2_again = await attempt(() => jsm.streams.deleteMessage(name, 2));
  out.delete_3_no_erase = await attempt(() => jsm.streams.deleteMessage(name, 3, false));
  out.get_deleted_2 = await get({ seq: 2 });
  si = await must("info after delete", jsm.streams.info(name));
  out.after_delete_state = streamState(si);

  out.purge_b = await attempt(() => jsm.streams.purge(name, { filter: "iop.st.b" }));
  si = await must("info after purge", jsm.streams.info(name));
  out.after_purge_state = streamState(si);
  out.after_purge_get_last_b = await get({ last_by_subj: "iop.st.b" });
  out.purge_keep_1 = await attempt(() => jsm.streams.purge(name, { keep: 1 }));
  si = await must("info after keep purge", jsm.streams.info(name));
  out.after_keep_purge_state = streamState(si);

  // Errors.
  out.info_missing = await attempt(() => jsm.streams.info("IOP_MISSING"), () => "found");
  out.add_dotted_name = await attempt(
    () => jsm.streams.add({ name: "IOP.BAD", subjects: ["iop.bad"] }),
    () => "added",
  );
  out.add_overlapping_subjects = await attempt(
    () => jsm.streams.add({ name: "IOP_OVERLAP", subjects: ["iop.st.a"] }),
    () => "added",
  );
  out.add_bad_subject = await attempt(
    () => jsm.streams.add({ name: "IOP_BADSUBJ", subjects: ["iop..x"] }),
    () => "added",
  );
  out.get_missing_stream = await attempt(
    () => jsm.streams.getMessage("IOP_MISSING", { seq: 1 }),
    storedMsg,
  );

  out.delete_stream = await attempt(() => jsm.streams.delete(name));
  out.info_after_delete = await attempt(() => jsm.streams.info(name), () => "found");
  out.delete_stream_again = await attempt(() => jsm.streams.delete(name));
}

// ---------------------------------------------------------------------------------------
// consumers

function msgObs(m) {
  const i = m.info;
  return {
    data: m.string(),
    subject: m.subject,
    stream_seq: i.streamSequence,
    consumer_seq: i.deliverySequence,
    delivered: i.deliveryCount,
    redelivered: m.redelivered,
    pending: i.pending,
    stream: i.stream,
    consumer: i.consumer,
  };
}

function consumerInfo(ci) {
  const c = ci.config;
  return {
    name: ci.name,
    stream: ci.stream_name,
    durable: c.durable_name ?? null,
    deliver_policy: c.deliver_policy,
    ack_policy: c.ack_policy,
    ack_wait: c.ack_wait,
    max_deliver: c.max_deliver,
    filter_subject: c.filter_subject ?? null,
    replay_policy: c.replay_policy,
    max_ack_pending: c.max_ack_pending,
    max_waiting: c.max_waiting ?? null,
    deliver_subject: c.deliver_subject ?? null,
    deliver_group: c.deliver_group ?? null,
    delivered_consumer: ci.delivered.consumer_seq,
    delivered_stream: ci.delivered.stream_seq,
    ack_floor_consumer: ci.ack_floor.consumer_seq,
    ack_floor_stream: ci.ack_floor.stream_seq,
    num_ack_pending: ci.num_ack_pending,
    num_redelivered: ci.num_redelivered,
    num_pending: ci.num_pending,
    push_bound: ci.push_bound ?? false,
  };
}

// settledInfo polls consumer info until ok() holds (acks sent without waiting for a reply
// are applied asynchronously by either server) or two seconds pass.
async function settledInfo(jsm, stream, name, ok) {
  const deadline = Date.now() + 2000;
  for (;;) {
    const ci = await must(`consumer info ${name}`, jsm.consumers.info(stream, name));
    if (ok(ci) || Date.now() > deadline) {
      return ci;
    }
    await sleep(20);
  }
}

// drain hands the messages of a consume() iterator to onMsg until it has seen want of them,
// then closes the iterator; if they do not all arrive within ms it closes it early.
async function drain(iter, want, ms, onMsg) {
  let n = 0;
  const timer = setTimeout(() => iter.close(), ms);
  for await (const m of iter) {
    onMsg(m);
    if (++n >= want) {
      break;
    }
  }
  clearTimeout(timer);
  await iter.close();
  return n;
}

async function fetchAll(consumer, opts) {
  const iter = await must("fetch", consumer.fetch(opts));
  const msgs = [];
  for await (const m of iter) {
    msgs.push(m);
  }
  return msgs;
}

async function scenarioConsumers(nc, js, jsm) {
  const stream = "IOP_CONSUMERS";
  await must("add stream", jsm.streams.add({ name: stream, subjects: ["iop.co.>"] }));
  for (let i = 1; i <= 10; i++) {
    await must("publish pull", js.publish("iop.co.pull", `p-${i}`));
  }

  // Durable pull consumer.
  const created = await must(
    "add pull1",
    jsm.consumers.add(stream, {
      durable_name: "pull1",
      ack_policy: AckPolicy.Explicit,
      max_deliver: 5,
      filter_subject: "iop.co.pull",
    }),
  );
  out.pull_info_created = consumerInfo(created);
  const c = await must("get pull1", js.consumers.get(stream, "pull1"));
  out.pull_is_pull = c.isPullConsumer();

  let msgs = await fetchAll(c, { max_messages: 3, expires: 2000 });
  out.fetch_1 = msgs.map(msgObs);
  for (const m of msgs) {
    await must("ackAck", m.ackAck());
  }
  out.info_after_acks = consumerInfo(
    await settledInfo(jsm, stream, "pull1", (ci) => ci.num_ack_pending === 0),
  );

  msgs = await fetchAll(c, { max_messages: 2, expires: 2000 });
  out.fetch_2 = msgs.map(msgObs);
  msgs[0].nak();
  out.ack_ack = await attempt(() => msgs[1].ackAck());
  out.ack_ack_twice = await attempt(() => msgs[1].ackAck());
  msgs = await fetchAll(c, { max_messages: 1, expires: 2000 }); // the nak'd one, again
  out.fetch_redelivered = msgs.map(msgObs);
  msgs[0].term("no good");
  out.info_after_term = consumerInfo(
    await settledInfo(jsm, stream, "pull1", (ci) => ci.num_ack_pending === 0),
  );

  const one = await must("next", c.next({ expires: 2000 }));
  out.next_one = one === null ? null : msgObs(one);
  one?.ack();
  // The four left; not acked. A fetch of ten ends when the request expires.
  msgs = await fetchAll(c, { max_messages: 10, expires: 1000 });
  out.fetch_rest = msgs.map(msgObs);
  out.info_unacked = consumerInfo(
    await settledInfo(jsm, stream, "pull1", (ci) => ci.num_ack_pending === 4),
  );
  out.next_empty = await attempt(() => c.next({ expires: 1000 }), (m) => m && msgObs(m));
  const names = [];
  for await (const ci of jsm.consumers.list(stream)) {
    names.push(ci.name);
  }
  out.consumer_names = names.sort();
  out.cached_info = consumerInfo(await must("cached info", c.info(true)));

  // Consume: a callback-free iterator over messages published while it runs.
  await must(
    "add cons",
    jsm.consumers.add(stream, {
      durable_name: "cons",
      ack_policy: AckPolicy.Explicit,
      filter_subject: "iop.co.cons",
    }),
  );
  const cc = await must("get cons", js.consumers.get(stream, "cons"));
  const consumed = await must("consume", cc.consume({ max_messages: 7 }));
  for (let i = 1; i <= 25; i++) {
    await must("publish cons", js.publish("iop.co.cons", `c-${i}`));
  }
  const seenCons = [];
  await drain(consumed, 25, 5000, (m) => {
    seenCons.push(m.string());
    m.ack();
  });
  out.consume = {
    received: seenCons.length,
    in_order: seenCons.every((d, i) => d === `c-${i + 1}`),
    last: seenCons[seenCons.length - 1],
  };
  out.consume_info = consumerInfo(
    await settledInfo(jsm, stream, "cons", (ci) => ci.num_ack_pending === 0),
  );

  // Push consumer (v3 still offers one through consumers.getPushConsumer()).
  await must(
    "add push",
    jsm.consumers.add(stream, {
      durable_name: "push1",
      deliver_subject: "iop.deliver.push1",
      ack_policy: AckPolicy.Explicit,
      filter_subject: "iop.co.push",
    }),
  );
  for (let i = 1; i <= 20; i++) {
    await must("publish push", js.publish("iop.co.push", `u-${i}`));
  }
  const pc = await must("get push", js.consumers.getPushConsumer(stream, "push1"));
  out.push_is_push = pc.isPushConsumer();
  const pushed = await must("push consume", pc.consume());
  // The deliver subject has interest now: both servers report the consumer bound.
  const bound = await settledInfo(jsm, stream, "push1", (ci) => ci.push_bound === true);
  out.push_bound_while_consuming = bound.push_bound ?? false;
  const pushSeen = [];
  await drain(pushed, 20, 5000, (m) => {
    pushSeen.push(msgObs(m));
    m.ack();
  });
  out.push_msgs = pushSeen;
  out.push_info = consumerInfo(
    await settledInfo(
      jsm,
      stream,
      "push1",
      (ci) => ci.num_ack_pending === 0 && !ci.push_bound,
    ),
  );

  // Ordered consumer over 1,000 messages.
  const ordered = 1000;
  for (let i = 0; i < ordered; i += 100) {
    const batch = [];
    for (let j = i + 1; j <= i + 100; j++) {
      batch.push(js.publish("iop.co.ord", `o-${j}`));
    }
    await must("publish ordered", Promise.all(batch));
  }
  const oc = await must("ordered", js.consumers.get(stream, { filter_subjects: ["iop.co.ord"] }));
  const oiter = await must("ordered consume", oc.consume({ max_messages: 300 }));
  let got = 0;
  let inOrder = true;
  let first = null;
  let last = null;
  let lastStream = 0;
  await drain(oiter, ordered, 10000, (m) => {
    got++;
    const i = m.info;
    if (m.string() !== `o-${got}` || i.deliverySequence !== got || i.streamSequence <= lastStream) {
      inOrder = false;
    }
    lastStream = i.streamSequence;
    first ??= m.string();
    last = m.string();
  });
  out.ordered = { received: got, in_order: inOrder, first, last };
  const ofetch = await must("ordered fetch consumer", js.consumers.get(stream, {
    filter_subjects: ["iop.co.ord"],
    deliver_policy: "by_start_sequence",
    opt_start_seq: lastStream - 2,
  }));
  out.ordered_fetch = (await fetchAll(ofetch, { max_messages: 5, expires: 1000 })).map(
    (m) => [m.string(), m.info.deliverySequence],
  );

  // MaxDeliver 2: after two naks the message is not offered again.
  await must("publish md", js.publish("iop.co.md", "md-1"));
  await must(
    "add md",
    jsm.consumers.add(stream, {
      durable_name: "md",
      ack_policy: AckPolicy.Explicit,
      max_deliver: 2,
      filter_subject: "iop.co.md",
    }),
  );
  const md = await must("get md", js.consumers.get(stream, "md"));
  const mdSeen = [];
  for (let i = 0; i < 2; i++) {
    const m = await must("next md", md.next({ expires: 2000 }));
    if (m === null) {
      mdSeen.push(null);
      break;
    }
    mdSeen.push(msgObs(m));
    m.nak();
  }
  out.max_deliver_nexts = mdSeen;
  const mdAgain = await must("next md exhausted", md.next({ expires: 1000 }));
  out.max_deliver_exhausted = mdAgain === null ? null : msgObs(mdAgain);

  out.info_missing_consumer = await attempt(
    () => jsm.consumers.info(stream, "nope"),
    () => "found",
  );
  out.get_missing_consumer = await attempt(() => js.consumers.get(stream, "nope"), () => "got");
  out.info_consumer_missing_stream = await attempt(
    () => jsm.consumers.info("IOP_NO_SUCH_STREAM", "nope"),
    () => "found",
  );
  out.add_consumer_bad_filter = await attempt(
    () =>
      jsm.consumers.add(stream, {
        durable_name: "bad",
        ack_policy: AckPolicy.Explicit,
        filter_subject: "iop.nope",
      }),
    () => "added",
  );
  out.update_consumer = await attempt(
    () => jsm.consumers.update(stream, "md", { description: "updated", max_deliver: 3 }),
    (ci) => [ci.config.description, ci.config.max_deliver],
  );
  out.delete_consumer = await attempt(() => jsm.consumers.delete(stream, "md"));
  out.delete_consumer_again = await attempt(() => jsm.consumers.delete(stream, "md"));
  await must("delete stream", jsm.streams.delete(stream));
}

// ---------------------------------------------------------------------------------------
// kv

function entryObs(e) {
  if (e === null) {
    return null;
  }
  if (typeof e === "string") {
    return e;
  }
  const r = {
    bucket: e.bucket,
    key: e.key,
    value: e.string(),
    revision: e.revision,
    op: e.operation,
    length: e.length,
  };
  if (e.delta !== undefined) {
    r.delta = e.delta;
  }
  if (e.isUpdate !== undefined) {
    r.is_update = e.isUpdate;
  }
  return r;
}

async function kvStatus(kv) {
  const st = await must("kv status", kv.status());
  return {
    bucket: st.bucket,
    values: st.values,
    history: st.history,
    ttl: st.ttl,
    backing: st.backingStore,
    storage: st.storage,
    replicas: st.replicas,
    description: st.description,
    size: st.size,
    max_bytes: st.max_bytes,
    max_value_size: st.maxValueSize,
  };
}

async function collect(iterPromise) {
  const iter = await iterPromise;
  const r = [];
  for await (const v of iter) {
    r.push(v);
  }
  return r;
}

async function scenarioKV(nc, js, jsm) {
  const kvm = new Kvm(js);
  const kv = await must(
    "create kv",
    kvm.create("iop_kv", { history: 5, ttl: 3600 * 1000, description: "natsjs" }),
  );
  out.status_empty = await kvStatus(kv);
  out.keys_empty = await attempt(() => collect(kv.keys()));
  const si = await must("kv stream info", jsm.streams.info("KV_iop_kv"));
  out.stream_config = streamConfig(si.config);

  out.put_a = await attempt(() => kv.put("a", "1"));
  out.put_b = await attempt(() => kv.put("b", "2"));
  out.get_a = await attempt(() => kv.get("a"), entryObs);
  out.get_missing = await attempt(() => kv.get("zzz"), entryObs);
  out.create_a_exists = await attempt(() => kv.create("a", "again"));
  out.create_c = await attempt(() => kv.create("c", "c1"));
  out.update_a_wrong_rev = await attempt(() => kv.update("a", "x", 99));
  out.update_a_right_rev = await attempt(() => kv.update("a", "1b", 1));
  for (let i = 0; i < 5; i++) {
    await must("put a", kv.put("a", `a-${i}`));
  }
  out.get_a_latest = await attempt(() => kv.get("a"), entryObs);
  out.get_a_rev_1_gone = await attempt(() => kv.get("a", { revision: 1 }), entryObs);
  out.get_a_rev_8 = await attempt(() => kv.get("a", { revision: 8 }), entryObs);
  out.get_a_rev_of_b = await attempt(() => kv.get("a", { revision: 2 }), entryObs);
  out.history_a = await attempt(
    () => collect(kv.history({ key: "a" })),
    (es) => es.map(entryObs),
  );

  out.delete_b = await attempt(() => kv.delete("b"));
  out.get_b_deleted = await attempt(() => kv.get("b"), entryObs);
  out.create_b_after_delete = await attempt(() => kv.create("b", "b-new"));
  out.purge_c = await attempt(() => kv.purge("c"));
  out.get_c_purged = await attempt(() => kv.get("c"), entryObs);
  out.history_c = await attempt(
    () => collect(kv.history({ key: "c" })),
    (es) => es.map(entryObs),
  );
  out.keys = await attempt(() => collect(kv.keys()), (ks) => ks.sort());
  out.keys_filtered = await attempt(() => collect(kv.keys("a")));
  out.status = await kvStatus(kv);

  // Watch: the latest entry of each key (not updates), then live updates one at a time,
  // each read before the next change is made.
  const w = await must("watch", kv.watch());
  const readW = reader(w);
  const initial = [];
  for (let i = 0; i < 3; i++) {
    initial.push(entryObs(await readW(5000)));
  }
  out.watch_initial = initial;
  out.watch_initial_extra = entryObs(await readW(300));
  const updates = [];
  for (const op of [
    () => kv.put("d", "d1"),
    () => kv.delete("d"),
    () => kv.put("a", "a-last"),
  ]) {
    await must("watched change", op());
    updates.push(entryObs(await readW(5000)));
  }
  out.watch_updates = updates;
  w.stop();

  const wh = await must("watch history", kv.watch({ include: "history" }));
  const readH = reader(wh);
  const hist = [];
  for (;;) {
    const e = await readH(500);
    if (typeof e === "string") {
      break;
    }
    hist.push([e.key, e.revision, e.operation, e.isUpdate]);
  }
  out.watch_history = hist;
  wh.stop();

  const wk = await must("watch a", kv.watch({ key: "a" }));
  out.watch_key_a_first = entryObs(await reader(wk)(5000));
  wk.stop();
  const wu = await must("watch updates only", kv.watch({ include: "updates" }));
  const readU = reader(wu);
  out.watch_updates_only_before = entryObs(await readU(300));
  await must("put e", kv.put("e", "e1"));
  out.watch_updates_only_after = entryObs(await readU(5000));
  wu.stop();

  out.status_final = await kvStatus(kv);
  const names = [];
  for await (const st of kvm.list()) {
    if (st.bucket.startsWith("iop_")) {
      names.push(st.bucket);
    }
  }
  out.kvm_list = names;
  out.open_missing = await attempt(
    async () => (await kvm.open("iop_kv_missing")).status(),
    (st) => st.bucket,
  );
  out.destroy = await attempt(() => kv.destroy());
  out.open_deleted = await attempt(
    async () => (await kvm.open("iop_kv")).status(),
    (st) => st.bucket,
  );
}

// ---------------------------------------------------------------------------------------
// object store

function objInfo(info) {
  if (info === null) {
    return null;
  }
  const r = {
    name: info.name,
    bucket: info.bucket,
    size: info.size,
    chunks: info.chunks,
    digest: info.digest,
    deleted: info.deleted,
    description: info.description ?? null,
    has_nuid: Boolean(info.nuid),
    revision: info.revision,
  };
  if (info.options?.link) {
    r.link = { bucket: info.options.link.bucket, name: info.options.link.name ?? null };
  }
  if (info.isUpdate !== undefined) {
    r.is_update = info.isUpdate;
  }
  return r;
}

// 5 MiB of deterministic pseudo-random bytes (xorshift32).
function bigData() {
  const data = new Uint8Array(5 * 1024 * 1024);
  let x = 42;
  for (let i = 0; i < data.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    data[i] = x & 0xff;
  }
  return data;
}

function sha256hex(data) {
  return createHash("sha256").update(data).digest("hex");
}

// A ReadableStream that hands out the data in uneven pieces, unrelated to the chunk size.
function streamOf(data) {
  let offset = 0;
  return new ReadableStream({
    pull(controller) {
      if (offset >= data.length) {
        controller.close();
        return;
      }
      const n = Math.min(100_000, data.length - offset);
      controller.enqueue(data.slice(offset, offset + n));
      offset += n;
    },
  });
}

async function readAll(rs) {
  const h = createHash("sha256");
  let n = 0;
  const rd = rs.getReader();
  for (;;) {
    const { done, value } = await rd.read();
    if (done) {
      break;
    }
    h.update(value);
    n += value.length;
  }
  return { read: n, sha256: h.digest("hex") };
}

async function scenarioObjects(nc, js, jsm) {
  const objm = new Objm(js);
  const os = await must("create object store", objm.create("iop_obj", { description: "natsjs" }));
  const w = await must("watch", os.watch());
  const watched = [];
  const watching = (async () => {
    for await (const i of w) {
      watched.push(objInfo(i));
    }
  })();

  out.list_empty = await attempt(() => os.list(), (l) => l.map(objInfo));

  const data = bigData();
  out.local_sha256 = sha256hex(data);
  out.put_big = await attempt(
    () => os.put({ name: "big", description: "five MiB" }, streamOf(data)),
    objInfo,
  );
  out.put_small = await attempt(
    () => os.putBlob({ name: "small" }, new TextEncoder().encode("hello object")),
    objInfo,
  );

  const res = await must("get big", os.get("big"));
  out.get_big = await readAll(res.data);
  out.get_big.error = errObs(await res.error);
  out.get_big_info = objInfo(res.info);
  out.get_small = await attempt(
    () => os.getBlob("small"),
    (b) => b && new TextDecoder().decode(b),
  );
  out.info_big = await attempt(() => os.info("big"), objInfo);
  out.info_missing = await attempt(() => os.info("nope"), objInfo);
  out.get_missing = await attempt(() => os.get("nope"), (r) => r && objInfo(r.info));

  const list = () =>
    attempt(
      () => os.list(),
      (l) => l.map(objInfo).sort((a, b) => (a.name < b.name ? -1 : 1)),
    );
  out.list = await list();

  out.rename = await attempt(
    () => os.update("big", { name: "big2", description: "renamed" }),
    pubAck,
  );
  out.info_old_name = await attempt(() => os.info("big"), objInfo);
  const big2 = await must("info big2", os.info("big2"));
  out.info_new_name = objInfo(big2);
  out.get_renamed = await attempt(() => os.getBlob("big2"), (b) => b && sha256hex(b));

  out.add_link = await attempt(() => os.link("lnk", big2), objInfo);
  out.get_via_link = await attempt(
    () => os.getBlob("lnk"),
    (b) => b && { size: b.length, sha256: sha256hex(b) },
  );
  out.info_link = await attempt(() => os.info("lnk"), objInfo);
  out.rename_onto_existing = await attempt(
    () => os.update("small", { name: "big2" }),
    pubAck,
  );

  out.put_small_again = await attempt(
    () => os.putBlob({ name: "small" }, new TextEncoder().encode("hello again, object")),
    objInfo,
  );
  out.info_small_again = await attempt(() => os.info("small"), objInfo);
  out.delete_small = await attempt(() => os.delete("small"));
  out.info_deleted = await attempt(() => os.info("small"), objInfo);
  out.get_deleted = await attempt(() => os.getBlob("small"), (b) => b && b.length);
  out.delete_missing = await attempt(() => os.delete("nope"));
  out.list_after_delete = await list();

  await sleep(500);
  w.stop();
  await watching;
  out.watch = watched;

  const st = await must("status", os.status());
  out.status = {
    bucket: st.bucket,
    description: st.description,
    sealed: st.sealed,
    storage: st.storage,
    backing: st.backingStore,
    replicas: st.replicas,
    size: st.size,
  };
  const si = await must("object stream info", jsm.streams.info("OBJ_iop_obj"));
  out.stream_msgs = si.state.messages;
  out.stream_subjects = si.config.subjects;
  out.seal = await attempt(() => os.seal(), (s) => s.sealed);
  const sealed = await must("status after seal", os.status());
  out.sealed = sealed.sealed;
  out.put_after_seal = await attempt(
    () => os.putBlob({ name: "late" }, new TextEncoder().encode("too late")),
    objInfo,
  );
  const names = [];
  for await (const s of objm.list()) {
    if (s.bucket.startsWith("iop_")) {
      names.push(s.bucket);
    }
  }
  out.objm_list = names;
  out.destroy = await attempt(() => os.destroy());
  out.open_deleted = await attempt(
    async () => (await objm.open("iop_obj")).status(),
    (s) => s.bucket,
  );
}


// ---------------------------------------------------------------------------------------
// extras: features a 2.11 server advertises (batch direct get, multi-filter and headers-only
// consumers, pause, per-message TTL) and less common stream requests.

async function scenarioExtras(nc, js, jsm) {
  const stream = "IOP_EXTRAS";
  await must(
    "add",
    jsm.streams.add({ name: stream, subjects: ["iop.ex.>"], allow_direct: true }),
  );
  const h = headers();
  h.set("X-Kind", "first");
  for (const [subj, data] of [
    ["iop.ex.a", "a1"],
    ["iop.ex.b", "b1"],
    ["iop.ex.a", "a2"],
    ["iop.ex.c", "c1"],
    ["iop.ex.b", "b2"],
    ["iop.ex.a", "a3"],
  ]) {
    await must("publish", js.publish(subj, data, subj === "iop.ex.c" ? { headers: h } : {}));
  }
  out.pub_expect_stream_wrong = await attempt(
    () => js.publish("iop.ex.a", "x", { expect: { streamName: "OTHER" } }),
    pubAck,
  );
  out.pub_expect_last_msg_id_wrong = await attempt(
    () => js.publish("iop.ex.a", "x", { msgID: "m2", expect: { lastMsgID: "nope" } }),
    pubAck,
  );
  out.pub_expect_subject_seq_wildcard = await attempt(
    () =>
      js.publish("iop.ex.d", "d1", {
        expect: { lastSubjectSequence: 6, lastSubjectSequenceSubject: "iop.ex.*" },
      }),
    pubAck,
  );

  const batch = async (opts) => {
    const iter = await jsm.direct.getBatch(stream, opts);
    const r = [];
    for await (const m of iter) {
      r.push([m.subject, m.seq, m.string(), m.pending, m.lastSequence]);
    }
    return r;
  };
  out.direct_batch = await attempt(() => batch({ seq: 2, batch: 3 }));
  out.direct_batch_subject = await attempt(() => batch({ seq: 1, next_by_subj: "iop.ex.a" }));
  out.direct_batch_past_end = await attempt(() => batch({ seq: 100, batch: 3 }));
  out.direct_last_for = await attempt(async () => {
    const iter = await jsm.direct.getLastMessagesFor(stream, {
      multi_last: ["iop.ex.a", "iop.ex.b"],
    });
    const r = [];
    for await (const m of iter) {
      r.push([m.subject, m.seq, m.string()]);
    }
    return r.sort();
  });
  out.direct_last_for_up_to = await attempt(async () => {
    const iter = await jsm.direct.getLastMessagesFor(stream, {
      multi_last: ["iop.ex.>"],
      up_to_seq: 4,
    });
    const r = [];
    for await (const m of iter) {
      r.push([m.subject, m.seq, m.string()]);
    }
    return r.sort();
  });

  // Purges: up to a sequence, and with a subject filter and keep.
  out.purge_seq = await attempt(() => jsm.streams.purge(stream, { seq: 3 }));
  out.purge_filter_keep = await attempt(() =>
    jsm.streams.purge(stream, { filter: "iop.ex.a", keep: 1 }),
  );
  await must("delete msg", jsm.streams.deleteMessage(stream, 5));
  const si = await must("info", jsm.streams.info(stream, { deleted_details: true }));
  out.info_deleted_details = { ...streamState(si), deleted: si.state.deleted ?? null };

  // A consumer with two filter subjects, and a headers-only one.
  out.multi_filter = await attempt(async () => {
    await jsm.consumers.add(stream, {
      durable_name: "multi",
      ack_policy: AckPolicy.None,
      filter_subjects: ["iop.ex.a", "iop.ex.d"],
    });
    const c = await js.consumers.get(stream, "multi");
    const msgs = await fetchAll(c, { max_messages: 10, expires: 1000 });
    const ci = await jsm.consumers.info(stream, "multi");
    return {
      msgs: msgs.map((m) => [m.subject, m.seq, m.string()]),
      filter_subjects: ci.config.filter_subjects,
      num_pending: ci.num_pending,
    };
  });
  out.headers_only = await attempt(async () => {
    await jsm.consumers.add(stream, {
      durable_name: "hdrs",
      ack_policy: AckPolicy.None,
      headers_only: true,
      filter_subject: "iop.ex.c",
    });
    const c = await js.consumers.get(stream, "hdrs");
    const msgs = await fetchAll(c, { max_messages: 5, expires: 1000 });
    return msgs.map((m) => ({
      data_length: m.data.length,
      headers: headerObs(m.headers),
    }));
  });
  await must(
    "add bytes",
    jsm.consumers.add(stream, { durable_name: "bytes", ack_policy: AckPolicy.None }),
  );
  const bc = await must("get bytes", js.consumers.get(stream, "bytes"));
  // max_bytes counts subject, reply, headers and data: two of the three fit in 250 bytes, and
  // the request that cannot fit the third ends with a 409 that fetch() raises.
  for (const [key, maxBytes] of [["fetch_max_bytes", 250], ["fetch_max_bytes_rest", 1000]]) {
    const seqs = [];
    let error = null;
    try {
      for await (const m of await bc.fetch({ max_bytes: maxBytes, expires: 1000 })) {
        seqs.push(m.seq);
      }
    } catch (err) {
      error = errObs(err);
    }
    out[key] = { seqs, error };
  }

  // Pause and resume.
  out.pause = await attempt(
    () => jsm.consumers.pause(stream, "bytes", new Date(Date.now() + 3600_000)),
    (r) => r.paused,
  );
  out.paused_info = await attempt(
    () => jsm.consumers.info(stream, "bytes"),
    (ci) => ({ paused: ci.paused ?? false, has_pause_until: Boolean(ci.config.pause_until) }),
  );
  out.resume = await attempt(() => jsm.consumers.resume(stream, "bytes"), (r) => r.paused);
  out.resumed_info = await attempt(
    () => jsm.consumers.info(stream, "bytes"),
    (ci) => ({ paused: ci.paused ?? false, has_pause_until: Boolean(ci.config.pause_until) }),
  );
  const listed = [];
  for await (const ci of jsm.consumers.list(stream)) {
    listed.push([ci.name, ci.num_pending]);
  }
  out.consumers_listed = listed.sort();

  // Per-message TTL needs allow_msg_ttl.
  out.ttl_not_allowed = await attempt(
    () => js.publish("iop.ex.t", "t", { ttl: "1s" }),
    pubAck,
  );
  out.ttl_stream = await attempt(
    () =>
      jsm.streams.add({ name: "IOP_TTL", subjects: ["iop.ttl.>"], allow_msg_ttl: true }),
    (si) => si.config.allow_msg_ttl ?? null,
  );
  out.ttl_publish = await attempt(() => js.publish("iop.ttl.a", "t", { ttl: "1s" }), pubAck);
  out.ttl_get = await attempt(
    () => jsm.streams.getMessage("IOP_TTL", { seq: 1 }),
    storedMsg,
  );
  await sleep(2200);
  out.ttl_after = await attempt(() => jsm.streams.info("IOP_TTL"), streamState);

  // KV with delete markers that expire (limit_marker_ttl).
  const kvm = new Kvm(js);
  const kv = await must("kv", kvm.create("iop_kv_ttl", { markerTTL: 1000 }));
  out.kv_marker_status = await attempt(() => kv.status(), (st) => st.markerTTL);
  out.kv_ttl_put = await attempt(() => kv.put("k", "v"));
  out.kv_ttl_create = await attempt(() => kv.create("t", "v", "1s"));
  out.kv_ttl_get = await attempt(() => kv.get("t"), entryObs);
  out.kv_purge_ttl = await attempt(() => kv.purge("k", { ttl: "1s" }));
  out.kv_history_k = await attempt(
    () => collect(kv.history({ key: "k" })),
    (es) => es.map((e) => [e.key, e.revision, e.operation]),
  );
  await sleep(2200);
  out.kv_ttl_get_after = await attempt(() => kv.get("t"), entryObs);
  out.kv_ttl_k_after = await attempt(() => kv.get("k"), entryObs);

  for (const s of [stream, "IOP_TTL", "KV_iop_kv_ttl"]) {
    await must(`delete ${s}`, jsm.streams.delete(s));
  }
}

// ---------------------------------------------------------------------------------------
// more: mirrors and sources, stream config features (subject transform, republish, rollup,
// deny delete/purge, discard new, max age, sealed, first_seq), consumer options (backoff,
// inactive threshold, several filters, start time, replay original, metadata, paging), KV
// watch options and key filters, object store links, and direct get variants.

// caughtUp polls stream info until ok() holds or the deadline passes (mirrors and sources
// are filled asynchronously by either server).
async function caughtUp(jsm, stream, ok, ms = 5000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const si = await must(`info ${stream}`, jsm.streams.info(stream));
    if (ok(si) || Date.now() > deadline) {
      return si;
    }
    await sleep(50);
  }
}

// streamMsgs reads every stored message of a stream in order: subject, seq, data, headers.
async function streamMsgs(jsm, stream) {
  const si = await must(`info ${stream}`, jsm.streams.info(stream));
  const r = [];
  for (let seq = si.state.first_seq; seq <= si.state.last_seq; seq++) {
    const m = await attempt(() => jsm.streams.getMessage(stream, { seq }), storedMsg);
    if (!m.not_found) {
      r.push([m.subject, m.seq, m.data, sourceHeaders(m.header)]);
    }
  }
  return r;
}

// sourceHeaders keeps a stored message's headers. Nats-Stream-Source reads "<stream> <seq>
// <filter> <dest> <original subject> <hash>"; the hash is of the server's internal name for the
// source, so it is replaced by a marker.
function sourceHeaders(h) {
  if (h === null) {
    return null;
  }
  const r = { ...h };
  if (r["Nats-Stream-Source"]) {
    r["Nats-Stream-Source"] = r["Nats-Stream-Source"].map((v) => {
      const parts = v.split(" ");
      return parts.length === 6 ? [...parts.slice(0, 5), "<hash>"].join(" ") : v;
    });
  }
  return r;
}

// userMetadata drops the metadata the server adds itself (_nats.ver, _nats.level: versions).
function userMetadata(md) {
  if (!md) {
    return null;
  }
  return Object.fromEntries(Object.entries(md).filter(([k]) => !k.startsWith("_nats.")));
}

async function fetchObs(c, opts) {
  const msgs = await fetchAll(c, opts);
  return msgs.map((m) => [m.subject, m.seq, m.string(), m.info.deliveryCount]);
}

async function moreMirrors(js, jsm) {
  await must("add origin", jsm.streams.add({ name: "IOP_ORIGIN", subjects: ["iop.mo.>"] }));
  const h = headers();
  h.set("X-Origin", "yes");
  for (let i = 1; i <= 8; i++) {
    const subj = i % 2 ? "iop.mo.odd" : "iop.mo.even";
    await must("pub origin", js.publish(subj, `o-${i}`, i === 3 ? { headers: h } : {}));
  }
  out.mirror_add = await attempt(
    () =>
      jsm.streams.add({
        name: "IOP_MIRROR",
        mirror: { name: "IOP_ORIGIN", filter_subject: "iop.mo.odd", opt_start_seq: 3 },
      }),
    (si) => ({
      subjects: si.config.subjects ?? null,
      mirror: {
        name: si.config.mirror.name,
        filter_subject: si.config.mirror.filter_subject ?? null,
        opt_start_seq: si.config.mirror.opt_start_seq ?? null,
      },
    }),
  );
  const msi = await caughtUp(jsm, "IOP_MIRROR", (si) => si.state.last_seq >= 7);
  out.mirror_state = { ...streamState(msi), mirror_name: msi.mirror?.name ?? null };
  out.mirror_msgs = await streamMsgs(jsm, "IOP_MIRROR");
  // A mirror has no subjects of its own (a publish on the origin's subject that expects the
  // mirror fails), takes none, and its mirror config cannot change.
  out.mirror_publish = await attempt(
    () => js.publish("iop.mo.odd", "x", { expect: { streamName: "IOP_MIRROR" } }),
    pubAck,
  );
  out.mirror_update = await attempt(
    () =>
      jsm.streams.update("IOP_MIRROR", {
        ...msi.config,
        mirror: { name: "IOP_ORIGIN", filter_subject: "iop.mo.even" },
      }),
    () => "updated",
  );
  out.mirror_update_subjects = await attempt(
    () => jsm.streams.update("IOP_MIRROR", { ...msi.config, subjects: ["iop.mm.>"] }),
    () => "updated",
  );
  out.mirror_with_subjects = await attempt(
    () =>
      jsm.streams.add({
        name: "IOP_MIRROR_BAD",
        subjects: ["iop.mb.>"],
        mirror: { name: "IOP_ORIGIN" },
      }),
    () => "added",
  );

  // A stream sourcing two streams, with subject transforms.
  await must("add src2", jsm.streams.add({ name: "IOP_SRC2", subjects: ["iop.s2.>"] }));
  for (let i = 1; i <= 3; i++) {
    await must("pub src2", js.publish(`iop.s2.k${i}`, `s-${i}`));
  }
  out.sourced_add = await attempt(
    () =>
      jsm.streams.add({
        name: "IOP_SOURCED",
        sources: [
          {
            name: "IOP_ORIGIN",
            subject_transforms: [{ src: "iop.mo.even", dest: "agg.even" }],
          },
          {
            name: "IOP_SRC2",
            subject_transforms: [{ src: "iop.s2.*", dest: "agg.two.{{wildcard(1)}}" }],
          },
        ],
      }),
    (si) => si.config.sources.map((s) => [s.name, s.subject_transforms ?? null]),
  );
  const ssi = await caughtUp(jsm, "IOP_SOURCED", (si) => si.state.messages >= 7);
  out.sourced_state = streamState(ssi);
  const sourced = await streamMsgs(jsm, "IOP_SOURCED");
  // The two sources are copied concurrently: compare each source's messages in order.
  out.sourced_msgs = sourced.map(([subj, , data, hdr]) => [subj, data, hdr]).sort();
  out.sourced_order_even = sourced.filter((m) => m[0] === "agg.even").map((m) => m[2]);
  out.sourced_order_two = sourced.filter((m) => m[0].startsWith("agg.two")).map((m) => m[2]);
  // (The lag each server reports is left out: nats-server updates it asynchronously.)
  out.sourced_info = (ssi.sources ?? []).map((s) => s.name).sort();
  // Adding a source to an existing stream, from a start sequence and with a filter.
  out.source_added = await attempt(
    () =>
      jsm.streams.update("IOP_SRC2", {
        subjects: ["iop.s2.>"],
        sources: [{ name: "IOP_ORIGIN", filter_subject: "iop.mo.odd", opt_start_seq: 5 }],
      }),
    (si) => si.config.sources.map((x) => [x.name, x.filter_subject ?? null, x.opt_start_seq]),
  );
  await caughtUp(jsm, "IOP_SRC2", (si) => si.state.messages >= 5);
  out.source_added_msgs = await streamMsgs(jsm, "IOP_SRC2");
  for (const s of ["IOP_SOURCED", "IOP_SRC2", "IOP_MIRROR", "IOP_ORIGIN"]) {
    await must(`delete ${s}`, jsm.streams.delete(s));
  }
}

// moreEdges: a mirror after its origin deletes and purges, local deletes in a mirror, a stream
// transform changed by update, invalid and cyclic configs, a source by start time.
async function moreEdges(js, jsm) {
  await must("add edge", jsm.streams.add({ name: "IOP_EDGE", subjects: ["iop.eo.>"] }));
  for (let i = 1; i <= 6; i++) {
    await must("pub edge", js.publish(`iop.eo.${i % 3}`, `v${i}`));
  }
  await must(
    "add edge mirror",
    jsm.streams.add({ name: "IOP_EDGE_M", mirror: { name: "IOP_EDGE" } }),
  );
  await caughtUp(jsm, "IOP_EDGE_M", (si) => si.state.last_seq >= 6);
  // Deletes and purges in the origin are not mirrored; new messages are.
  await must("delete origin", jsm.streams.deleteMessage("IOP_EDGE", 2));
  await must("purge origin", jsm.streams.purge("IOP_EDGE", { filter: "iop.eo.0" }));
  await must("pub late", js.publish("iop.eo.9", "late"));
  const m = await caughtUp(jsm, "IOP_EDGE_M", (si) => si.state.last_seq >= 7);
  out.edge_mirror_state = streamState(m);
  out.edge_mirror_data = (await streamMsgs(jsm, "IOP_EDGE_M")).map((x) => x[2]);
  out.edge_origin_subjects = await attempt(
    () => jsm.streams.info("IOP_EDGE", { subjects_filter: "iop.eo.*" }),
    (si) => si.state.subjects,
  );
  // A mirror's own messages can be deleted and purged; it goes on from the origin's sequence.
  out.edge_mirror_delete = await attempt(() => jsm.streams.deleteMessage("IOP_EDGE_M", 1));
  out.edge_mirror_purge = await attempt(() => jsm.streams.purge("IOP_EDGE_M"), (r) => r.purged);
  await must("pub later", js.publish("iop.eo.9", "later"));
  const m2 = await caughtUp(jsm, "IOP_EDGE_M", (si) => si.state.last_seq >= 8);
  out.edge_mirror_state_after = streamState(m2);
  out.edge_source_time = await attempt(async () => {
    const since = new Date(Date.now() - 3600_000).toISOString();
    await jsm.streams.add({
      name: "IOP_EDGE_S",
      sources: [{ name: "IOP_EDGE", opt_start_time: since }],
    });
    return streamState(await caughtUp(jsm, "IOP_EDGE_S", (si) => si.state.messages >= 5));
  });
  out.edge_mirror_and_sources = await attempt(
    () =>
      jsm.streams.add({
        name: "IOP_EDGE_BAD",
        mirror: { name: "IOP_EDGE" },
        sources: [{ name: "IOP_EDGE" }],
      }),
    () => "added",
  );
  out.edge_mirror_self = await attempt(
    () => jsm.streams.add({ name: "IOP_EDGE_SELF", mirror: { name: "IOP_EDGE_SELF" } }),
    () => "added",
  );
  out.edge_transform_update = await attempt(async () => {
    const si = await jsm.streams.add({
      name: "IOP_EDGE_T",
      subjects: ["iop.et.>"],
      subject_transform: { src: "iop.et.*", dest: "iop.et.t.{{wildcard(1)}}" },
    });
    await js.publish("iop.et.a", "1");
    const u = await jsm.streams.update("IOP_EDGE_T", {
      ...si.config,
      subject_transform: { src: "iop.et.*", dest: "iop.et.u.{{wildcard(1)}}" },
    });
    await js.publish("iop.et.b", "2");
    return [u.config.subject_transform, await streamMsgs(jsm, "IOP_EDGE_T")];
  });
  out.edge_transform_invalid = await attempt(
    () =>
      jsm.streams.add({
        name: "IOP_EDGE_TB",
        subjects: ["iop.eb.>"],
        subject_transform: { src: "iop.eb.*", dest: "iop.eb.{{wildcard(2)}}" },
      }),
    () => "added",
  );
  out.edge_republish_cycle = await attempt(
    () =>
      jsm.streams.add({
        name: "IOP_EDGE_RC",
        subjects: ["iop.ec.>"],
        republish: { src: "iop.ec.>", dest: "iop.ec.x.>" },
      }),
    () => "added",
  );
  for (const s of ["IOP_EDGE_S", "IOP_EDGE_M", "IOP_EDGE_T", "IOP_EDGE"]) {
    await must(`delete ${s}`, jsm.streams.delete(s));
  }
}

async function moreStreamConfig(nc, js, jsm) {
  // A subject transform on the stream itself, and republish.
  out.transform_add = await attempt(
    () =>
      jsm.streams.add({
        name: "IOP_XFORM",
        subjects: ["iop.xf.>"],
        subject_transform: { src: "iop.xf.*", dest: "iop.xf.moved.{{wildcard(1)}}" },
        republish: { src: "iop.xf.moved.>", dest: "iop.rp.>" },
      }),
    (si) => [si.config.subject_transform, si.config.republish],
  );
  const rsub = nc.subscribe("iop.rp.>");
  const next = reader(rsub);
  out.transform_pub = await attempt(() => js.publish("iop.xf.a", "x1"), pubAck);
  await attempt(() => js.publish("iop.xf.b", "x2"), pubAck);
  out.transform_pub_3 = await attempt(() => js.publish("iop.xf.a", "x3"), pubAck);
  const republished = [];
  for (let i = 0; i < 3; i++) {
    const m = await next(2000);
    republished.push(typeof m === "string" ? m : [m.subject, m.string(), headerObs(m.headers)]);
  }
  rsub.unsubscribe();
  out.republished = republished;
  out.transform_msgs = await streamMsgs(jsm, "IOP_XFORM");

  // Rollups.
  await must(
    "add rollup",
    jsm.streams.add({ name: "IOP_ROLLUP", subjects: ["iop.ru.>"], allow_rollup_hdrs: true }),
  );
  for (const [subj, data] of [
    ["iop.ru.a", "a1"],
    ["iop.ru.a", "a2"],
    ["iop.ru.b", "b1"],
    ["iop.ru.b", "b2"],
  ]) {
    await must("pub rollup", js.publish(subj, data));
  }
  const rollup = (v) => {
    const rh = headers();
    rh.set("Nats-Rollup", v);
    return { headers: rh };
  };
  out.rollup_sub = await attempt(() => js.publish("iop.ru.a", "a3", rollup("sub")), pubAck);
  out.rollup_sub_msgs = await streamMsgs(jsm, "IOP_ROLLUP");
  out.rollup_all = await attempt(() => js.publish("iop.ru.c", "c1", rollup("all")), pubAck);
  out.rollup_all_state = streamState(await must("info", jsm.streams.info("IOP_ROLLUP")));
  out.rollup_bad = await attempt(() => js.publish("iop.ru.c", "c2", rollup("nope")), pubAck);
  // IOP_XFORM does not allow rollups.
  out.rollup_not_allowed = await attempt(
    () => js.publish("iop.xf.c", "n", rollup("sub")),
    pubAck,
  );

  // deny_delete / deny_purge, discard new with max_msgs, first_seq and sealing.
  await must(
    "add deny",
    jsm.streams.add({
      name: "IOP_DENY",
      subjects: ["iop.nr.>"],
      deny_delete: true,
      deny_purge: true,
      max_msgs: 3,
      discard: "new",
      first_seq: 100,
    }),
  );
  const discard = [];
  for (let i = 1; i <= 4; i++) {
    discard.push(await attempt(() => js.publish("iop.nr.x", `d-${i}`), pubAck));
  }
  out.discard_new = discard;
  out.deny_delete = await attempt(() => jsm.streams.deleteMessage("IOP_DENY", 101));
  out.deny_purge = await attempt(() => jsm.streams.purge("IOP_DENY"));
  const dsi = await must("info deny", jsm.streams.info("IOP_DENY"));
  out.deny_state = streamState(dsi);
  out.deny_config = streamConfig(dsi.config);
  out.seal = await attempt(
    () => jsm.streams.update("IOP_DENY", { ...dsi.config, sealed: true }),
    (si) => si.config.sealed,
  );
  out.sealed_publish = await attempt(() => js.publish("iop.nr.x", "late"), pubAck);
  out.sealed_unseal = await attempt(
    () => jsm.streams.update("IOP_DENY", { ...dsi.config, sealed: false }),
    () => "unsealed",
  );

  out.sealed_delete = await attempt(() => jsm.streams.deleteMessage("IOP_DENY", 100));
  out.sealed_purge = await attempt(() => jsm.streams.purge("IOP_DENY"));

  // Discard new per subject, and republish of headers only.
  await must(
    "add dnps",
    jsm.streams.add({
      name: "IOP_DNPS",
      subjects: ["iop.dn.>"],
      max_msgs_per_subject: 1,
      discard: "new",
      discard_new_per_subject: true,
      republish: { src: "iop.dn.>", dest: "iop.dnr.>", headers_only: true },
    }),
  );
  const hsub = nc.subscribe("iop.dnr.>");
  const hnext = reader(hsub);
  out.dnps = [];
  for (const [subj, data] of [
    ["iop.dn.a", "first"],
    ["iop.dn.a", "second"],
    ["iop.dn.b", "other"],
  ]) {
    out.dnps.push(await attempt(() => js.publish(subj, data), pubAck));
  }
  out.republished_headers_only = [];
  for (let i = 0; i < 2; i++) {
    const m = await hnext(2000);
    out.republished_headers_only.push(
      typeof m === "string" ? m : [m.subject, m.data.length, headerObs(m.headers)],
    );
  }
  hsub.unsubscribe();

  // max_age expiry.
  await must(
    "add age",
    jsm.streams.add({ name: "IOP_AGE", subjects: ["iop.ag.>"], max_age: 1e9 }),
  );
  await must("pub age", js.publish("iop.ag.a", "old"));
  out.age_before = streamState(await must("info age", jsm.streams.info("IOP_AGE")));
  const asi = await caughtUp(jsm, "IOP_AGE", (si) => si.state.messages === 0, 4000);
  out.age_after = streamState(asi);
  for (const s of ["IOP_XFORM", "IOP_ROLLUP", "IOP_DENY", "IOP_DNPS", "IOP_AGE"]) {
    await must(`delete ${s}`, jsm.streams.delete(s));
  }
}

async function moreConsumers(nc, js, jsm) {
  const stream = "IOP_MORE_CO";
  await must("add", jsm.streams.add({ name: stream, subjects: ["iop.mc.>"] }));
  for (const [subj, data] of [
    ["iop.mc.a", "a1"],
    ["iop.mc.b", "b1"],
    ["iop.mc.c", "c1"],
  ]) {
    await must("pub", js.publish(subj, data));
  }
  await sleep(300);
  const between = new Date();
  await sleep(300);
  for (const [subj, data] of [
    ["iop.mc.a", "a2"],
    ["iop.mc.b", "b2"],
    ["iop.mc.c", "c2"],
  ]) {
    await must("pub", js.publish(subj, data));
  }

  // backoff with max_deliver: redeliveries follow the backoff list, then stop.
  out.backoff_add = await attempt(
    () =>
      jsm.consumers.add(stream, {
        durable_name: "backoff",
        ack_policy: AckPolicy.Explicit,
        filter_subject: "iop.mc.a",
        max_deliver: 3,
        backoff: [200e6, 400e6],
      }),
    (ci) => ({ ...consumerInfo(ci), backoff: ci.config.backoff }),
  );
  out.backoff_bad = await attempt(
    () =>
      jsm.consumers.add(stream, {
        durable_name: "backoff_bad",
        ack_policy: AckPolicy.Explicit,
        max_deliver: 2,
        backoff: [200e6, 400e6, 800e6],
      }),
    () => "added",
  );
  const bc = await must("get backoff", js.consumers.get(stream, "backoff"));
  // Seq 1 is never acked: it is redelivered after 200 ms, then 400 ms, then no more (max 3).
  const deliveries = [];
  const times = [];
  for (let i = 0; i < 5; i++) {
    const m = await attempt(() => bc.next({ expires: 1500 }));
    if (m === null || m.error) {
      deliveries.push(m);
      break;
    }
    deliveries.push([m.seq, m.info.deliveryCount, m.string()]);
    if (m.seq === 1) {
      times.push(Date.now());
    } else {
      m.ack();
    }
  }
  out.backoff_deliveries = deliveries;
  out.backoff_gaps_ok =
    times.length === 3 && times[1] - times[0] >= 150 && times[2] - times[1] >= 350;

  // An ephemeral consumer with an inactive threshold goes away.
  const eph = await must(
    "add ephemeral",
    jsm.consumers.add(stream, { ack_policy: AckPolicy.None, inactive_threshold: 500e6 }),
  );
  out.ephemeral_threshold = eph.config.inactive_threshold;
  out.ephemeral_named = Boolean(eph.name);
  let gone = null;
  const deadline = Date.now() + 5000;
  while (Date.now() < deadline) {
    const r = await attempt(() => jsm.consumers.info(stream, eph.name), () => "present");
    if (r !== "present") {
      gone = r;
      break;
    }
    await sleep(100);
  }
  out.ephemeral_gone = gone;

  // Several filters, a start time, replay original, metadata.
  out.filters = await attempt(async () => {
    await jsm.consumers.add(stream, {
      durable_name: "filters",
      ack_policy: AckPolicy.None,
      filter_subjects: ["iop.mc.a", "iop.mc.c"],
      metadata: { team: "iop", purpose: "filters" },
    });
    const ci = await jsm.consumers.info(stream, "filters");
    const c = await js.consumers.get(stream, "filters");
    return {
      msgs: await fetchObs(c, { max_messages: 10, expires: 1000 }),
      metadata: userMetadata(ci.config.metadata),
      num_pending: ci.num_pending,
    };
  });
  out.overlapping_filters = await attempt(
    () =>
      jsm.consumers.add(stream, {
        durable_name: "overlap",
        ack_policy: AckPolicy.None,
        filter_subjects: ["iop.mc.>", "iop.mc.a"],
      }),
    () => "added",
  );
  out.start_time = await attempt(async () => {
    const ci = await jsm.consumers.add(stream, {
      durable_name: "since",
      ack_policy: AckPolicy.None,
      deliver_policy: "by_start_time",
      opt_start_time: between.toISOString(),
    });
    const c = await js.consumers.get(stream, "since");
    return {
      deliver_policy: ci.config.deliver_policy,
      num_pending: ci.num_pending,
      msgs: await fetchObs(c, { max_messages: 10, expires: 1000 }),
    };
  });
  out.start_time_missing = await attempt(
    () =>
      jsm.consumers.add(stream, {
        durable_name: "since_bad",
        ack_policy: AckPolicy.None,
        deliver_policy: "by_start_time",
      }),
    () => "added",
  );
  out.replay_original = await attempt(async () => {
    const ci = await jsm.consumers.add(stream, {
      durable_name: "replay",
      ack_policy: AckPolicy.None,
      replay_policy: "original",
    });
    const c = await js.consumers.get(stream, "replay");
    return {
      replay_policy: ci.config.replay_policy,
      msgs: (await fetchObs(c, { max_messages: 6, expires: 3000 })).map((m) => m[1]),
    };
  });
  out.filters_update = await attempt(
    () =>
      jsm.consumers.update(stream, "since", { filter_subjects: ["iop.mc.b", "iop.mc.c"] }),
    (ci) => [ci.config.filter_subjects ?? null, ci.config.filter_subject ?? null, ci.num_pending],
  );
  out.metadata_update = await attempt(
    () => jsm.consumers.update(stream, "filters", { metadata: { team: "iop2" } }),
    (ci) => userMetadata(ci.config.metadata),
  );
  out.headers_only_config = await attempt(
    () =>
      jsm.consumers.add(stream, {
        durable_name: "hdr",
        ack_policy: AckPolicy.None,
        headers_only: true,
      }),
    (ci) => ci.config.headers_only ?? false,
  );

  // Listing more consumers than one page of CONSUMER.LIST holds (256), and paging the names
  // by hand with an offset.
  for (let i = 0; i < 260; i += 20) {
    const adds = [];
    for (let j = i; j < i + 20 && j < 260; j++) {
      const name = `many${String(j).padStart(3, "0")}`;
      adds.push(jsm.consumers.add(stream, { durable_name: name, ack_policy: AckPolicy.None }));
    }
    await must("add many", Promise.all(adds));
  }
  const listed = [];
  for await (const ci of jsm.consumers.list(stream)) {
    listed.push([ci.name, ci.num_pending, userMetadata(ci.config.metadata)?.team ?? null]);
  }
  listed.sort();
  out.consumer_list_count = listed.length;
  out.consumer_list_named = listed.filter((c) => !c[0].startsWith("many"));
  out.consumer_list_many = listed.filter((c) => c[0].startsWith("many") && c[1] !== 6).length;
  const page = async (api, offset) => {
    const r = await nc.request(
      `$JS.API.CONSUMER.${api}.${stream}`,
      JSON.stringify({ offset }),
      { timeout: 5000 },
    );
    const body = r.json();
    const items = body.consumers ?? [];
    return {
      total: body.total,
      offset: body.offset,
      limit: body.limit,
      count: items.length,
      first: api === "NAMES" ? items[0] : items[0]?.name,
    };
  };
  out.consumer_names_page = await attempt(() => page("NAMES", 250));
  out.consumer_list_page_0 = await attempt(() => page("LIST", 0), (p) => ({ ...p, first: null }));
  out.consumer_list_page_256 = await attempt(() => page("LIST", 256), (p) => p.count);
  await must("delete", jsm.streams.delete(stream));
}

async function moreKV(js) {
  const kvm = new Kvm(js);
  const kv = await must("create kv", kvm.create("iop_kv_more", { history: 3 }));
  for (const [k, v] of [
    ["a.1", "x"],
    ["a.2", "y"],
    ["b.1", "z"],
    ["c.1", "w"],
  ]) {
    await must("put", kv.put(k, v));
  }
  await must("delete", kv.delete("a.2"));
  out.kv_keys_filters = await attempt(() => collect(kv.keys(["a.*", "c.>"])), (ks) => ks.sort());
  out.kv_keys_one = await attempt(() => collect(kv.keys("b.*")), (ks) => ks.sort());

  const watchObs = async (opts, wantMore) => {
    const w = await kv.watch(opts);
    const next = reader(w);
    const r = [];
    for (;;) {
      const e = await next(500);
      if (e === "timeout" || e === "done") {
        break;
      }
      r.push([e.key, e.revision, e.operation, e.string()]);
    }
    if (wantMore) {
      await wantMore();
      for (;;) {
        const e = await next(500);
        if (e === "timeout" || e === "done") {
          break;
        }
        r.push([e.key, e.revision, e.operation, e.string()]);
      }
    }
    w.stop();
    return r;
  };
  out.kv_watch_ignore_deletes = await attempt(() =>
    watchObs({ ignoreDeletes: true }, async () => {
      await kv.delete("b.1");
      await kv.put("d.1", "new");
    }),
  );
  out.kv_watch_all = await attempt(() => watchObs({ include: "history" }));
  out.kv_watch_headers_only = await attempt(() =>
    watchObs({ key: "a.>", headers_only: true, include: "history" }),
  );
  out.kv_watch_resume = await attempt(() => watchObs({ resumeFromRevision: 3 }));
  out.kv_watch_resume_future = await attempt(() => watchObs({ resumeFromRevision: 100 }));
  out.kv_watch_resume_keys = await attempt(() =>
    watchObs({ key: ["a.>", "d.>"], resumeFromRevision: 2 }),
  );
  await must("destroy kv", kv.destroy());
}

async function moreObjects(js) {
  const objm = new Objm(js);
  const src = await must("create obj src", objm.create("iop_obj_src"));
  const dst = await must("create obj dst", objm.create("iop_obj_dst"));
  const blob = new TextEncoder().encode("linked");
  await must("put", src.putBlob({ name: "doc", description: "d" }, blob));
  const linkObs = (i) => (i === null ? null : { name: i.name, link: i.options?.link ?? null });
  const found = (r) => (r === null ? null : "found");
  // A link to the whole other bucket, and a link to one object in it.
  out.link_store = await attempt(() => dst.linkStore("srclink", src), linkObs);
  out.link_info = await attempt(() => dst.info("srclink"), linkObs);
  out.link_object = await attempt(async () => {
    const l = await dst.link("doclink", await src.info("doc"));
    const got = await dst.getBlob("doclink");
    return { ...linkObs(l), data: got === null ? null : new TextDecoder().decode(got) };
  });
  out.get_missing = await attempt(() => dst.get("nothing-here"), found);
  out.get_blob_missing = await attempt(() => dst.getBlob("nothing-here"));
  out.get_link_to_store = await attempt(() => dst.get("srclink"), found);
  out.link_list = await attempt(() => dst.list(), (infos) => infos.map((i) => i.name).sort());
  await must("destroy dst", dst.destroy());
  await must("destroy src", src.destroy());
}

async function moreDirect(js, jsm) {
  const stream = "IOP_MORE_DIRECT";
  await must(
    "add",
    jsm.streams.add({ name: stream, subjects: ["iop.md.>"], allow_direct: true }),
  );
  for (const [subj, data] of [
    ["iop.md.a", "a1"],
    ["iop.md.b", "b1"],
    ["iop.md.a", "a2"],
  ]) {
    await must("pub", js.publish(subj, data));
  }
  await sleep(300);
  const between = new Date();
  await sleep(300);
  for (const [subj, data] of [
    ["iop.md.c", "c1"],
    ["iop.md.b", "b2"],
    ["iop.md.a", "a3"],
  ]) {
    await must("pub", js.publish(subj, data));
  }
  const drainBatch = async (iterPromise) => {
    const r = [];
    for await (const m of await iterPromise) {
      r.push([m.subject, m.seq, m.string(), m.pending, m.lastSequence]);
    }
    return r;
  };
  out.direct_batch_max_bytes = await attempt(() =>
    drainBatch(jsm.direct.getBatch(stream, { seq: 1, batch: 10, max_bytes: 40 })),
  );
  out.direct_batch_start_time = await attempt(() =>
    drainBatch(jsm.direct.getBatch(stream, { start_time: between, batch: 10 })),
  );
  out.direct_get_start_time = await attempt(
    () => jsm.direct.getMessage(stream, { start_time: between }),
    storedMsg,
  );
  out.direct_last_for_batch = await attempt(
    () =>
      drainBatch(jsm.direct.getLastMessagesFor(stream, { multi_last: ["iop.md.>"], batch: 2 })),
    (r) => r.length,
  );
  out.direct_last_for_up_to_time = await attempt(
    () =>
      drainBatch(
        jsm.direct.getLastMessagesFor(stream, { multi_last: ["iop.md.*"], up_to_time: between }),
      ),
    (r) => r.map((m) => m.slice(0, 3)).sort(),
  );
  out.direct_last_for_none = await attempt(() =>
    drainBatch(jsm.direct.getLastMessagesFor(stream, { multi_last: ["iop.md.zzz"] })),
  );
  await must("delete", jsm.streams.delete(stream));
}

async function scenarioMore(nc, js, jsm) {
  await moreMirrors(js, jsm);
  await moreEdges(js, jsm);
  await moreStreamConfig(nc, js, jsm);
  await moreConsumers(nc, js, jsm);
  await moreKV(js);
  await moreObjects(js);
  await moreDirect(js, jsm);
}

// ---------------------------------------------------------------------------------------

const scenarios = {
  streams: scenarioStreams,
  consumers: scenarioConsumers,
  kv: scenarioKV,
  objects: scenarioObjects,
  extras: scenarioExtras,
  more: scenarioMore,
};

// What cluster.mjs's scenarios use of this file.
const helpers = {
  out,
  must,
  attempt,
  fatal,
  sleep,
  reader,
  pubAck,
  msgObs,
  consumerInfo,
  settledInfo,
  fetchAll,
  entryObs,
  streamState,
  streamConfig,
  collect,
};

async function main() {
  const [url, scenario] = process.argv.slice(2);
  out.scenario = scenario;
  // Nothing may hang: a scenario that stalls reports where it was after 45 seconds (25 for
  // a cluster scenario, whose harness gives up after 30).
  setTimeout(
    () => {
      out.fatal = { step: "watchdog", last_step: currentStep };
      print();
      process.exit(1);
    },
    clusterScenarios[scenario] ? 25_000 : 45_000,
  ).unref();
  let nc = null;
  let code = 0;
  try {
    const runCluster = clusterScenarios[scenario];
    const run = scenarios[scenario];
    if (runCluster) {
      // Connects to the servers itself, one connection per URL.
      await runCluster(url.split(","), helpers);
    } else if (!run) {
      fatal("scenario", new Error(`unknown scenario ${scenario}`));
    } else {
      nc = await must("connect", connect({ servers: url, name: `natsjs-${scenario}` }));
      const jsm = await must("jetstream manager", jetstreamManager(nc, { timeout: 5000 }));
      const js = jetstream(nc, { timeout: 5000 });
      await run(nc, js, jsm);
    }
  } catch (err) {
    if (!(err instanceof Fatal)) {
      out.fatal = { step: "uncaught", error: errObs(err), stack: err?.stack ?? null };
    }
    code = 1;
  }
  if (nc !== null) {
    await nc.close().catch(() => {});
  }
  print();
  process.exit(code);
}

await main();
