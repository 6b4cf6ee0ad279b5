// The official openai npm SDK as a user of moe-server: models list, chat
// completions (plain, streamed, and through the SDK's stream helper), text
// completions (plain and streamed) and the SDK's typed errors. Run by
// tests/client/test_openai_sdk.cpp, which starts the server and sets
//   MOE_BASE_URL       http://127.0.0.1:PORT/v1
//   MOE_API_KEY        the key the server was started with
//   MOE_MODEL_ID       the id the server reports
//   MOE_NODE_MODULES   where scripts/setup_test_tools.sh installed openai
// Exits 0 when every check passes; prints one line per check.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (this script is run by test_openai_sdk.cpp)`);
  return v;
};

const node_modules = env('MOE_NODE_MODULES');
const require = createRequire(path.join(node_modules, 'resolve-from-here.js'));
let OpenAI;
try {
  ({ OpenAI } = require('openai'));
} catch (err) {
  console.error(`cannot load the openai package from ${node_modules}: run scripts/setup_test_tools.sh (${err.message})`);
  process.exit(1);
}

const model = env('MOE_MODEL_ID');
const client = new OpenAI({ baseURL: env('MOE_BASE_URL'), apiKey: env('MOE_API_KEY'), maxRetries: 0, timeout: 120_000 });
const messages = [
  { role: 'system', content: 'You are a helpful assistant.' },
  { role: 'user', content: 'Name three uses of a mixture of experts.' },
];
// Greedy, fixed length, no prefix reuse: the same request gives the same text.
const fixed = { temperature: 0, max_tokens: 8, ignore_eos: true, cache_prompt: false };

const checks = [];
const check = (name, fn) => checks.push({ name, fn });

async function expect_error(promise, type, status) {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof type, `expected ${type.name}, got ${err?.constructor?.name}: ${err?.message}`);
    assert.equal(err.status, status);
    return err;
  }
  assert.fail(`expected ${type.name}, but the call succeeded`);
}

check('models.list returns the served model', async () => {
  const page = await client.models.list();
  assert.equal(page.data.length, 1);
  assert.equal(page.data[0].id, model);
  assert.equal(page.data[0].object, 'model');
  const one = await client.models.retrieve(model);
  assert.equal(one.id, model);
});

let plain_text = null;
check('chat.completions.create, not streamed', async () => {
  const r = await client.chat.completions.create({ model, messages, ...fixed });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.model, model);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 8);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 8);
  plain_text = r.choices[0].message.content;
});

check('chat.completions.create, streamed with usage', async () => {
  const stream = await client.chat.completions.create({
    model, messages, ...fixed, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let role = null;
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      if (choice.delta.role) role = choice.delta.role;
      if (choice.delta.content) text += choice.delta.content;
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  assert.ok(chunks >= 3);
  assert.equal(role, 'assistant');
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 8);
  assert.equal(text, plain_text);
});

check('chat.completions.stream helper assembles the same message', async () => {
  const runner = client.chat.completions.stream({ model, messages, ...fixed });
  let deltas = '';
  runner.on('content', (delta) => { deltas += delta; });
  const final = await runner.finalChatCompletion();
  assert.equal(final.choices[0].message.content, plain_text);
  assert.equal(deltas, plain_text);
});

check('completions.create, plain and streamed', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', ...fixed });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 8);
  const stream = await client.completions.create({ model, prompt: 'Once upon a time', ...fixed, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
  assert.equal(text, r.choices[0].text);
});

check('errors arrive as the SDK\'s typed errors with param and code', async () => {
  const bad = await expect_error(
    client.chat.completions.create({ model, messages, max_tokens: 0 }), OpenAI.BadRequestError, 400);
  assert.equal(bad.param, 'max_tokens');
  assert.equal(bad.type, 'invalid_request_error');
  const n = await expect_error(
    client.chat.completions.create({ model, messages, n: 2 }), OpenAI.BadRequestError, 400);
  assert.equal(n.param, 'n');
  const role = await expect_error(
    client.chat.completions.create({ model, messages: [{ role: 'wizard', content: 'x' }] }), OpenAI.BadRequestError, 400);
  assert.equal(role.param, 'messages[0].role');
  await expect_error(client.models.retrieve('no-such-model'), OpenAI.NotFoundError, 404);
  const wrong_key = new OpenAI({ baseURL: env('MOE_BASE_URL'), apiKey: 'wrong', maxRetries: 0 });
  const auth = await expect_error(wrong_key.models.list(), OpenAI.AuthenticationError, 401);
  assert.equal(auth.code, 'invalid_api_key');
});

let failed = 0;
for (const [i, { name, fn }] of checks.entries()) {
  try {
    await fn();
    console.log(`ok ${i + 1} - ${name}`);
  } catch (err) {
    failed++;
    console.log(`not ok ${i + 1} - ${name}\n  ${String(err?.stack || err).split('\n').join('\n  ')}`);
  }
}
console.log(`${checks.length - failed}/${checks.length} checks passed`);
process.exit(failed ? 1 : 0);
