'use strict';
/*
 * Drive the official RocketMQ 5.x Node.js client (npm rocketmq-client-nodejs 1.0.8) from the
 * command line; tests/compat/grpc_clients.py run_node() runs it with NODE_PATH pointing at the
 * installed package.
 *
 *   node grpc_client.js send    --endpoint 127.0.0.1:8081 --topic T [--kind normal|fifo|delay|
 *                               transaction] [--count N] [--tag A] [--keys k1,k2] [--prop k=v]
 *                               [--message-group G] [--delay-seconds S]
 *                               [--tx-resolution commit|rollback|unknown] [--inflight K]
 *   node grpc_client.js receive --endpoint ... --topic T --group G --count N [--batch 32]
 *                               [--invisible 15] [--no-ack] [--change-invisible S]
 *   node grpc_client.js push    --endpoint ... --topic T --group G --count N [--fail-times K]
 *   common: [--access-key AK --secret-key SK] [--tls [--ca-file PEM]] [--namespace NS]
 *           [--timeout S] [--summary] [--sync-stdin]
 *
 * The same subcommands and options as ../grpc/official_client.py (durations in seconds here
 * too; the client itself takes milliseconds). It prints ONE JSON object on stdout at the end
 * and exits 0 when ok; console output of any kind goes to stderr. The client logs to
 * ~/logs/rocketmq/rocketmq_client_nodejs.log (egg-logger).
 *
 * Client facts this relies on (1.0.8): startup waits, without a time limit, for the first
 * settings command on the telemetry stream when the client has topics; send takes
 * {topic, body, tag, keys, properties: Map, messageGroup, deliveryTimestamp: Date};
 * receive(max, invisibleMs); changeInvisibleDuration(message, ms) replaces the message's
 * receiptHandle.
 */

const util = require('node:util');
const path = require('node:path');
const crypto = require('node:crypto');

// Nothing but the result goes to stdout.
const toStderr = (...args) => process.stderr.write(util.format(...args) + '\n');
console.log = toStderr;
console.info = toStderr;
console.warn = toStderr;
console.debug = toStderr;

const RESULT = { ok: false };
let emitted = false;

function emitAndExit(code) {
  if (emitted) return;
  emitted = true;
  process.stdout.write(JSON.stringify(RESULT) + '\n', () => process.exit(code));
}

// ------------------------------------------------------------------------------ arguments
const SPEC = {
  // name: [default, kind] with kind one of str, num, flag, list
  endpoint: [ null, 'str' ], topic: [ null, 'str' ], namespace: [ '', 'str' ],
  'access-key': [ null, 'str' ], 'secret-key': [ null, 'str' ], tls: [ false, 'flag' ],
  'ca-file': [ null, 'str' ], 'request-timeout': [ 3, 'num' ], timeout: [ 60, 'num' ],
  deadline: [ null, 'num' ], count: [ 1, 'num' ], summary: [ false, 'flag' ],
  'sync-stdin': [ false, 'flag' ],
  // send
  kind: [ 'normal', 'str' ], tag: [ null, 'str' ], keys: [ null, 'str' ], prop: [ [], 'list' ],
  body: [ 'hello', 'str' ], 'body-size': [ 0, 'num' ], 'message-group': [ 'group-0', 'str' ],
  'delay-seconds': [ 10, 'num' ], 'tx-resolution': [ 'commit', 'str' ],
  'check-answer': [ 'commit', 'str' ], 'check-wait': [ 30, 'num' ], inflight: [ 0, 'num' ],
  // consumers
  group: [ null, 'str' ], 'tag-expr': [ '*', 'str' ], sql: [ null, 'str' ],
  batch: [ 32, 'num' ], invisible: [ 15, 'num' ], 'await-duration': [ null, 'num' ],
  'no-ack': [ false, 'flag' ], 'change-invisible': [ null, 'num' ],
  'ack-threads': [ 1, 'num' ], 'max-empty': [ 0, 'num' ],
  'fail-times': [ 0, 'num' ], threads: [ 20, 'num' ],
};

