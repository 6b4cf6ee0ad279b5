// The official openai npm SDK as a user of moe-server: models list, chat
// completions (plain, streamed, and through the SDK's stream helper), text
// completions (plain and streamed), the SDK's typed errors, a tool round
// trip and a json_schema reply the SDK parses. Run by
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

// The server's model has a Qwen3-style template (Hermes <tool_call> format):
// a forced call parses on a random-weight model.
const weather_tool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    strict: true,
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', maxLength: 16 }, unit: { enum: ['celsius', 'fahrenheit'] } },
      required: ['city', 'unit'],
      additionalProperties: false,
    },
  },
};
const check_weather_args = (args) => {
  assert.deepEqual(Object.keys(args).sort(), ['city', 'unit']);
  assert.equal(typeof args.city, 'string');
  assert.ok(['celsius', 'fahrenheit'].includes(args.unit));
};

check('a tool round trip: a forced call, its result sent back, a final answer', async () => {
  const ask = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const tool_choice = { type: 'function', function: { name: 'get_weather' } };
  const r = await client.chat.completions.parse({
    model, messages: ask, tools: [weather_tool], tool_choice, max_tokens: 1000, seed: 3, cache_prompt: false,
  });
  const choice = r.choices[0];
  assert.equal(choice.finish_reason, 'tool_calls');
  assert.equal(choice.message.tool_calls.length, 1);
  const call = choice.message.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'get_weather');
  check_weather_args(call.function.parsed_arguments);  // the SDK parsed the JSON string (strict tool)
  // The same call streamed: the SDK's runner assembles delta.tool_calls.
  const runner = client.chat.completions.stream({
    model, messages: ask, tools: [weather_tool], tool_choice, max_tokens: 1000, seed: 3, cache_prompt: false,
  });
  const streamed = await runner.finalChatCompletion();
  assert.equal(streamed.choices[0].finish_reason, 'tool_calls');
  assert.equal(streamed.choices[0].message.tool_calls[0].function.arguments, call.function.arguments);
  // The result goes back; the model answers in text.
  const history = [...ask, { role: 'assistant', content: null, tool_calls: [
    { id: call.id, type: 'function', function: { name: call.function.name, arguments: call.function.arguments } },
  ] }, { role: 'tool', tool_call_id: call.id, content: JSON.stringify({ temperature: 21 }) }];
  const answer = await client.chat.completions.create({
    model, messages: history, tools: [weather_tool], tool_choice: 'none', ...fixed,
  });
  assert.equal(typeof answer.choices[0].message.content, 'string');
  assert.equal(answer.choices[0].message.tool_calls, undefined);
});

check('a json_schema response_format: the SDK parses a reply that validates', async () => {
  const schema = {
    type: 'object',
    properties: {
      name: { type: 'string', maxLength: 20 },
      tags: { type: 'array', items: { enum: ['a', 'b', 'c'] }, maxItems: 3 },
      score: { type: 'integer', minimum: 0, maximum: 100 },
    },
    required: ['name', 'tags', 'score'],
    additionalProperties: false,
  };
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.parse({
      model, messages, max_tokens: 300, seed, temperature: 1,
      response_format: { type: 'json_schema', json_schema: { name: 'item', schema, strict: true } },
    });
    const parsed = r.choices[0].message.parsed;
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.deepEqual(Object.keys(parsed), ['name', 'tags', 'score']);
    assert.equal(typeof parsed.name, 'string');
    assert.ok([...parsed.name].length <= 20);
    assert.ok(Array.isArray(parsed.tags) && parsed.tags.length <= 3);
    for (const t of parsed.tags) assert.ok(['a', 'b', 'c'].includes(t));
    assert.ok(Number.isInteger(parsed.score) && parsed.score >= 0 && parsed.score <= 100);
  }
  const bad = await expect_error(client.chat.completions.create({
    model, messages, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', if: {} } } },
  }), OpenAI.BadRequestError, 400);
  assert.equal(bad.param, 'response_format');
  assert.match(bad.message, /'if'/);
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
