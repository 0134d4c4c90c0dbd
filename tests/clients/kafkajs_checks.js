// KafkaJS (an independent Kafka client, pure JavaScript) against `deltalog serve`: prints one JSON line of findings.
// Usage: node kafkajs_checks.js BROKER TOPIC SCENARIO   (SCENARIO: produce-consume | transaction | reset)
const { Kafka, logLevel } = require('kafkajs')

const [broker, topic, scenario] = process.argv.slice(2)
const kafka = new Kafka({ clientId: 'kafkajs-checks', brokers: [broker], logLevel: logLevel.NOTHING, retry: { retries: 3 } })
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

async function consumeAll (groupId, expected, { fromBeginning = true, timeoutMs = 20000 } = {}) {
  // autoCommitInterval: a batch of only a control record is committed by the interval (KafkaJS's runner), not at once
  const consumer = kafka.consumer({ groupId, maxWaitTimeInMs: 500, sessionTimeout: 10000, heartbeatInterval: 1000, autoCommitInterval: 100 })
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
