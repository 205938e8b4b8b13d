// Calls the gateway through the official openai Node SDK, as a client
// that changes nothing would: proxy/sdk_node_test.go starts the gateway in
// front of the simulator, runs this script and checks every record against
// what it prints. One JSON line per case on stdout: the SDK's result (its
// text and usage, or its error) and every attempt it made (the SDK retries
// on its own: 429 and 5xx, twice, unless X-Should-Retry says not to).
//
// Each attempt gets its own X-Request-Id, <case>-<retry count>, so that
// the test knows which records and which engine arrivals to expect. A line
// {"wait": id} asks the test to answer on stdin once the engine has the
// request id: the barrier before an abort that must come before the first
// token.
'use strict';
const OpenAI = require('openai').default;
const readline = require('readline');

const base = process.env.GOODPUT_BASE_URL; // the gateway, with /v1
const model = 'sim-llama';
const messages = [{ role: 'user', content: 'tell me about the simulator' }];

const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
async function waitFor(id) {
  console.log(JSON.stringify({ wait: id }));
  await lines.next();
}

function client(key, attempts, onAttempt) {
  return new OpenAI({
    apiKey: key,
    baseURL: base,
    fetch: async (url, init) => {
      const headers = new Headers(init.headers);
      const id = headers.get('x-request-id') + '-' + headers.get('x-stainless-retry-count');
      headers.set('x-request-id', id);
      const a = { id };
      attempts.push(a);
      try {
        const resp = await fetch(url, { ...init, headers });
        a.status = resp.status;
        a.should_retry = resp.headers.get('x-should-retry');
        a.retry_after_ms = resp.headers.get('retry-after-ms');
        if (onAttempt) onAttempt(a);
        return resp;
      } catch (e) {
        a.error = e.name;
        throw e;
      }
    },
  });
}

async function run(name, key, fn, onAttempt) {
  const attempts = [];
  const out = { case: name, attempts };
  try {
    Object.assign(out, await fn(client(key, attempts, onAttempt), { headers: { 'X-Request-Id': name } }));
  } catch (e) {
    out.error = e.constructor.name;
    out.status = e.status;
  }
  console.log(JSON.stringify(out));
}

async function drain(stream) {
  let text = '';
  let usage;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    text += chunk.choices[0]?.delta?.content ?? '';
  }
  return { text, usage };
}

(async () => {
  const key = process.env.GOODPUT_KEY; // a tenant without limits
  const oneKey = process.env.GOODPUT_ONE_KEY; // one request at a time, tpm 1000

  await run('sdk-stream', key, async (c, opts) =>
    drain(await c.chat.completions.create({ model, messages, max_tokens: 12, stream: true, stream_options: { include_usage: true } }, opts)));

  await run('sdk-chat', key, async (c, opts) => {
    const r = await c.chat.completions.create({ model, messages, max_tokens: 7 }, opts);
    return { text: r.choices[0].message.content, usage: r.usage };
  });

  // Aborted mid-stream, after its third chunk.
  await run('sdk-abort', key, async (c, opts) => {
    const ac = new AbortController();
    const stream = await c.chat.completions.create({ model, messages, max_tokens: 1000, stream: true },
      { ...opts, headers: { ...opts.headers, 'X-Sim-ITL': '20ms' }, signal: ac.signal });
    let n = 0;
    for await (const _ of stream) {
      if (++n === 3) ac.abort();
    }
  });

  // Aborted while the engine prefills: before the first token.
  await run('sdk-abort-first', key, async (c, opts) => {
    const ac = new AbortController();
    const p = c.chat.completions.create({ model, messages, max_tokens: 5, stream: true },
      { ...opts, headers: { ...opts.headers, 'X-Sim-TTFT': '60s' }, signal: ac.signal });
    p.catch(() => {});
    await waitFor('sdk-abort-first-0');
    ac.abort();
    await p;
  });

  // A 429 the SDK retries after the gateway's Retry-After: the one slot is
  // held until the first attempt has its 429, then freed (the holder
  // aborts before its first token).
  const hold = new AbortController();
  const held = run('sdk-hold', oneKey, async (c, opts) => {
    await c.chat.completions.create({ model, messages, max_tokens: 5 },
      { ...opts, headers: { ...opts.headers, 'X-Sim-TTFT': '60s' }, signal: hold.signal });
  });
  await waitFor('sdk-hold-0');
  await run('sdk-retry', oneKey, async (c, opts) => {
    const r = await c.chat.completions.create({ model, messages, max_tokens: 5 }, opts);
    return { text: r.choices[0].message.content, usage: r.usage };
  }, (a) => { if (a.status === 429) hold.abort(); });
  await held;

  // Too large for the tpm: no wait admits it, and the SDK is told so.
  await run('sdk-large', oneKey, async (c, opts) => {
    await c.chat.completions.create({ model, messages, max_tokens: 5000 }, opts);
  });

  // The engine had the request and closed without an answer: a 502 the
  // SDK must not send again.
  await run('sdk-reset', key, async (c, opts) => {
    await c.chat.completions.create({ model, messages, max_tokens: 5 },
      { ...opts, headers: { ...opts.headers, 'X-Sim-Fault': 'reset-after=0' } });
  });
  process.exit(0);
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
