// The official OpenAI client for Node against a real `offgrid serve` (tiny generated model, loopback port):
// completions and chat, streaming and not, stop strings, n, usage fields, error cases.
// Usage: node openai_client.mjs OFFGRID_BINARY. The `openai` package is installed on first use into
// $OFFGRID_CACHE/npm (else $XDG_CACHE_HOME/offgrid/npm, else ~/.cache/offgrid/npm); without npm or the registry
// the test is skipped (exit 77).
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';

const offgrid = process.argv[2];
if (!offgrid || !existsSync(offgrid)) {
  console.error('usage: node openai_client.mjs OFFGRID_BINARY');
  process.exit(2);
}

const cacheRoot = process.env.OFFGRID_CACHE ||
  join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'offgrid');
const npmDir = join(cacheRoot, 'npm');
if (!existsSync(join(npmDir, 'node_modules', 'openai', 'package.json'))) {
  const r = spawnSync('npm', ['install', '--prefix', npmDir, 'openai@4', '--no-audit', '--no-fund', '--loglevel=error'],
    { stdio: 'inherit', timeout: 180000 });
  if (r.error || r.status !== 0) {
    console.log(`SKIP: could not install the npm package openai into ${npmDir} (npm or the registry unavailable)`);
    process.exit(77);
  }
}
const OpenAI = createRequire(join(npmDir, 'package.json'))('openai');

const work = mkdtempSync(join(tmpdir(), 'offgrid-openai-'));
const model = join(work, 'tiny.gguf');
let server, client, port;

before(async () => {
  const tStart = Date.now();
  const g = spawnSync(offgrid, ['gen-model', '--preset', 'tiny', '-o', model], { encoding: 'utf8' });
  assert.equal(g.status, 0, g.stderr);
  server = spawn(offgrid, ['serve', '-m', model, '--port', '0', '-np', '2', '-t', '1', '--api-key', 'test-key'],
    { stdio: ['ignore', 'ignore', 'pipe'] });
  port = await new Promise((resolve, reject) => {
    let log = '';
    const timer = setTimeout(() => reject(new Error('the server did not start:\n' + log)), 10000);
    server.stderr.on('data', (d) => {
      log += d;
      const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    server.on('exit', (code) => reject(new Error(`the server exited (${code}):\n${log}`)));
  });
  server.stderr.resume();
  console.error('# server start took', Date.now() - tStart, 'ms');
  client = new OpenAI({ apiKey: 'test-key', baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0, timeout: 30000 });
});

after(async () => {
  const tStop = Date.now();
  if (server && server.exitCode === null) {
    const exited = new Promise((resolve) => server.on('exit', (code) => resolve(code)));
    server.kill('SIGTERM');
    let timer;
    const code = await Promise.race([exited, new Promise((r) => { timer = setTimeout(() => r('timeout'), 15000); })]);
    clearTimeout(timer);  // a pending timer would keep node alive
    if (code === 'timeout') server.kill('SIGKILL');
    console.error('# server stop took', Date.now() - tStop, 'ms');
    assert.equal(code, 0, 'the server exits 0 on SIGTERM');
  }
  rmSync(work, { recursive: true, force: true });
});

function checkUsage(u, completionTokens) {
  assert.ok(u.prompt_tokens > 0);
  assert.equal(u.completion_tokens, completionTokens);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
  assert.equal(typeof u.prompt_tokens_details.cached_tokens, 'number');
}

const base = { model: 'tiny', temperature: 0 };

test('completions, plain and streamed, give the same text', async () => {
  const r = await client.completions.create({ ...base, prompt: 'The cabin stands', max_tokens: 10, ignore_eos: true });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].finish_reason, 'length');
  checkUsage(r.usage, 10);
  const stream = await client.completions.create({
    ...base, prompt: 'The cabin stands', max_tokens: 10, ignore_eos: true, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '', usage = null, finish = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) { text += c.text; if (c.finish_reason) finish = c.finish_reason; }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text, r.choices[0].text);
  assert.equal(finish, 'length');
  checkUsage(usage, 10);
  assert.equal(usage.prompt_tokens_details.cached_tokens, usage.prompt_tokens, 'the same prompt again is a cache hit');
});