function parseArgs(argv) {
  const command = argv[0];
  if (![ 'send', 'receive', 'push' ].includes(command)) {
    throw new Error(`usage: grpc_client.js send|receive|push --endpoint H:P --topic T ...`);
  }
  const args = { command };
  for (const [ name, [ def ] ] of Object.entries(SPEC)) {
    args[name] = Array.isArray(def) ? [] : def;
  }
  for (let i = 1; i < argv.length; i++) {
    const name = argv[i].replace(/^--/, '');
    const spec = SPEC[name];
    if (!argv[i].startsWith('--') || !spec) throw new Error(`unknown argument ${argv[i]}`);
    const kind = spec[1];
    if (kind === 'flag') {
      args[name] = true;
      continue;
    }
    const value = argv[++i];
    if (value === undefined) throw new Error(`${argv[i - 1]} needs a value`);
    if (kind === 'num') args[name] = Number(value);
    else if (kind === 'list') args[name].push(value);
    else args[name] = value;
  }
  for (const required of [ 'endpoint', 'topic' ]) {
    if (!args[required]) throw new Error(`--${required} is required`);
  }
  if (command !== 'send' && !args.group) throw new Error('--group is required');
  return args;
}

// ------------------------------------------------------------------------------ helpers
function baseOptions(args) {
  const options = {
    endpoints: args.endpoint,
    namespace: args.namespace,
    requestTimeout: args['request-timeout'] * 1000,
    sslEnabled: args.tls,
  };
  if (args['access-key']) {
    options.sessionCredentials = { accessKey: args['access-key'],
      accessSecret: args['secret-key'] || '' };
  }
  return options;
}

function readyPoint(args) {
  if (!args['sync-stdin']) return Promise.resolve();
  process.stderr.write('@@READY\n');
  return new Promise(resolve => {
    process.stdin.once('data', () => {
      process.stdin.pause();
      resolve();
    });
  });
}

function donePoint(args) {
  if (args['sync-stdin']) process.stderr.write('@@DONE\n');
}

function bodyJson(body) {
  if (!body) return { body: null, body_size: 0 };
  const text = body.toString('utf8');
  if (Buffer.from(text, 'utf8').equals(body)) return { body: text, body_size: body.length };
  return { body_b64: body.toString('base64'), body_size: body.length };
}

function cpuSeconds(usage) {
  return (usage.user + usage.system) / 1e6;
}

function dateMs(date) {
  return date instanceof Date ? date.getTime() : null;
}

function messageJson(message, receivedAt) {
  const out = {
    message_id: message.messageId,
    topic: message.topic,
    tag: message.tag || null,
    keys: [ ...(message.keys || []) ].sort(),
    properties: Object.fromEntries(message.properties || new Map()),
    delivery_attempt: message.deliveryAttempt ?? null,
    message_group: message.messageGroup || null,
    delivery_timestamp_ms: dateMs(message.deliveryTimestamp),
    born_timestamp_ms: dateMs(message.bornTimestamp),
    born_host: message.bornHost,
    queue_offset: message.offset ?? null,
    receipt_handle: message.receiptHandle,
    corrupted: !!message.corrupted,
    transport_delivery_timestamp_ms: dateMs(message.transportDeliveryTimestamp),
    received_at: receivedAt / 1000,
  };
  return Object.assign(out, bodyJson(message.body));
}

function buildMessage(args, i) {
  const message = {
    topic: args.topic,
    body: args['body-size'] ? crypto.randomBytes(args['body-size']) :
      Buffer.from(`${args.body}-${i}`),
  };
  if (args.tag) message.tag = args.tag;
  if (args.keys) {
    message.keys = args.keys.split(',').filter(Boolean).map(k => k.replace('{i}', String(i)));
  }
  if (args.prop.length) {
    message.properties = new Map(args.prop.map(p => {
      const at = p.indexOf('=');
      return [ p.slice(0, at), p.slice(at + 1).replace('{i}', String(i)) ];
    }));
  }
  if (args.kind === 'fifo') message.messageGroup = args['message-group'];
  if (args.kind === 'delay') {
    message.deliveryTimestamp = new Date(Date.now() + args['delay-seconds'] * 1000);
  }
  return message;
}

function receiptJson(receipt) {
  return {
    message_id: receipt.messageId,
    transaction_id: receipt.transactionId,
    offset: receipt.offset,
    recall_handle: receipt.recallHandle || null,
    queue: receipt.messageQueue ? receipt.messageQueue.queueId : null,
  };
}

function filterExpression(args, lib, pb) {
  if (args.sql) return new lib.FilterExpression(args.sql, pb.FilterType.SQL);
  return new lib.FilterExpression(args['tag-expr']);
}

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} took over ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

