// The GraphQL-over-HTTP conformance audit of graphql-http (serverAudits) against a live server.
//
//   node audit.mjs http://127.0.0.1:8000/graphql [Bearer-key]
//
// Prints one line per audit (status, id, name, and the reason and status code of a failure),
// then a summary line "audit: N ok, N notice, N warn, N error". Exits 1 when any audit is a
// warning or an error: a failed MUST is an error, a failed SHOULD a warning, a failed MAY a
// notice (an option the server chose not to offer).
import { serverAudits } from 'graphql-http';

const [url, key] = process.argv.slice(2);
if (!url) {
  console.error('usage: node audit.mjs URL [KEY]');
  process.exit(2);
}

// The audits send no credentials; a key given here is added to each request, for a server
// that is not in development mode.
const fetchFn = (input, init = {}) => {
  if (!key) return fetch(input, init);
  const headers = new Headers(init.headers);
  headers.set('authorization', `Bearer ${key}`);
  return fetch(input, { ...init, headers });
};

const counts = { ok: 0, notice: 0, warn: 0, error: 0 };
for (const { id, name, fn } of serverAudits({ url, fetchFn })) {
  const result = await fn();
  counts[result.status] += 1;
  if (result.status === 'ok') {
    console.log(`ok     ${id} ${name}`);
    continue;
  }
  const response = result.response;
  const body = await response.text().catch(() => '');
  console.log(`${result.status.padEnd(6)} ${id} ${name}`);
  console.log(`         ${result.reason} (got ${response.status} ${response.headers.get('content-type') ?? '-'}: ${body.slice(0, 200)})`);
}
console.log(`audit: ${counts.ok} ok, ${counts.notice} notice, ${counts.warn} warn, ${counts.error} error`);
process.exit(counts.warn || counts.error ? 1 : 0);
