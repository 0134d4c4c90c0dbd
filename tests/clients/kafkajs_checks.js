// KafkaJS (an independent Kafka client, pure JavaScript) against `deltalog serve`: prints one JSON line of findings.
// Usage: node kafkajs_checks.js BROKER TOPIC SCENARIO   (SCENARIO: produce-consume | transaction | transactions | reset)
const { Kafka, logLevel } = require('kafkajs')

const [broker, topic, scenario] = process.argv.slice(2)
const kafka = new Kafka({ clientId: 'kafkajs-checks', brokers: [broker], logLevel: logLevel.NOTHING, retry: { retries: 3 } })
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

async function consumeAll (groupId, expected, { fromBeginning = true, timeoutMs = 20000, readUncommitted = false } = {}) {
  // autoCommitInterval: a batch of only a control record is committed by the interval (KafkaJS's runner), not at once
  // readUncommitted false (KafkaJS's default) is read_committed: aborted records left out, open ones waited for
  const consumer = kafka.consumer({ groupId, maxWaitTimeInMs: 500, sessionTimeout: 10000, heartbeatInterval: 1000, autoCommitInterval: 100, readUncommitted })
  const seen = []
  let crashed = null
  consumer.on(consumer.events.CRASH, (e) => { crashed = String(e.payload.error) })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning })
  await consumer.run({ eachMessage: async ({ partition, message }) => {
    seen.push({ partition, offset: Number(message.offset), key: message.key && message.key.toString(), value: message.value && message.value.toString() })
  } })
  const deadline = Date.now() + timeoutMs
  while (seen.length < expected && Date.now() < deadline && !crashed) await sleep(100)
  return { consumer, seen, crashed: () => crashed }
}

async function lagOf (admin, groupId) {
  const ends = await admin.fetchTopicOffsets(topic)
  const committed = await admin.fetchOffsets({ groupId, topics: [topic] })
  const done = Object.fromEntries(committed[0].partitions.map((p) => [p.partition, Number(p.offset)]))
  return ends.map((e) => Number(e.high) - Math.max(0, done[e.partition] ?? 0)).reduce((a, b) => a + b, 0)
}

