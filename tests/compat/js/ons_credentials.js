'use strict';
// ali-ons with an access key: send and consume back ("good"), or show the refusal ("bad").
const { Producer, Consumer, Message } = require('ali-ons');
const [nameSrv, accessKeyId, accessKeySecret, mode] = process.argv.slice(2);
const httpclient = { request() { throw new Error('no address server'); } };
const common = { nameSrv, httpclient, accessKeyId, accessKeySecret };
const bounded = (p, ms) => Promise.race([p, new Promise((_, no) => setTimeout(() => no(new Error('timed out')), ms))]);
(async () => {
  const producer = new Producer({ ...common, producerGroup: 'PG_ONS_ACL' });
  if (mode === 'bad') {
    try {
      await bounded(producer.ready(), 20000);
      await bounded(producer.send(new Message('OnsAcl', 'TagA', Buffer.from('nope'))), 20000);
      console.log('SENT despite a wrong secret');
    } catch (e) {
      console.log('REFUSED', e.message);
    }
    process.exit(0);
  }
  await producer.ready();
  for (let i = 0; i < 3; i++) {
    const r = await producer.send(new Message('OnsAcl', 'TagA', Buffer.from('acl ' + i)));
    console.log('SENT', r.sendStatus, r.msgId);
  }
  const consumer = new Consumer({ ...common, consumerGroup: 'CG_ONS_ACL', consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET' });
  const got = [];
  consumer.subscribe('OnsAcl', '*', async msg => { got.push(msg.body.toString()); });
  await consumer.ready();
  const deadline = Date.now() + 30000;
  while (got.length < 3 && Date.now() < deadline) await new Promise(r => setTimeout(r, 100));
  console.log('GOT', JSON.stringify(got.sort()));
  await consumer.close();
  await producer.close();
  process.exit(0);
})().catch(e => { console.error('ERROR', e); process.exit(1); });