// ------------------------------------------------------------------------------ send
async function cmdSend(args, lib, pb) {
  const checked = [];
  let onChecked = () => {};
  const tx = args.kind === 'transaction';
  const options = Object.assign(baseOptions(args), { topics: [ args.topic ] });
  if (tx) {
    options.checker = {
      async check(messageView) {
        checked.push({ message_id: messageView.messageId, topic: messageView.topic,
          tag: messageView.tag || null, at: Date.now() / 1000 });
        if (checked.length >= args.count) onChecked();
        return args['check-answer'] === 'rollback' ? pb.TransactionResolution.ROLLBACK :
          pb.TransactionResolution.COMMIT;
      },
    };
  }
  const producer = new lib.Producer(options);
  const t0 = performance.now();
  await producer.startup();
  RESULT.startup_s = (performance.now() - t0) / 1000;
  const sent = [];
  const errors = [];
  Object.assign(RESULT, { sent, errors, checked });
  try {
    await readyPoint(args);
    const deadline = Date.now() + args.timeout * 1000;
    const t1 = performance.now();
    const c1 = process.cpuUsage();
    const sendOne = async i => {
      const message = buildMessage(args, i);
      let receipt;
      if (tx) {
        const transaction = producer.beginTransaction();
        receipt = await producer.send(message, transaction);
        if (args['tx-resolution'] === 'commit') await transaction.commit();
        else if (args['tx-resolution'] === 'rollback') await transaction.rollback();
      } else {
        receipt = await producer.send(message);
      }
      if (args.summary) {
        sent.push(null);
      } else {
        const entry = receiptJson(receipt);
        entry.sent_at = Date.now() / 1000;
        if (message.deliveryTimestamp) {
          entry.delivery_timestamp_s = message.deliveryTimestamp.getTime() / 1000;
        }
        sent.push(entry);
      }
    };
    if (args.inflight > 0 && !tx) {
      let next = 0;
      const worker = async () => {
        while (next < args.count && Date.now() < deadline) {
          const i = next++;
          try {
            await sendOne(i);
          } catch (e) {
            errors.push(`${e.name}: ${e.message}`);
          }
        }
      };
      await Promise.all(Array.from({ length: args.inflight }, worker));
    } else {
      for (let i = 0; i < args.count; i++) {
        if (Date.now() > deadline) {
          errors.push(`timeout after ${i} messages`);
          break;
        }
        await sendOne(i);
      }
    }
    const elapsed = (performance.now() - t1) / 1000;
    RESULT.cpu_s = cpuSeconds(process.cpuUsage(c1));
    donePoint(args);
    if (tx && args['tx-resolution'] === 'unknown' && checked.length < args.count) {
      await new Promise(resolve => {
        onChecked = resolve;
        setTimeout(resolve, args['check-wait'] * 1000);
      });
      await new Promise(resolve => setTimeout(resolve, 500));
    }
    Object.assign(RESULT, { count: sent.length, elapsed_s: elapsed,
      msgs_s: elapsed > 0 ? sent.length / elapsed : null });
    if (args.summary) RESULT.sent = sent.length;
  } finally {
    await withTimeout(producer.shutdown(), 15000, 'shutdown').catch(e => {
      RESULT.shutdown_error = String(e);
    });
  }
}

// ------------------------------------------------------------------------------ receive
async function cmdReceive(args, lib, pb) {
  const options = Object.assign(baseOptions(args), {
    consumerGroup: args.group,
    subscriptions: new Map([[ args.topic, filterExpression(args, lib, pb) ]]),
  });
  if (args['await-duration'] !== null) options.awaitDuration = args['await-duration'] * 1000;
  const consumer = new lib.SimpleConsumer(options);
  const t0 = performance.now();
  await consumer.startup();
  RESULT.startup_s = (performance.now() - t0) / 1000;
  const messages = [];
  const errors = [];
  Object.assign(RESULT, { messages, errors });
  let received = 0;
  let acked = 0;
  let empty = 0;
  try {
    await readyPoint(args);
    const deadline = Date.now() + args.timeout * 1000;
    const t1 = performance.now();
    const c1 = process.cpuUsage();
    while (received < args.count && Date.now() < deadline) {
      const want = Math.min(args.batch, args.count - received);
      let batch;
      try {
        batch = await consumer.receive(want, args.invisible * 1000);
      } catch (e) {
        errors.push(`receive: ${e.name}: ${e.message}`);
        await new Promise(resolve => setTimeout(resolve, 200));
        continue;
      }
      const now = Date.now();
      if (!batch.length) {
        empty++;
        if (args['max-empty'] && empty >= args['max-empty']) break;
        continue;
      }
      const acks = [];
      for (const message of batch) {
        received++;
        const entry = args.summary ? null : messageJson(message, now);
        if (args['change-invisible'] !== null) {
          const before = message.receiptHandle;
          await consumer.changeInvisibleDuration(message, args['change-invisible'] * 1000);
          if (entry) {
            entry.receipt_handle_before_change = before;
            entry.receipt_handle = message.receiptHandle;
          }
        }
        if (!args['no-ack']) {
          const ack = consumer.ack(message).then(() => { acked++; }, e => {
            errors.push(`ack ${message.messageId}: ${e.name}: ${e.message}`);
          });
          if (args['ack-threads'] > 1) acks.push(ack);
          else await ack;
        }
        if (entry) messages.push(entry);
      }
      await Promise.all(acks);
    }
    const elapsed = (performance.now() - t1) / 1000;
    RESULT.cpu_s = cpuSeconds(process.cpuUsage(c1));
    donePoint(args);
    Object.assign(RESULT, { count: received, acked, empty_receives: empty, elapsed_s: elapsed,
      msgs_s: elapsed > 0 ? received / elapsed : null });
    if (args.summary) RESULT.messages = received;
  } finally {
    await withTimeout(consumer.shutdown(), 15000, 'shutdown').catch(e => {
      RESULT.shutdown_error = String(e);
    });
  }
}