test('chat completions, plain and streamed', async () => {
  const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Hello!' }];
  const r = await client.chat.completions.create({ ...base, messages, max_tokens: 6 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  const stream = await client.chat.completions.create({
    ...base, messages, max_tokens: 6, stream: true, stream_options: { include_usage: true },
  });
  let text = '', role = null, usage = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    for (const c of chunk.choices) { if (c.delta.role) role = c.delta.role; text += c.delta.content ?? ''; }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(role, 'assistant');
  assert.equal(text, r.choices[0].message.content);
  assert.equal(usage.completion_tokens, r.usage.completion_tokens);
});

test('chat with tools: definitions, a call and its result in the history, a forced call', async () => {
  const tools = [{
    type: 'function',
    function: {
      name: 'lookup', description: 'Looks a word up.',
      parameters: { type: 'object', properties: { word: { type: 'string' } }, required: ['word'] },
    },
  }];
  const messages = [
    { role: 'user', content: 'Define cabin.' },
    { role: 'assistant', content: null, tool_calls: [
      { id: 'call_1', type: 'function', function: { name: 'lookup', arguments: '{"word":"cabin"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: 'a small house' },
  ];
  const r = await client.chat.completions.create({ ...base, messages, tools, max_tokens: 6 });
  const m = r.choices[0].message;
  assert.equal(m.role, 'assistant');
  // The random model writes text (a reply that called a tool would carry tool_calls and finish with tool_calls).
  if (m.tool_calls) assert.equal(r.choices[0].finish_reason, 'tool_calls');
  else assert.equal(typeof m.content, 'string');
  const forced = await client.chat.completions.create({
    ...base, messages, tools, tool_choice: { type: 'function', function: { name: 'lookup' } }, max_tokens: 6,
  });
  assert.ok(forced.usage.prompt_tokens > r.usage.prompt_tokens, 'a forced call opens the reply in the prompt');
  const none = await client.chat.completions.create({ ...base, messages, tools, tool_choice: 'none', max_tokens: 6 });
  assert.ok(none.usage.prompt_tokens < r.usage.prompt_tokens, 'tool_choice none leaves the tools out');
  const stream = await client.chat.completions.create({ ...base, messages, tools, max_tokens: 6, stream: true });
  let text = '';
  for await (const chunk of stream) for (const c of chunk.choices) text += c.delta.content ?? '';
  assert.equal(text, m.content ?? '');
  await assert.rejects(client.chat.completions.create({ ...base, messages, tool_choice: 'required', max_tokens: 2 }),
    (e) => e.status === 400);
});

test('stop strings cut the text and are never emitted', async () => {
  const req = { ...base, prompt: 'The cabin stands at the end of a long gravel road', max_tokens: 24, ignore_eos: true };
  const full = (await client.completions.create(req)).choices[0].text;
  let at = Math.floor(full.length / 2);
  while (at > 0 && !/^[\x20-\x7e]{3}$/.test(full.slice(at, at + 3))) at--;
  assert.match(full.slice(at, at + 3), /^[\x20-\x7e]{3}$/, `no ASCII run in '${full}'`);
  const stop = full.slice(at, at + 3);
  const expected = full.slice(0, full.indexOf(stop));
  const r = await client.completions.create({ ...req, stop: [stop, 'never-there'] });
  assert.equal(r.choices[0].text, expected);
  assert.equal(r.choices[0].finish_reason, 'stop');
  const stream = await client.completions.create({ ...req, stop, stream: true });
  let text = '';
  for await (const chunk of stream) for (const c of chunk.choices) text += c.text;
  assert.equal(text, expected);
});

test('n choices', async () => {
  const r = await client.completions.create({ model: 'tiny', prompt: 'Hi', max_tokens: 3, n: 2, temperature: 1, seed: 3, ignore_eos: true });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  assert.equal(r.usage.completion_tokens, 6);
  const c = await client.chat.completions.create({ ...base, messages: [{ role: 'user', content: 'x' }], max_tokens: 2, n: 3 });
  assert.equal(c.choices.length, 3);
});

test('errors come back as OpenAI errors', async () => {
  await assert.rejects(client.completions.create({ ...base, model: 'no-such-model', prompt: 'x' }), (e) => {
    assert.equal(e.status, 404);
    assert.match(e.message, /does not exist/);
    return true;
  });
  await assert.rejects(client.completions.create({ ...base, prompt: 'x', max_tokens: 1 << 30 }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.code, 'context_length_exceeded');
    return true;
  });
  const wrongKey = new OpenAI({ apiKey: 'nope', baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
  await assert.rejects(wrongKey.models.list(), (e) => e.status === 401);
  const models = await client.models.list();
  assert.equal(models.data[0].id, 'tiny');
});