async function main () {
  const admin = kafka.admin()
  await admin.connect()
  const out = { scenario }
  if (scenario === 'produce-consume') {
    const producer = kafka.producer()
    await producer.connect()
    const sent = await producer.send({ topic, messages: [0, 1, 2, 3, 4].map((i) => ({ key: `k${i}`, value: `v${i}`, partition: 0 })) })
    out.sent = sent.map((r) => Number(r.baseOffset))
    await producer.disconnect()
    const { consumer, seen, crashed } = await consumeAll('kafkajs-group', 5)
    out.seen = seen.map((m) => [m.offset, m.key, m.value])
    await sleep(1500) // auto commit
    await consumer.disconnect()
    out.lag = await lagOf(admin, 'kafkajs-group')
    out.crashed = crashed()
    await producer.connect()
    await producer.send({ topic, messages: [5, 6].map((i) => ({ key: `k${i}`, value: `v${i}`, partition: 0 })) })
    await producer.disconnect()
    const next = await consumeAll('kafkajs-group', 2) // the group's committed offset wins over fromBeginning
    await sleep(1000)
    out.resumed = next.seen.map((m) => [m.offset, m.key, m.value])
    await next.consumer.disconnect()
  } else if (scenario === 'transaction') {
    const producer = kafka.producer({ transactionalId: 'kafkajs-txn', maxInFlightRequests: 1, idempotent: true })
    await producer.connect()
    const txn = await producer.transaction()
    await txn.send({ topic, messages: [0, 1, 2].map((i) => ({ key: `t${i}`, value: `tv${i}`, partition: 0 })) })
    await txn.commit()
    await producer.disconnect()
    const { consumer, seen, crashed } = await consumeAll('kafkajs-txn-group', 3)
    out.seen = seen.map((m) => [m.offset, m.key, m.value])
    await sleep(3000) // idle at the end of the partition: long polls, not a spin
    await consumer.disconnect()
    out.crashed = crashed()
  } else if (scenario === 'transactions') {
    // Kafka's transaction checks: an aborted transaction, a committed one, a consume-transform-produce commit of a
    // group's offsets (sendOffsets: AddOffsetsToTxn + TxnOffsetCommit), read_committed vs read_uncommitted
    // consumers, and a second producer with the same transactional id fencing the first.
    const source = `${topic}-in`
    const producer = kafka.producer({ transactionalId: 'kafkajs-etl', maxInFlightRequests: 1, idempotent: true })
    await producer.connect()
    const aborted = await producer.transaction()
    await aborted.send({ topic, messages: [0, 1].map((i) => ({ key: `a${i}`, value: `av${i}`, partition: 0 })) })
    await aborted.abort()
    const committed = await producer.transaction()
    await committed.send({ topic, messages: [0, 1, 2].map((i) => ({ key: `c${i}`, value: `cv${i}`, partition: 0 })) })
    await committed.commit()
    const etl = await producer.transaction()
    await etl.send({ topic, messages: [{ key: 'x0', value: 'xv0', partition: 0 }] })
    await etl.sendOffsets({ consumerGroupId: 'kafkajs-etl-group', topics: [{ topic: source, partitions: [{ partition: 0, offset: '2' }] }] })
    await etl.commit()
    const open = await producer.transaction() // left open, then fenced by a newer producer of the same id
    await open.send({ topic, messages: [{ key: 'o0', value: 'ov0', partition: 0 }] })
    const newer = kafka.producer({ transactionalId: 'kafkajs-etl', maxInFlightRequests: 1, idempotent: true })
    await newer.connect()
    const fenced = await newer.transaction() // InitProducerId bumped the epoch: the open transaction is aborted
    await fenced.abort()
    try {
      await open.send({ topic, messages: [{ key: 'late', value: 'late', partition: 0 }] })
      await open.commit()
      out.fenced = null
    } catch (e) {
      out.fenced = e.type || e.name || String(e)
    }
    await newer.disconnect()
    await producer.disconnect().catch(() => {})
    const rc = await consumeAll('kafkajs-rc', 4)
    await sleep(1500) // nothing more comes for read_committed
    out.read_committed = rc.seen.map((m) => [m.offset, m.key, m.value])
    out.crashed = rc.crashed()
    await rc.consumer.disconnect()
    const ru = await consumeAll('kafkajs-ru', 7, { readUncommitted: true })
    await sleep(1000)
    out.read_uncommitted = ru.seen.map((m) => [m.offset, m.key, m.value])
    await ru.consumer.disconnect()
    const offsets = await admin.fetchOffsets({ groupId: 'kafkajs-etl-group', topics: [source] })
    out.etl_group_offsets = offsets[0].partitions.map((p) => Number(p.offset))
  } else if (scenario === 'reset') {
    // a group whose committed offset is below the log start (records deleted): KafkaJS resets, committing -1/-2
    await admin.setOffsets({ groupId: 'kafkajs-below', topic, partitions: [{ partition: 0, offset: '0' }] })
    const { consumer, seen, crashed } = await consumeAll('kafkajs-below', 2, { fromBeginning: true })
    out.seen = seen.map((m) => [m.offset, m.key, m.value])
    out.crashed = crashed()
    await consumer.disconnect()
    const t0 = Date.now()
    await admin.resetOffsets({ groupId: 'kafkajs-below', topic, earliest: true })
    out.reset_ms = Date.now() - t0
    const committed = await admin.fetchOffsets({ groupId: 'kafkajs-below', topics: [topic] })
    out.committed_after_reset = committed[0].partitions.map((p) => Number(p.offset))
  }
  await admin.disconnect()
  console.log(JSON.stringify(out))
}

main().catch((e) => { console.log(JSON.stringify({ error: String(e), stack: String(e.stack).slice(0, 800) })); process.exit(1) })
