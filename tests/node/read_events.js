// Reads business events as a Node microservice would: kafkajs (a consumer group) and
// @kafkajs/confluent-schema-registry, with Avro's decimal logical type registered (avsc
// leaves it as raw bytes otherwise). Prints one JSON line per event and exits once it
// has read the count asked for.
//
//   node read_events.js <bootstrap> <registry url> <topic> <group> <count> [source prefix]
//
// With a source prefix, only events whose bizevents.source.topic header starts with it
// are printed and counted.
'use strict';

const { Kafka, logLevel } = require('kafkajs');
const { SchemaRegistry, SchemaType } = require('@kafkajs/confluent-schema-registry');
const avro = require('avsc');

// Avro decimal (bytes, two's complement big-endian, scale from the schema) <-> a string
// with exactly `scale` fraction digits: no float ever holds money.
class DecimalType extends avro.types.LogicalType {
  constructor(attrs, opts) {
    super(attrs, opts);
    this.scale = attrs.scale || 0;
  }

  _fromValue(buf) {
    let n = 0n;
    for (const byte of buf) n = (n << 8n) | BigInt(byte);
    if (buf.length > 0 && buf[0] & 0x80) n -= 1n << BigInt(buf.length * 8);
    const negative = n < 0n;
    let digits = (negative ? -n : n).toString().padStart(this.scale + 1, '0');
    if (this.scale > 0) {
      digits = `${digits.slice(0, -this.scale)}.${digits.slice(-this.scale)}`;
    }
    return (negative ? '-' : '') + digits;
  }

  _toValue(text) {
    const [whole, fraction = ''] = String(text).replace('-', '').split('.');
    let n = BigInt(whole + fraction.padEnd(this.scale, '0').slice(0, this.scale));
    if (String(text).startsWith('-')) n = -n;
    const bytes = [];
    let rest = n;
    do {
      bytes.unshift(Number(rest & 0xffn));
      rest >>= 8n;
    } while (!(rest === 0n && (bytes[0] & 0x80) === 0) && !(rest === -1n && (bytes[0] & 0x80) !== 0));
    return Buffer.from(bytes);
  }

  _resolve(type) {
    if (avro.Type.isType(type, 'logical:decimal') && type.scale === this.scale) {
      return this._fromValue.bind(this);
    }
    return undefined;
  }
}

async function main() {
  const [bootstrap, registryUrl, topic, group, countText, prefix] = process.argv.slice(2);
  const count = Number(countText);
  const registry = new SchemaRegistry(
    { host: registryUrl },
    { [SchemaType.AVRO]: { logicalTypes: { decimal: DecimalType } } },
  );
  const kafka = new Kafka({ brokers: bootstrap.split(','), logLevel: logLevel.NOTHING });
  const consumer = kafka.consumer({ groupId: group });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  let seen = 0;
  const finished = new Promise((resolve, reject) => {
    consumer
      .run({
        eachMessage: async ({ partition, message }) => {
          const headers = {};
          for (const [name, value] of Object.entries(message.headers || {})) {
            headers[name] = value === null || value === undefined ? null : value.toString();
          }
          const source = headers['bizevents.source.topic'] || '';
          if (prefix && !source.startsWith(prefix)) return;
          const event = await registry.decode(message.value);
          process.stdout.write(
            `${JSON.stringify({
              partition,
              offset: message.offset,
              key: message.key ? message.key.toString('hex') : null,
              headers,
              event,
            })}\n`,
          );
          seen += 1;
          if (seen >= count) resolve();
        },
      })
      .catch(reject);
  });
  const timer = setTimeout(() => {
    process.stderr.write(`read ${seen} of ${count} events before the time limit\n`);
    process.exit(2);
  }, 90000);
  await finished;
  clearTimeout(timer);
  await consumer.disconnect();
}

main().catch((error) => {
  process.stderr.write(`${error.stack || error}\n`);
  process.exit(1);
});