// ------------------------------------------------------------------------------ push
async function cmdPush(args, lib, pb) {
  const messages = [];
  const deliveries = new Map();
  let counted = 0;
  let onEnough = () => {};
  const options = Object.assign(baseOptions(args), {
    consumerGroup: args.group,
    subscriptions: new Map([[ args.topic, filterExpression(args, lib, pb) ]]),
    messageListener: {
      async consume(message) {
        const seen = (deliveries.get(message.messageId) || 0) + 1;
        deliveries.set(message.messageId, seen);
        const fail = seen <= args['fail-times'];
        if (!args.summary) {
          const entry = messageJson(message, Date.now());
          entry.result = fail ? 'FAILURE' : 'SUCCESS';
          messages.push(entry);
        }
        if (!fail && ++counted >= args.count) onEnough();
        return fail ? lib.ConsumeResult.FAILURE : lib.ConsumeResult.SUCCESS;
      },
    },
  });
  const consumer = new lib.PushConsumer(options);
  const t0 = performance.now();
  await consumer.startup();
  RESULT.startup_s = (performance.now() - t0) / 1000;
  RESULT.messages = messages;
  try {
    await readyPoint(args);
    const t1 = performance.now();
    const c1 = process.cpuUsage();
    if (counted < args.count) {
      await new Promise(resolve => {
        onEnough = resolve;
        setTimeout(resolve, args.timeout * 1000);
      });
    }
    const elapsed = (performance.now() - t1) / 1000;
    RESULT.cpu_s = cpuSeconds(process.cpuUsage(c1));
    donePoint(args);
    let total = 0;
    for (const n of deliveries.values()) total += n;
    Object.assign(RESULT, { count: counted, deliveries: total, distinct: deliveries.size,
      elapsed_s: elapsed, msgs_s: elapsed > 0 ? counted / elapsed : null });
    RESULT.messages = args.summary ? counted : messages.slice();
  } finally {
    await withTimeout(consumer.shutdown(), 15000, 'shutdown').catch(e => {
      RESULT.shutdown_error = String(e);
    });
  }
}

// ------------------------------------------------------------------------------ main
async function main() {
  const t0 = performance.now();
  let args;
  try {
    args = parseArgs(process.argv.slice(2));
  } catch (e) {
    RESULT.error = String(e.message);
    return emitAndExit(2);
  }
  if (args['ca-file']) {  // read by @grpc/grpc-js when it loads
    process.env.GRPC_DEFAULT_SSL_ROOTS_FILE_PATH = path.resolve(args['ca-file']);
  }
  Object.assign(RESULT, { command: args.command, endpoint: args.endpoint, topic: args.topic });
  const deadline = args.deadline !== null ? args.deadline : args.timeout + 60;
  setTimeout(() => {
    RESULT.ok = false;
    RESULT.error = `deadline of ${deadline} s exceeded`;
    emitAndExit(3);
  }, deadline * 1000).unref();
  try {
    const lib = require('rocketmq-client-nodejs');
    const pb = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');
    try {
      RESULT.client_version = require('rocketmq-client-nodejs/package.json').version;
    } catch (e) {
      RESULT.client_version = null;
    }
    const commands = { send: cmdSend, receive: cmdReceive, push: cmdPush };
    await commands[args.command](args, lib, pb);
    RESULT.ok = !(RESULT.errors && RESULT.errors.length);
  } catch (e) {
    RESULT.ok = false;
    RESULT.error = `${e.name}: ${e.message}`;
    RESULT.traceback = String(e.stack || '').slice(-4000);
  }
  RESULT.total_s = (performance.now() - t0) / 1000;
  emitAndExit(RESULT.ok ? 0 : 1);
}

main();
