// The official JavaScript client (@axiomhq/js) and its logging transport (@axiomhq/logging),
// used as a user would, against the local service: run by tests/test_js_client.py with the
// service's URL and token in LOGHANDLER_URL / LOGHANDLER_TOKEN. Prints one JSON line of what it
// read back; throws (exit 1) at the first call that fails or answers other than expected.
import assert from 'node:assert/strict';
import { Axiom, AxiomWithoutBatching } from '@axiomhq/js';
import { Logger, AxiomJSTransport } from '@axiomhq/logging';

const url = process.env.LOGHANDLER_URL;
const token = process.env.LOGHANDLER_TOKEN;
const errors = [];
const options = { url, token, onError: (err) => errors.push(String(err)) };
const client = new AxiomWithoutBatching(options);
const out = {};

// Datasets: create (the service answers 404 to an ingest into a dataset nobody created).
const created = await client.datasets.create({ name: 'js', description: 'from the JS client' });
assert.equal(created.name, 'js');
assert.deepEqual((await client.datasets.list()).map((d) => d.name).sort(), ['js', 'js-logs']);
assert.equal((await client.datasets.get('js')).description, 'from the JS client');
await client.datasets.update('js', { description: 'updated' });

// Ingest (NDJSON, gzip when the runtime compresses) and the status it answers.
const status = await client.ingest('js', [
  { level: 'info', message: 'hello', n: 1, _time: '2026-05-01T12:00:00Z' },
  { level: 'error', message: 'boom', n: 2, _time: '2026-05-01T12:00:01Z' },
]);
assert.equal(status.ingested, 2);
assert.equal(status.failed, 0);

// The batching client: events queued, then flushed.
const batching = new Axiom(options);
batching.ingest('js', [{ level: 'info', message: 'batched', n: 3, _time: '2026-05-01T12:00:02Z' }]);
await batching.flush();

// APL in the tabular format (the client's default), and its events() helper.
const range = { startTime: '2026-05-01T00:00:00Z', endTime: '2026-05-02T00:00:00Z' };
const tabular = await client.query("['js'] | summarize count() by level | sort by level asc", range);
out.counts = [...tabular.tables[0].events()].map((row) => [row.level, row.count_]);
const legacyApl = await client.query("['js'] | where n >= 2", { ...range, format: 'legacy' });
out.aplMatches = legacyApl.matches.length;

// The legacy query.
const legacy = await client.queryLegacy('js', {
  ...range, resolution: 'auto',
  aggregations: [{ op: 'count', field: '*', alias: 'events' }], groupBy: ['level'],
});
out.legacyTotals = legacy.buckets.totals
  .map((t) => [t.group.level, t.aggregations[0].op, t.aggregations[0].value])
  .sort();

// Fields and map fields.
out.fields = (await client.datasets.fields('js')).map((f) => `${f.name}:${f.type}`).sort();
out.mapFields = await client.datasets.mapFields('js');

// Monitors: create, list, get, update, delete.
const monitor = await client.monitors.create({
  name: 'errors', type: 'Threshold', aplQuery: "['js'] | where level == 'error' | count",
  operator: 'Above', threshold: 0, intervalMinutes: 5, rangeMinutes: 5, notifierIds: [],
});
assert.ok(monitor.id);
assert.deepEqual(await client.monitors.get(monitor.id), monitor);
assert.equal((await client.monitors.list()).length, 1);
const updated = await client.monitors.update(monitor.id, { ...monitor, threshold: 3 });
assert.equal(updated.threshold, 3);
await client.monitors.delete(monitor.id);
out.monitorsLeft = (await client.monitors.list()).length;

// Annotations.
const note = await client.annotations.create({ type: 'deploy', datasets: ['js'], title: 'v1' });
out.annotations = (await client.annotations.list({ datasets: ['js'] })).map((a) => a.title);
await client.annotations.delete(note.id);

// Saved (starred) queries and dashboards: the client reads them (made through the API).
const headers = { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' };
const saved = await (await fetch(`${url}/v2/apl-starred-queries`, {
  method: 'POST', headers,
  body: JSON.stringify({ kind: 'apl', name: 'errors', dataset: 'js', metadata: {},
                         query: { apl: "['js'] | where level == 'error'" } }),
})).json();
assert.equal((await client.savedQueries.get(saved.id)).name, 'errors');
out.savedQueries = (await client.savedQueries.list()).map((q) => q.name);
await fetch(`${url}/v2/dashboards`, {
  method: 'POST', headers,
  body: JSON.stringify({ uid: 'js-dash', dashboard: {
    name: 'JS', owner: 'local', charts: [], layout: [], refreshTime: 60, schemaVersion: 2,
    timeWindowStart: 'qr-now-1h', timeWindowEnd: 'qr-now' } }),
});
out.dashboard = (await client.dashboards.get('js-dash')).dashboard.name;
out.dashboards = (await client.dashboards.list()).map((d) => d.uid);

// The current user.
out.user = (await client.users.current()).id;

// The logging package's transport over the batching client, as an application logs.
const logger = new Logger({
  transports: [new AxiomJSTransport({ axiom: new Axiom(options), dataset: 'js-logs' })],
});
logger.info('user signed in', { user_id: 7 });
logger.error('payment failed', { order: 'A-1' });
await logger.flush();

// Trim, then delete.
await client.datasets.trim('js', '1h');
out.errors = errors;
console.log(JSON.stringify(out));
