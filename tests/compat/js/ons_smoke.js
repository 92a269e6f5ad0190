'use strict';
const { Producer, Consumer, Message } = require('ali-ons');
const nameSrv = process.argv[2];
const httpclient = { request() { throw new Error('no address server'); } };
const common = { nameSrv, httpclient, accessKeyId: '', accessKeySecret: '' };
(async () => {
  const producer = new Producer({ ...common, producerGroup: 'PG_ONS' });
  await producer.ready();
  for (let i = 0; i < 5; i++) {
    const r = await producer.send(new Message('OnsTopic', 'TagA', Buffer.from('ons ' + i)));
    console.log('SENT', r.sendStatus, r.msgId);
  }
  const consumer = new Consumer({ ...common, consumerGroup: 'CG_ONS', consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET' });
  const got = [];
  consumer.subscribe('OnsTopic', '*', async msg => { got.push(msg.body.toString()); });
  await consumer.ready();
  const deadline = Date.now() + 30000;
  while (got.length < 5 && Date.now() < deadline) await new Promise(r => setTimeout(r, 100));
  console.log('GOT', JSON.stringify(got.sort()));
  await consumer.close();
  await producer.close();
  process.exit(0);
})().catch(e => { console.error('ERROR', e); process.exit(1); });
