// Browser tests of the chat UI (ctest label "web"): headless Debian chromium,
// driven by playwright-core, against a real `moe-server serve` on a tiny
// synthetic model (random weights, so replies are gibberish). Registered by
// tests/web.cmake, which passes:
//   MOE_SERVER         the moe-server binary
//   MOE_WEB_MODEL      a model folder made by `moe-server synth-model --preset tiny`
//   MOE_WEB_ARTIFACTS  folder for screenshots (kept after the run)
//   NODE_PATH          the npm prefix that holds playwright-core
//   CHROMIUM           optional, default /usr/bin/chromium
// Exits 77 (ctest: skipped) when playwright-core or chromium is missing.
// The "tools" group serves a copy of MOE_WEB_MODEL whose chat template is
// Qwen3's (../shared/data/chat_templates/Qwen-Qwen3-0.6B.jinja, the Hermes
// <tool_call> format).
// Usage: node tests/web/ui.test.mjs [GROUP...]   (groups: chat stop experts experts-cpu errors tools; none: all)
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const SKIP = 77;
const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const SERVER = process.env.MOE_SERVER;
const MODEL = process.env.MOE_WEB_MODEL;
const ARTIFACTS = process.env.MOE_WEB_ARTIFACTS || path.join(os.tmpdir(), 'moe-web-artifacts');
const READY_TIMEOUT_MS = 120_000;
const REPLY_TIMEOUT_MS = 120_000;

// createRequire: ES module imports ignore NODE_PATH, require() honours it.
const require = createRequire(import.meta.url);
let chromium;
try {
  ({ chromium } = require('playwright-core'));
} catch {
  console.log(`SKIP: playwright-core not found (NODE_PATH=${process.env.NODE_PATH ?? ''}); run scripts/setup_test_tools.sh`);
  process.exit(SKIP);
}
if (!existsSync(CHROMIUM)) {
  console.log(`SKIP: ${CHROMIUM} not found; run scripts/setup_test_tools.sh (installs Debian's chromium)`);
  process.exit(SKIP);
}
if (!SERVER || !MODEL) {
  console.error('MOE_SERVER and MOE_WEB_MODEL must be set (tests/web.cmake does this)');
  process.exit(1);
}
mkdirSync(ARTIFACTS, { recursive: true });

const GROUPS = ['chat', 'stop', 'experts', 'experts-cpu', 'errors', 'tools'];
const selected = process.argv.slice(2);
for (const g of selected) {
  if (!GROUPS.includes(g)) {
    console.error(`unknown group ${g}; groups: ${GROUPS.join(' ')}`);
    process.exit(1);
  }
}
// Each group is a suite with its own server and browser; unselected groups
// are not registered at all, so they start nothing.
function group(name, fn) {
  if (selected.length === 0 || selected.includes(name)) describe(name, fn);
}

// ---- helpers ------------------------------------------------------------------

function free_port() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.unref();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Starts `moe-server serve` from the repository root (so a server that served
// files from the working directory would be caught) and waits for /health 200.
async function start_server(extra_args = [], model = MODEL) {
  const port = await free_port();
  const args = ['serve', '--model', model, '--port', String(port), ...extra_args];
  const proc = spawn(SERVER, args, { cwd: REPO, stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  proc.stdout.on('data', (d) => (log += d));
  proc.stderr.on('data', (d) => (log += d));
  const exited = new Promise((r) => proc.on('exit', (code, signal) => r({ code, signal })));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (proc.exitCode !== null || proc.signalCode !== null) {
      throw new Error(`moe-server ${args.join(' ')} exited early (${proc.exitCode ?? proc.signalCode}):\n${log}`);
    }
    try {
      const res = await fetch(`${url}/health`);
      if (res.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      proc.kill('SIGKILL');
      throw new Error(`moe-server not healthy after ${READY_TIMEOUT_MS} ms:\n${log}`);
    }
    await sleep(200);
  }
  return {
    url,
    proc,
    log: () => log,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill('SIGTERM');
        const timer = setTimeout(() => proc.kill('SIGKILL'), 10_000);
        await exited;
        clearTimeout(timer);
      }
    },
  };
}

async function launch_browser() {
  // A fresh profile per run; the flags keep chromium from phoning home (its
  // background connections are refused here and would only add noise).
  const profile = mkdtempSync(path.join(os.tmpdir(), 'moe-web-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1280, height: 860 },
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

// Opens the UI on a fresh origin-scoped storage and records what the page
// does: console errors, uncaught exceptions and every request it makes.
async function open_ui(context, server, ready_state = 'ok') {
  const page = await context.newPage();
  const problems = [];
  const requests = [];
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(`console: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  page.on('request', (r) => requests.push(r.url()));
  await page.goto(`${server.url}/`);
  await page.evaluate(() => localStorage.clear());
  await page.reload();
  await page.locator(`#status[data-state="${ready_state}"]`).waitFor({ timeout: READY_TIMEOUT_MS });
  return { page, problems, requests };
}

async function set_settings(page, values) {
  await page.getByRole('button', { name: 'Settings', exact: true }).click();
  const dialog = page.getByRole('dialog', { name: 'Settings' });
  await dialog.waitFor();
  for (const [label, value] of Object.entries(values)) await dialog.getByLabel(label, { exact: true }).fill(String(value));
  await dialog.getByRole('button', { name: 'Save', exact: true }).click();
  await dialog.waitFor({ state: 'hidden' });
}

async function send(page, text) {
  await page.getByLabel('Message', { exact: true }).fill(text);
  await page.keyboard.press('Enter');
}

const assistant_messages = (page) => page.locator('#messages article.msg.assistant:not(.error)');

// Waits until no reply is streaming (the Send button is back).
async function wait_idle(page, timeout = REPLY_TIMEOUT_MS) {
  await page.locator('#send').waitFor({ state: 'visible', timeout });
  await page.locator('#messages article.streaming').waitFor({ state: 'detached', timeout });
}

function assert_clean(problems) {
  assert.deepEqual(problems, [], 'the page logged errors');
}

// One server and one browser for a suite's tests; `model` is a function
// giving the model folder (called when the suite starts).
function use_server_and_browser(server_args = [], model = () => MODEL) {
  const fixture = {};
  before(async () => {
    fixture.server = await start_server(server_args, model());
    fixture.browser = await launch_browser();
  });
  after(async () => {
    await fixture.browser?.close();
    await fixture.server?.stop();
  });
  return fixture;
}

// ---- tests --------------------------------------------------------------------

group('chat', () => {
  const f = use_server_and_browser();

  test('the page loads from the embedded bundle and only talks to the API', async () => {
    const { page, problems, requests } = await open_ui(f.browser.context, f.server);
    assert.equal(await page.title(), 'moe-server');
    assert.notEqual((await page.locator('#model-name').textContent()).trim(), '');
    assert.equal(await page.locator('#banner').isVisible(), false);

    const input = page.getByLabel('Message', { exact: true });
    const send_button = page.getByRole('button', { name: 'Send', exact: true });
    assert.equal(await send_button.isDisabled(), true, 'Send is disabled on empty input');
    await input.fill('   \n ');
    assert.equal(await send_button.isDisabled(), true, 'Send is disabled on blank input');
    await input.fill('hi');
    assert.equal(await send_button.isDisabled(), false);

    const allowed = new Set(['/', '/health', '/v1/models']);
    for (const u of requests) {
      const url = new URL(u);
      assert.equal(url.origin, f.server.url, `request to another origin: ${u}`);
      assert.ok(allowed.has(url.pathname), `unexpected request ${u}`);
    }
    // The page is the committed bundle, embedded into the binary.
    const served = await (await fetch(`${f.server.url}/`)).text();
    assert.equal(served, readFileSync(path.join(REPO, 'web', 'dist', 'index.html'), 'utf8'), 'GET / serves web/dist/index.html');
    // Static files come only from the embedded bundle, never from the disk
    // (the server runs in the repository root).
    for (const p of ['/CMakeLists.txt', '/web/src/main.js', '/../CMakeLists.txt', '/%2e%2e/CMakeLists.txt', '/web/dist/index.html']) {
      const res = await fetch(f.server.url + p);
      const body = await res.text();
      assert.ok(!body.includes('cmake_minimum_required') && !body.includes('new App().start()'), `${p} served a file from disk`);
    }
    assert_clean(problems);
    await page.close();
  });

  test('a message streams a reply rendered with its statistics', async () => {
    const { page, problems } = await open_ui(f.browser.context, f.server);
    // Long enough that even a fast machine needs several screen updates.
    await set_settings(page, { 'Max tokens': 160, Temperature: 0.8, Seed: 7 });

    // Shift+Enter is a newline, Enter sends.
    const input = page.getByLabel('Message', { exact: true });
    await input.fill('Hello there,');
    await input.press('Shift+Enter');
    await input.pressSequentially('who are you?');
    assert.equal(await input.inputValue(), 'Hello there,\nwho are you?');

    // Count how often the reply's body is re-rendered while it streams.
    await page.evaluate(() => {
      window.__renders = 0;
      new MutationObserver((records) => {
        for (const r of records) if (r.target.closest?.('article.streaming .msg-body')) window.__renders++;
      }).observe(document.getElementById('messages'), { childList: true, subtree: true });
    });
    await input.press('Enter');
    assert.equal(await input.inputValue(), '', 'the input is cleared after sending');
    await page.getByRole('button', { name: 'Stop', exact: true }).waitFor();
    await wait_idle(page);

    const user = page.locator('#messages article.msg.user .msg-body');
    assert.equal(await user.textContent(), 'Hello there,\nwho are you?');
    const reply = assistant_messages(page).last();
    const text = (await reply.locator('.msg-body').innerText()).trim();
    assert.ok(text.length > 0, 'the reply has text');
    const renders = await page.evaluate(() => window.__renders);
    assert.ok(renders >= 2, `the reply was rendered piece by piece while streaming (${renders} updates)`);
    const stats = await reply.locator('.msg-meta .stats').textContent();
    assert.match(stats, /^\d+ tokens · TTFT [\d.]+ m?s · [\d.]+ tok\/s$/, `stats line: ${stats}`);
    const tokens = Number(stats.match(/^(\d+)/)[1]);
    assert.ok(tokens >= 1 && tokens <= 160, `token count ${tokens} within max tokens`);

    // A second turn in the same conversation.
    await send(page, 'Tell me more.');
    await wait_idle(page);
    assert.equal(await assistant_messages(page).count(), 2);
    await page.screenshot({ path: path.join(ARTIFACTS, 'chat-exchange.png') });

    // The conversation survives a reload and is listed in the sidebar.
    await page.reload();
    const item = page.locator('#conv-list .conv-open');
    assert.equal(await item.count(), 1);
    assert.equal(await item.textContent(), 'Hello there, who are you?');
    assert.equal(await page.locator('#messages article.msg').count(), 4);
    await page.getByRole('button', { name: 'Settings', exact: true }).click();
    assert.equal(await page.getByLabel('Max tokens').inputValue(), '160', 'settings persisted');
    assert.equal(
      await page.locator('#set-template').textContent(),
      'Chat template: mistral (built-in; jinja (tokenizer_config.json) for tools)',
      "the model's template family is shown",
    );
    await page.getByRole('button', { name: 'Cancel', exact: true }).click();
    assert_clean(problems);
    await page.close();
  });

  test('regenerate, edit and resend, new chat and delete', async () => {
    const { page, problems } = await open_ui(f.browser.context, f.server);
    await set_settings(page, { 'Max tokens': 24 });
    await send(page, 'First question');
    await wait_idle(page);
    await send(page, 'Second question');
    await wait_idle(page);
    assert.equal(await page.locator('#messages article.msg').count(), 4);

    // Regenerate replaces the last reply.
    await page.getByRole('button', { name: 'Regenerate this reply' }).click();
    await wait_idle(page);
    assert.equal(await page.locator('#messages article.msg').count(), 4);
    assert.match(await assistant_messages(page).last().locator('.stats').textContent(), /tokens/);

    // Editing the first message drops everything after it and asks again.
    await page.getByRole('button', { name: 'Edit and resend this message' }).first().click();
    const editor = page.getByLabel('Edit message');
    await editor.fill('An edited first question');
    await page.locator('.edit-form').getByRole('button', { name: 'Send', exact: true }).click();
    await wait_idle(page);
    const msgs = page.locator('#messages article.msg');
    assert.equal(await msgs.count(), 2);
    assert.equal(await msgs.first().locator('.msg-body').textContent(), 'An edited first question');
    assert.equal(await page.locator('#conv-list .conv-open').first().textContent(), 'An edited first question');

    // New chat starts empty; the old one stays listed and can be deleted.
    await page.getByRole('button', { name: '+ New chat' }).click();
    assert.equal(await page.locator('#messages article.msg').count(), 0);
    assert.equal(await page.locator('#welcome').isVisible(), true);
    await send(page, 'Another chat');
    await wait_idle(page);
    assert.equal(await page.locator('#conv-list li').count(), 2);
    await page.locator('#conv-list .conv-open', { hasText: 'An edited first question' }).click();
    assert.equal(await page.locator('#messages article.msg.user .msg-body').first().textContent(), 'An edited first question');
    page.once('dialog', (d) => d.accept());
    await page.getByRole('button', { name: 'Delete conversation: An edited first question' }).click();
    assert.equal(await page.locator('#conv-list li').count(), 1);
    assert.equal(await page.locator('#welcome').isVisible(), true);
    assert_clean(problems);
    await page.close();
  });

  test('Markdown is rendered, highlighted and sanitised; model HTML stays text', async () => {
    const { page, problems } = await open_ui(f.browser.context, f.server);
    // This one reply is scripted (the tiny model only writes gibberish); the
    // page is still the real one served by moe-server.
    const pieces = [
      '# Title\n\nSome **bold** text and `code`.\n\n',
      '```python\ndef f(x):\n    return x * 2\n```\n\n',
      '<img src=x onerror="window.__xss=1"> <script>window.__xss=2</script> ',
      '[click](javascript:window.__xss=3) <b>raw</b>',
    ];
    const chunk = (delta, finish = null) =>
      `data: ${JSON.stringify({ id: 'x', object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    const body =
      chunk({ role: 'assistant' }) +
      pieces.map((p) => chunk({ content: p })).join('') +
      chunk({}, 'stop') +
      `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 40, total_tokens: 45 } })}\n\n` +
      'data: [DONE]\n\n';
    await page.route('**/v1/chat/completions', (route) =>
      route.fulfill({ status: 200, headers: { 'Content-Type': 'text/event-stream' }, body }),
    );
    await send(page, 'markdown please');
    await wait_idle(page);
    const reply = assistant_messages(page).last().locator('.msg-body');
    assert.equal(await reply.locator('h1').textContent(), 'Title');
    assert.equal(await reply.locator('strong').first().textContent(), 'bold');
    assert.ok((await reply.locator('pre code.language-python .hljs-keyword').count()) > 0, 'code is highlighted');
    assert.equal(await reply.locator('img, script, b').count(), 0, 'no HTML from the model is interpreted');
    const text = await reply.textContent();
    assert.ok(text.includes('<img src=x onerror="window.__xss=1">'), 'model HTML is shown as text');
    assert.ok(text.includes('<b>raw</b>'));
    const href = await reply.locator('a', { hasText: 'click' }).getAttribute('href');
    assert.ok(!href || !href.startsWith('javascript:'), `link href ${href}`);
    assert.equal(await page.evaluate(() => window.__xss), undefined);
    assert.match(await assistant_messages(page).last().locator('.stats').textContent(), /^40 tokens · TTFT/);
    await page.unroute('**/v1/chat/completions');
    assert_clean(problems);
    await page.close();
  });

  test('loading state while /health answers 503', async () => {
    const { page, problems } = await open_ui(f.browser.context, f.server);
    // Model loading takes milliseconds for the tiny model, so hold /health at 503.
    await page.route('**/health', (route) =>
      route.fulfill({ status: 503, contentType: 'application/json', body: '{"error":{"message":"Loading model","type":"unavailable_error"}}' }),
    );
    await page.reload();
    await page.locator('#status[data-state="loading"]').waitFor();
    assert.match(await page.locator('#banner').textContent(), /loading the model/);
    await page.getByLabel('Message', { exact: true }).fill('hello');
    assert.equal(await page.getByRole('button', { name: 'Send', exact: true }).isDisabled(), true);
    await page.unroute('**/health');
    await page.locator('#status[data-state="ok"]').waitFor({ timeout: 10_000 });
    assert.equal(await page.getByRole('button', { name: 'Send', exact: true }).isDisabled(), false);
    assert.equal(await page.locator('#banner').isVisible(), false);
    // The 503 responses themselves are logged by chromium; nothing else may be.
    assert_clean(problems.filter((p) => !/503/.test(p)));
    await page.close();
  });

  test('usable on a narrow window', async () => {
    const { page, problems } = await open_ui(f.browser.context, f.server);
    await page.setViewportSize({ width: 380, height: 720 });
    const input = page.getByLabel('Message', { exact: true });
    const box = await input.boundingBox();
    assert.ok(box && box.x >= 0 && box.x + box.width <= 380 && box.y + box.height <= 720, 'the input is on screen');
    const sidebar = page.getByRole('complementary', { name: 'Conversations' });
    assert.equal(await sidebar.isVisible(), false, 'the sidebar is folded away');
    await page.getByRole('button', { name: 'Show conversations' }).click();
    await page.getByRole('button', { name: '+ New chat' }).waitFor({ state: 'visible' });
    await page.keyboard.press('Escape');
    await sidebar.waitFor({ state: 'hidden' });
    await set_settings(page, { 'Max tokens': 8 });
    await send(page, 'Hi from a phone');
    await wait_idle(page);
    const width = await page.evaluate(() => document.documentElement.scrollWidth);
    assert.ok(width <= 380, `no horizontal scrolling (scrollWidth ${width})`);
    await page.screenshot({ path: path.join(ARTIFACTS, 'narrow.png') });
    assert_clean(problems);
    await page.close();
  });
});

group('stop', () => {
  const f = use_server_and_browser();
  test('Stop halts a long generation and the server accepts the next request', async () => {
    const { page, problems } = await open_ui(f.browser.context, f.server);
    // As long a reply as the server allows: the whole context.
    const models = await (await fetch(`${f.server.url}/v1/models`)).json();
    const n_ctx = models.data?.[0]?.meta?.n_ctx ?? 4096;
    await set_settings(page, { 'Max tokens': n_ctx - 64 });
    await send(page, 'Write a very long story.');
    const reply = assistant_messages(page).last();
    // Stop as soon as the first words are on screen (or fail on an error row).
    await page.waitForFunction(
      () =>
        document.querySelector('#messages .msg-error') ||
        document.querySelector('#messages article.streaming .msg-body')?.textContent.trim().length > 0,
      null,
      { timeout: REPLY_TIMEOUT_MS, polling: 10 },
    );
    assert.equal(await page.locator('#messages .msg-error').count(), 0, 'the long request was accepted');
    await page.getByRole('button', { name: 'Stop', exact: true }).click();
    await wait_idle(page, 10_000);
    assert.equal(await reply.locator('.badge.finish-stopped').textContent(), 'stopped');
    const stopped_text = await reply.locator('.msg-body').textContent();
    await sleep(1000);
    assert.equal(await reply.locator('.msg-body').textContent(), stopped_text, 'nothing arrives after Stop');

    // The server cancelled the generation: nothing running, no more tokens.
    const metric = async (name) => {
      const text = await (await fetch(`${f.server.url}/metrics`)).text();
      const m = text.match(new RegExp(`^${name} (\\S+)$`, 'm'));
      return m ? Number(m[1]) : NaN;
    };
    const deadline = Date.now() + 10_000;
    while ((await metric('moe_requests_running')) !== 0) {
      assert.ok(Date.now() < deadline, 'the server still runs the stopped generation');
      await sleep(100);
    }
    const generated = await metric('moe_generated_tokens_total');
    await sleep(500);
    assert.equal(await metric('moe_generated_tokens_total'), generated, 'the server stopped generating');
    assert.ok(generated < n_ctx - 64, `the server generated ${generated} tokens, not the whole reply`);

    // The engine is free again: a short request completes normally.
    await set_settings(page, { 'Max tokens': 8 });
    const t0 = Date.now();
    await send(page, 'Short answer please.');
    await wait_idle(page, 60_000);
    const last = assistant_messages(page).last();
    assert.equal(await last.locator('.badge.finish-stopped').count(), 0);
    assert.match(await last.locator('.stats').textContent(), /tokens/);
    assert.ok(Date.now() - t0 < 60_000);
    assert_clean(problems);
    await page.close();
  });
});

group('experts', () => {
  // An emulated device (a test double) holds half the experts, some of them
  // in LRU cache slots with prefetch, so the panel has resident experts, a
  // GPU/CPU share, the cache and per-layer times to show.
  const f = use_server_and_browser(['--emulate-gpu', '50%', '--cache-policy', 'lru', '--prefetch', 'on']);
  test('the experts panel shows routing counts after a reply', async () => {
    const { page, problems } = await open_ui(f.browser.context, f.server);
    await set_settings(page, { 'Max tokens': 16 });
    await send(page, 'Which experts do you use?');
    await wait_idle(page);
    await page.getByRole('button', { name: 'Experts', exact: true }).click();
    const panel = page.getByRole('complementary', { name: 'Experts' });
    await panel.waitFor();
    await panel.locator('.heatmap .cell').first().waitFor();

    const info = await (await fetch(`${f.server.url}/v1/experts`)).json();
    const cells = panel.locator('.heatmap .cell');
    assert.equal(await cells.count(), info.layers * info.experts);
    const counts = async () => (await cells.evaluateAll((els) => els.map((e) => Number(e.dataset.count))));
    const total = await counts();
    assert.ok(total.some((c) => c > 0), 'some expert has a non-zero count since start');
    assert.equal(total.reduce((a, b) => a + b, 0), info.counts_total.flat().reduce((a, b) => a + b, 0));

    await panel.getByLabel('Last reply').check();
    const last = await counts();
    assert.ok(last.some((c) => c > 0), 'some expert has a non-zero count in the last reply');
    assert.ok(last.every((c, i) => c <= total[i]));

    const share = await panel.locator('#share-text').textContent();
    if (info.device === 'none') {
      assert.match(share, /all on CPU/);
      assert.equal(await panel.locator('.heatmap .cell.resident').count(), 0);
    } else {
      assert.match(share, /GPU \d+(\.\d)?%, CPU \d+(\.\d)?%/);
      assert.equal(await panel.locator('.heatmap .cell.resident').count(), info.resident.flat().filter(Boolean).length);
      assert.equal(await panel.locator('.heatmap .cell.cached').count(), info.cached.flat().filter(Boolean).length);
      assert.equal(info.placement.cache_policy, 'lru');
      assert.ok(info.placement.cache_slots > 0);
      assert.match(share, new RegExp(`\\(\\d+ in ${info.placement.cache_slots} cache slots?, lru, prefetch on\\)`));
      assert.match(share, /Cache: \d+ hits?, \d+ evictions?/);
      assert.equal(await panel.locator('.legend-cached').isVisible(), true);
    }
    // Per-layer predicted vs measured time: one row per layer, the
    // measured CPU times of the last reply as /v1/experts gives them
    // (a CPU-only server times nothing and hides the table: see the next test).
    const times = panel.locator('#layer-times');
    await times.locator('summary').click();
    const rows = times.locator('tbody tr');
    assert.equal(await rows.count(), info.layers);
    const shown = await times
      .locator('td[data-key="measured_cpu_ms"]')
      .evaluateAll((els) => els.map((e) => Number.parseFloat(e.textContent)));
    const fresh = await (await fetch(`${f.server.url}/v1/experts`)).json();
    fresh.execution_last.per_layer.measured_cpu_ms.forEach((v, l) => assert.ok(Math.abs(shown[l] - v) <= 0.051));
    assert.ok(shown.some((v) => v > 0), 'the emulated device\'s layers were timed');
    await page.screenshot({ path: path.join(ARTIFACTS, 'experts-panel.png') });
    assert_clean(problems);
    await page.close();
  });

  // The dynamic cache (--cache-policy, --prefetch): experts in a cache slot
  // are marked apart from pinned ones, a legend entry names them, and the
  // share text gives the cache's slots, policy, hits, evictions and
  // prefetch accuracy of the chosen scope. The page is served /v1/experts
  // JSON, so the cached set is known whatever the router picked.
  const L = 2, E = 8;
  const counts = Array.from({ length: L }, (_, l) => Array.from({ length: E }, (_, e) => l + e + 1));
  const pinned = (l, e) => e < 2;
  const in_cache = (l, e) => (l === 0 && (e === 4 || e === 5)) || (l === 1 && e === 7);
  const cache_body = (extra = {}) => ({
    layers: L, experts: E, top_k: 2, device: 'emulated', counts_total: counts, counts_last: counts,
    resident: Array.from({ length: L }, (_, l) => Array.from({ length: E }, (_, e) => pinned(l, e) || in_cache(l, e))),
    cached: Array.from({ length: L }, (_, l) => Array.from({ length: E }, (_, e) => in_cache(l, e))),
    work_share: { gpu: 0.5, cpu: 0.5 }, hit_rate: 0.5,
    placement: { plan: 'even', capacity: 8, cache_policy: 'lru', cache_slots: 4, prefetch: true },
    execution_total: { cache_hits: 12, cache_evictions: 3, cache_fills: 5, prefetch_copies: 8, prefetch_useful: 5 },
    execution_last: { cache_hits: 2, cache_evictions: 1, cache_fills: 1, prefetch_copies: 4, prefetch_useful: 1 },
    ...extra,
  });
  async function open_stubbed(body) {
    const { page, problems } = await open_ui(f.browser.context, f.server);
    await page.route('**/v1/experts', (route) => route.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify(body) }));
    await page.getByRole('button', { name: 'Experts', exact: true }).click();
    const panel = page.getByRole('complementary', { name: 'Experts' });
    await panel.locator('.heatmap .cell').first().waitFor();
    return { page, problems, panel };
  }
  const border_style = (locator) => locator.evaluate((e) => getComputedStyle(e).borderTopStyle);

  test('experts in a cache slot are marked apart from pinned ones', async () => {
    const { page, problems, panel } = await open_stubbed(cache_body());
    const cached = panel.locator('.heatmap .cell.cached');
    assert.equal(await cached.count(), 3);
    assert.deepEqual(
      await cached.evaluateAll((els) => els.map((e) => `${e.dataset.layer}:${e.dataset.expert}`)),
      ['0:4', '0:5', '1:7'],
    );
    // Resident = pinned + cached; a pinned cell is solid, a cached one dashed.
    assert.equal(await panel.locator('.heatmap .cell.resident').count(), 2 * 2 + 3);
    const pinned_cell = panel.locator('.heatmap .cell[data-layer="0"][data-expert="0"]');
    const cached_cell = panel.locator('.heatmap .cell[data-layer="0"][data-expert="4"]');
    assert.equal(await border_style(pinned_cell), 'solid');
    assert.equal(await border_style(cached_cell), 'dashed');
    const colour = (loc) => loc.evaluate((e) => getComputedStyle(e).borderTopColor);
    assert.notEqual(await colour(cached_cell), await colour(pinned_cell));
    assert.match(await pinned_cell.getAttribute('title'), /^layer 0, expert 0: 1 tokens \(pinned on GPU\)$/);
    assert.match(await cached_cell.getAttribute('title'), /^layer 0, expert 4: 5 tokens \(in a cache slot\)$/);
    assert.match(await panel.locator('.heatmap .cell[data-layer="0"][data-expert="3"]').getAttribute('title'), /tokens$/);
    // The legend names both kinds.
    assert.equal(await panel.locator('.legend-cached').isVisible(), true);
    assert.match(await panel.locator('.legend-cached').textContent(), /cache slot/);
    assert.match(await panel.locator('.legend-resident').textContent(), /pinned on GPU/);
    // The share text: the cache, then the counts since start, then of the last reply.
    const share = panel.locator('#share-text');
    assert.match(await share.textContent(), /7 of 16 experts resident \(3 in 4 cache slots, lru, prefetch on\)\./);
    assert.match(await share.textContent(), /Cache: 12 hits, 3 evictions; prefetch 5 of 8 useful \(63%\)\./);
    await panel.getByLabel('Last reply').check();
    assert.match(await share.textContent(), /Cache: 2 hits, 1 eviction; prefetch 1 of 4 useful \(25%\)\./);
    await page.screenshot({ path: path.join(ARTIFACTS, 'experts-panel-cache.png') });
    assert_clean(problems);
    await page.close();
  });

  test('the cache is marked in the wide heat map too', async () => {
    const WL = 4, WE = 64;
    const wide_cached = (l, e) => e % 16 === 3;
    const body = {
      layers: WL, experts: WE, top_k: 8, device: 'emulated',
      counts_total: Array.from({ length: WL }, () => Array.from({ length: WE }, (_, e) => e)),
      resident: Array.from({ length: WL }, (_, l) => Array.from({ length: WE }, (_, e) => e < 8 || wide_cached(l, e))),
      cached: Array.from({ length: WL }, (_, l) => Array.from({ length: WE }, (_, e) => wide_cached(l, e))),
      work_share: { gpu: 0.3, cpu: 0.7 },
      placement: { cache_policy: 'score', cache_slots: 16, prefetch: false },
      execution_total: { cache_hits: 0, cache_evictions: 0, prefetch_copies: 0, prefetch_useful: 0 },
    };
    const { page, problems, panel } = await open_stubbed(body);
    assert.equal(await panel.locator('.heatmap.dense').count(), 1);
    assert.equal(await panel.locator('.heatmap .cell.cached').count(), WL * 4);
    const shadow = (loc) => loc.evaluate((e) => getComputedStyle(e).boxShadow);
    const pinned_stripe = await shadow(panel.locator('.heatmap .cell.resident:not(.cached)').first());
    const cached_stripe = await shadow(panel.locator('.heatmap .cell.cached').first());
    assert.notEqual(cached_stripe, 'none');
    assert.notEqual(cached_stripe, pinned_stripe);
    assert.equal(await panel.locator('.legend-cached').isVisible(), true);
    const text = await panel.locator('#share-text').textContent();
    assert.match(text, /\(16 in 16 cache slots, score, prefetch off\)/);
    assert.match(text, /Cache: 0 hits, 0 evictions\.$/);  // no prefetch copies: no accuracy
    assert_clean(problems);
    await page.close();
  });

  test('an older server without cache fields renders as before', async () => {
    const body = cache_body();
    delete body.cached;
    delete body.placement;
    body.execution_total = {};
    body.execution_last = {};
    const { page, problems, panel } = await open_stubbed(body);
    assert.equal(await panel.locator('.heatmap .cell.cached').count(), 0);
    assert.equal(await panel.locator('.heatmap .cell.resident').count(), 7);
    assert.equal(await border_style(panel.locator('.heatmap .cell[data-layer="0"][data-expert="4"]')), 'solid');
    assert.match(await panel.locator('.heatmap .cell[data-layer="0"][data-expert="4"]').getAttribute('title'), /\(pinned on GPU\)$/);
    assert.equal(await panel.locator('.legend-cached').isHidden(), true);
    const text = await panel.locator('#share-text').textContent();
    assert.match(text, /: 7 of 16 experts resident\. Expert work: GPU 50%, CPU 50%\. GPU hit rate 50%\.$/);
    assert.doesNotMatch(text, /cache/i);
    assert_clean(problems);
    await page.close();
  });

  test('a static plan reports no cache', async () => {
    const body = cache_body({ placement: { plan: 'even', capacity: 8, cache_policy: 'static', cache_slots: 0, prefetch: false } });
    body.cached = body.cached.map((row) => row.map(() => false));
    const { page, problems, panel } = await open_stubbed(body);
    assert.equal(await panel.locator('.heatmap .cell.cached').count(), 0);
    assert.equal(await panel.locator('.legend-cached').isHidden(), true);
    assert.doesNotMatch(await panel.locator('#share-text').textContent(), /cache/i);
    assert_clean(problems);
    await page.close();
  });
});

group('experts-cpu', () => {
  const f = use_server_and_browser();
  test('the experts panel says all on CPU and shows no per-layer times', async () => {
    const { page, problems } = await open_ui(f.browser.context, f.server);
    await set_settings(page, { 'Max tokens': 8 });
    await send(page, 'Which experts do you use?');
    await wait_idle(page);
    await page.getByRole('button', { name: 'Experts', exact: true }).click();
    const panel = page.getByRole('complementary', { name: 'Experts' });
    await panel.locator('.heatmap .cell').first().waitFor();
    const info = await (await fetch(`${f.server.url}/v1/experts`)).json();
    assert.equal(info.device, 'none');
    assert.match(await panel.locator('#share-text').textContent(), /all on CPU/);
    assert.equal(await panel.locator('.heatmap .cell.resident').count(), 0);
    assert.equal(await panel.locator('#layer-times').isHidden(), true);
    assert_clean(problems);
    await page.close();
  });

  // Qwen3-30B-A3B's shape (48 layers x 128 experts, top-8): the page is
  // served /v1/experts JSON of that shape, since the test model has 4 experts.
  test('the heat map stays readable at 48 layers x 128 experts', async () => {
    const L = 48, E = 128;
    const counts = Array.from({ length: L }, (_, l) => Array.from({ length: E }, (_, e) => ((l * 31 + e * 17) % 97) * (e === (l * 5) % E ? 40 : 1)));
    const resident = Array.from({ length: L }, (_, l) => Array.from({ length: E }, (_, e) => (e * 7 + l) % 5 === 0));
    const body = {
      layers: L, experts: E, top_k: 8, device: 'emulated', counts_total: counts, counts_last: counts, resident,
      work_share: { gpu: 0.4, cpu: 0.6 }, hit_rate: 0.4,
    };
    const { page, problems } = await open_ui(f.browser.context, f.server);
    await page.route('**/v1/experts', (route) => route.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify(body) }));
    await page.getByRole('button', { name: 'Experts', exact: true }).click();
    const panel = page.getByRole('complementary', { name: 'Experts' });
    const cells = panel.locator('.heatmap .cell');
    await cells.first().waitFor();
    assert.equal(await cells.count(), L * E);
    const n_resident = resident.flat().filter(Boolean).length;
    assert.equal(await panel.locator('.heatmap .cell.resident').count(), n_resident);
    // The panel widens; every cell keeps a visible size and the map fits
    // the panel's width without scrolling sideways.
    const box = await panel.boundingBox();
    assert.ok(box.width > 400, `panel ${box.width}px wide`);
    const sizes = await cells.evaluateAll((els) => els.map((e) => e.getBoundingClientRect()).map((r) => [r.width, r.height]));
    const min_w = Math.min(...sizes.map((s) => s[0])), min_h = Math.min(...sizes.map((s) => s[1]));
    assert.ok(min_w >= 3 && min_h >= 6, `smallest cell ${min_w} x ${min_h} px`);
    const fit = await panel.locator('.heatmap').evaluate((g) => [g.scrollWidth, g.parentElement.clientWidth]);
    assert.ok(fit[0] <= fit[1] + 1, `heat map ${fit[0]}px wide in a ${fit[1]}px panel`);
    // Residents are marked by a stripe; the busiest expert is fully coloured;
    // every cell still names its layer, expert and count.
    const shadow = await panel.locator('.heatmap .cell.resident').first().evaluate((e) => getComputedStyle(e).boxShadow);
    assert.notEqual(shadow, 'none');
    const max = Math.max(...counts.flat());
    const hottest = panel.locator(`.heatmap .cell[data-count="${max}"]`).first();
    assert.match(await hottest.evaluate((e) => e.style.backgroundColor), /rgb\(234, 88, 12\)|rgba\(234, 88, 12, 1\)/);
    assert.match(await hottest.getAttribute('title'), /^layer \d+, expert \d+: [\d,]+ tokens/);
    // Axis labels thin out: experts every 16, layers every 4 (and the last).
    const col_labels = await panel.locator('.heatmap .axis.col').evaluateAll((els) => els.map((e) => e.textContent).filter(Boolean));
    assert.deepEqual(col_labels, ['0', '16', '32', '48', '64', '80', '96', '112']);
    const row_labels = await panel.locator('.heatmap .axis.row').evaluateAll((els) => els.map((e) => e.textContent).filter(Boolean));
    assert.equal(row_labels.length, L / 4 + 1);
    await page.screenshot({ path: path.join(ARTIFACTS, 'experts-panel-48x128.png') });
    assert_clean(problems);
    await page.close();
  });

  // Qwen's dense layers among MoE layers (mlp_only_layers): rows without
  // experts, hatched, and left out of the resident-of-total count.
  test('dense layers show as rows without experts', async () => {
    const L = 4, E = 8;
    const counts = Array.from({ length: L }, (_, l) => Array.from({ length: E }, (_, e) => (l % 2 === 0 ? 0 : e + 1)));
    const resident = Array.from({ length: L }, (_, l) => Array.from({ length: E }, (_, e) => l % 2 === 1 && e < 2));
    const body = {
      layers: L, experts: E, top_k: 2, dense_layers: [0, 2], device: 'emulated', counts_total: counts,
      counts_last: counts, resident, work_share: { gpu: 0.25, cpu: 0.75 }, hit_rate: 0.25,
    };
    const { page, problems } = await open_ui(f.browser.context, f.server);
    await page.route('**/v1/experts', (route) => route.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify(body) }));
    await page.getByRole('button', { name: 'Experts', exact: true }).click();
    const panel = page.getByRole('complementary', { name: 'Experts' });
    await panel.locator('.heatmap .cell').first().waitFor();
    assert.equal(await panel.locator('.heatmap .cell.no-experts').count(), 2 * E);
    assert.equal(await panel.locator('.heatmap .cell[data-count]').count(), 2 * E);
    assert.match(await panel.locator('.heatmap .cell.no-experts').first().getAttribute('title'), /^layer 0: a dense layer, no experts$/);
    assert.match(await panel.locator('#share-text').textContent(), /4 of 16 experts resident/);
    assert.match(await panel.locator('#experts-summary').textContent(), /4 layers \(2 dense, without experts\)/);
    assert_clean(problems);
    await page.close();
  });
});

group('errors', () => {
  let browser;
  before(async () => {
    browser = await launch_browser();
  });
  after(async () => {
    await browser?.close();
  });

  test('an API key error is shown with its message and fixed in Settings', async () => {
    const server = await start_server(['--api-key', 'web-test-key']);
    try {
      const { page, problems } = await open_ui(browser.context, server, 'auth');
      assert.match(await page.locator('#banner').textContent(), /HTTP 401.*Set the API key in Settings/);
      await send(page, 'Hello?');
      const error = page.locator('#messages .msg-error');
      await error.waitFor();
      const text = await error.textContent();
      assert.match(text, /HTTP 401/);
      assert.match(text, /API key in Settings/);
      assert.equal(await error.getAttribute('role'), 'alert');

      await set_settings(page, { 'API key': 'web-test-key', 'Max tokens': 8 });
      await page.locator('#status[data-state="ok"]').waitFor();
      await page.getByRole('button', { name: 'Retry the request' }).click();
      await wait_idle(page);
      assert.equal(await error.count(), 0);
      assert.match(await assistant_messages(page).last().locator('.stats').textContent(), /tokens/);
      // Chromium logs each failed (401) fetch; nothing else may be logged.
      assert_clean(problems.filter((p) => !/401/.test(p)));
      await page.close();
    } finally {
      await server.stop();
    }
  });

  test('a stopped server is reported as unreachable', async () => {
    const server = await start_server();
    try {
      const { page } = await open_ui(browser.context, server);
      await server.stop();
      await send(page, 'Anyone there?');
      const error = page.locator('#messages .msg-error');
      await error.waitFor();
      assert.match(await error.textContent(), /Server unreachable/);
      await page.locator('#status[data-state="unreachable"]').waitFor();
      assert.match(await page.locator('#banner').textContent(), /cannot be reached/);
      await page.close();
    } finally {
      await server.stop();
    }
  });
});

group('tools', () => {
  // The tiny model's folder with Qwen3's chat template, which renders `tools`
  // and tool turns in the Hermes <tool_call> format the server parses.
  let model_dir;
  const hermes_model = () => {
    model_dir = mkdtempSync(path.join(os.tmpdir(), 'moe-web-tools-model-'));
    cpSync(MODEL, model_dir, { recursive: true });
    const config_path = path.join(model_dir, 'tokenizer_config.json');
    const config = JSON.parse(readFileSync(config_path, 'utf8'));
    config.chat_template = readFileSync(path.join(REPO, '..', 'shared', 'data', 'chat_templates', 'Qwen-Qwen3-0.6B.jinja'), 'utf8');
    writeFileSync(config_path, JSON.stringify(config, null, 2));
    return model_dir;
  };
  const f = use_server_and_browser([], hermes_model);
  after(() => {
    if (model_dir) rmSync(model_dir, { recursive: true, force: true });
  });

  const WEATHER_TOOL = {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The current weather in a city',
      parameters: {
        type: 'object',
        properties: { city: { type: 'string', maxLength: 12 } },
        required: ['city'],
      },
    },
  };

  // Fills the Tools field and the other fields, then saves; resolves to the
  // error shown when the dialog stayed open, or null.
  async function save_tool_settings(page, tools_text, choice, values = {}) {
    await page.getByRole('button', { name: 'Settings', exact: true }).click();
    const dialog = page.getByRole('dialog', { name: 'Settings' });
    await dialog.waitFor();
    for (const [label, value] of Object.entries(values)) await dialog.getByLabel(label, { exact: true }).fill(String(value));
    await dialog.getByLabel('Tools', { exact: true }).fill(tools_text);
    if (choice) await dialog.getByLabel('Tool choice', { exact: true }).selectOption(choice);
    await dialog.getByRole('button', { name: 'Save', exact: true }).click();
    await page.waitForFunction(() => !document.getElementById('settings-dialog').open || !document.getElementById('set-tools-error').hidden);
    return (await dialog.isVisible()) ? dialog.locator('#set-tools-error').textContent() : null;
  }

  // The JSON bodies of the page's chat requests, in order.
  function record_chat_requests(page) {
    const bodies = [];
    page.on('request', (r) => {
      if (new URL(r.url()).pathname === '/v1/chat/completions') bodies.push(r.postDataJSON());
    });
    return bodies;
  }

  const sse = (chunks) =>
    chunks.map((c) => `data: ${JSON.stringify(c)}\n\n`).join('') + 'data: [DONE]\n\n';
  const chunk = (delta, finish = null) => ({ id: 'x', object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] });

  test('Tools and tool choice are validated and kept in Settings', async () => {
    const { page, problems } = await open_ui(f.browser.context, f.server);
    const cases = [
      ['[{"type": "function"', /^Tools is not valid JSON/],
      ['{"type": "function", "function": {"name": "f"}}', /^Tools must be a JSON array/],
      ['[{"function": {"name": "f"}}]', /^Tool 1: "type" must be "function"\.$/],
      ['[{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {}}]', /^Tool 2: "function\.name" is missing\.$/],
      ['[{"type": "function", "function": {"name": "f", "parameters": []}}]', /^Tool 1 \(f\): "function\.parameters" must be an object\.$/],
      ['[{"type": "function", "function": {"name": "get weather"}}]', /^Tool 1: the name "get weather" may only have letters, digits/],
      ['[{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}]', /^Tool 2: the name "f" is used twice\.$/],
    ];
    for (const [text, expected] of cases) {
      const error = await save_tool_settings(page, text, 'required', { 'Max tokens': 33 });
      assert.match(error ?? '(saved)', expected, `Tools ${text}`);
      assert.equal(await page.getByLabel('Tools', { exact: true }).getAttribute('aria-invalid'), 'true');
      if (text === cases[0][0]) await page.screenshot({ path: path.join(ARTIFACTS, 'settings-tools-error.png') });
      await page.getByRole('button', { name: 'Cancel', exact: true }).click();
    }
    // Nothing of a refused form was saved.
    const stored = () => page.evaluate(() => JSON.parse(localStorage.getItem('moe-server.settings.v1') ?? '{}'));
    assert.notEqual((await stored()).max_tokens, 33);

    assert.equal(await save_tool_settings(page, JSON.stringify([WEATHER_TOOL]), 'required'), null);
    assert.deepEqual((await stored()).tools, [WEATHER_TOOL]);
    assert.equal((await stored()).tool_choice, 'required');
    await page.reload();
    await page.getByRole('button', { name: 'Settings', exact: true }).click();
    assert.deepEqual(JSON.parse(await page.getByLabel('Tools', { exact: true }).inputValue()), [WEATHER_TOOL]);
    assert.equal(await page.getByLabel('Tool choice', { exact: true }).inputValue(), 'required');
    assert.equal(await page.locator('#set-tools-error').isHidden(), true);
    // Emptying the field removes the tools; requests then carry none.
    await page.getByRole('button', { name: 'Cancel', exact: true }).click();
    assert.equal(await save_tool_settings(page, '  ', 'auto', { 'Max tokens': 4 }), null);
    const bodies = record_chat_requests(page);
    await send(page, 'No tools now');
    await wait_idle(page);
    assert.equal(bodies.length, 1);
    assert.equal('tools' in bodies[0], false);
    assert.equal('tool_choice' in bodies[0], false);
    assert_clean(problems);
    await page.close();
  });

  test('streamed tool calls are accumulated, shown as text, answered and sent back', async () => {
    const { page, problems } = await open_ui(f.browser.context, f.server);
    await save_tool_settings(page, JSON.stringify([WEATHER_TOOL]), 'required', { 'Max tokens': 64 });
    // Scripted replies: two calls whose arguments arrive in pieces (one not
    // JSON, both with HTML in them), then the answer after their results.
    const replies = [
      sse([
        chunk({ role: 'assistant' }),
        chunk({ content: 'Let me check.' }),
        chunk({ tool_calls: [{ index: 0, id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '{"city": ' } }] }),
        chunk({ tool_calls: [{ index: 1, id: 'call_b', type: 'function', function: { name: 'lookup', arguments: 'not json <img src=x onerror="window.__xss=1">' } }] }),
        chunk({ tool_calls: [{ index: 0, function: { arguments: '"<b>Paris</b>"}' } }] }),
        chunk({}, 'tool_calls'),
        { choices: [], usage: { prompt_tokens: 50, completion_tokens: 30, total_tokens: 80 } },
      ]),
      sse([chunk({ role: 'assistant' }), chunk({ content: 'It is **sunny**.' }), chunk({}, 'stop')]),
    ];
    const bodies = [];
    await page.route('**/v1/chat/completions', (route) => {
      bodies.push(route.request().postDataJSON());
      const body = replies[Math.min(bodies.length, replies.length) - 1];
      route.fulfill({ status: 200, headers: { 'Content-Type': 'text/event-stream' }, body });
    });
    await send(page, 'Weather in Paris?');
    await wait_idle(page);
    assert.deepEqual(bodies[0].tools, [WEATHER_TOOL]);
    assert.equal(bodies[0].tool_choice, 'required');

    const reply = assistant_messages(page).first();
    assert.equal((await reply.locator('.msg-body').innerText()).trim(), 'Let me check.');
    const cards = reply.locator('.tool-call');
    assert.equal(await cards.count(), 2);
    assert.deepEqual(await cards.locator('.tool-name').allTextContents(), ['get_weather', 'lookup']);
    assert.equal(await cards.nth(0).locator('.tool-args').textContent(), JSON.stringify({ city: '<b>Paris</b>' }, null, 2));
    assert.equal(await cards.nth(1).locator('.tool-args').textContent(), 'not json <img src=x onerror="window.__xss=1">');
    assert.equal(await reply.locator('img, b').count(), 0, 'no HTML from the model is interpreted');
    assert.equal(await reply.locator('.badge.finish-tool_calls').textContent(), 'tool calls');
    assert.equal(await page.locator('.tool-result-form').count(), 2);
    const focused_form = () => page.evaluate(() => document.activeElement?.closest('.tool-result-form')?.dataset.callId ?? null);
    assert.equal(await focused_form(), 'call_a', "the first call's Result field has the focus");
    await page.screenshot({ path: path.join(ARTIFACTS, 'tool-call-forms.png') });

    // The second call's result first: the reply waits for the other one.
    await cards.nth(1).getByLabel('Result').fill('<i>42</i>');
    await cards.nth(0).getByLabel('Result').fill('draft kept');
    await cards.nth(1).getByRole('button', { name: 'Send result' }).click();
    assert.equal(bodies.length, 1, 'no request before every call has its result');
    assert.equal(await page.locator('#messages article.msg.tool').count(), 1);
    assert.equal(await cards.nth(0).getByLabel('Result').inputValue(), 'draft kept');
    assert.equal(await cards.nth(1).locator('.tool-result-form').count(), 0);
    await cards.nth(0).getByLabel('Result').fill('{"sky": "clear"}');
    await cards.nth(0).getByRole('button', { name: 'Send result' }).click();
    await page.locator('#messages article.msg.assistant').nth(1).waitFor();
    await wait_idle(page);

    // The follow-up: the calls, their results in the calls' order, and tool_choice auto.
    assert.equal(bodies.length, 2);
    assert.equal(bodies[1].tool_choice, 'auto');
    assert.deepEqual(bodies[1].messages, [
      { role: 'user', content: 'Weather in Paris?' },
      {
        role: 'assistant',
        content: 'Let me check.',
        tool_calls: [
          { id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '{"city": "<b>Paris</b>"}' } },
          { id: 'call_b', type: 'function', function: { name: 'lookup', arguments: 'not json <img src=x onerror="window.__xss=1">' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_a', content: '{"sky": "clear"}' },
      { role: 'tool', tool_call_id: 'call_b', content: '<i>42</i>' },
    ]);
    const results = page.locator('#messages article.msg.tool');
    assert.deepEqual(await results.locator('.msg-role').allTextContents(), ['Tool result · get_weather', 'Tool result · lookup']);
    assert.deepEqual(await results.locator('.msg-body').allTextContents(), ['{"sky": "clear"}', '<i>42</i>']);
    assert.equal(await results.locator('i').count(), 0);
    assert.equal(await assistant_messages(page).last().locator('strong').textContent(), 'sunny');
    assert.equal(await page.locator('.tool-result-form').count(), 0);
    assert.equal(await page.evaluate(() => window.__xss), undefined);
    await page.screenshot({ path: path.join(ARTIFACTS, 'tool-results.png') });

    // Regenerate asks again for the reply to the results.
    await page.getByRole('button', { name: 'Regenerate this reply' }).click();
    await wait_idle(page);
    assert.equal(bodies.length, 3);
    assert.deepEqual(bodies[2].messages, bodies[1].messages);
    await page.unroute('**/v1/chat/completions');
    assert_clean(problems);
    await page.close();
  });

  test('a forced tool call round trip against the server, kept across a reload', async () => {
    const { page, problems } = await open_ui(f.browser.context, f.server);
    await save_tool_settings(page, JSON.stringify([WEATHER_TOOL]), 'required', { 'Max tokens': 200, Temperature: 0.8, Seed: 11 });
    const bodies = record_chat_requests(page);
    await send(page, 'What is the weather in Paris?');
    await wait_idle(page);
    assert.equal(await page.locator('#messages .msg-error').count(), 0, 'the request with tools was accepted');

    const reply = assistant_messages(page).first();
    const card = reply.locator('.tool-call');
    assert.ok((await card.count()) >= 1, 'the reply calls a tool');
    assert.equal(await card.first().locator('.tool-name').textContent(), 'get_weather');
    const args = JSON.parse(await card.first().locator('.tool-args').textContent());
    assert.equal(typeof args.city, 'string', `arguments ${JSON.stringify(args)}`);
    assert.ok(args.city.length <= 12, `city ${JSON.stringify(args.city)} within maxLength`);
    assert.equal(await reply.locator('.badge.finish-tool_calls').textContent(), 'tool calls');
    await page.screenshot({ path: path.join(ARTIFACTS, 'tool-call.png') });

    // Answer every call; the reply to the results follows by itself.
    const n_calls = await card.count();
    const result = '{"temperature_c": 18, "sky": "clear"}';
    for (let i = 0; i < n_calls; i++) {
      const form = page.locator('.tool-result-form').first();
      await form.getByLabel('Result').fill(result);
      await form.getByRole('button', { name: 'Send result' }).click();
    }
    await page.locator('#messages article.msg').nth(2 + n_calls).waitFor();
    await wait_idle(page);
    assert.equal(await page.locator('#messages .msg-error').count(), 0, 'the reply to the results was accepted');
    const results = page.locator('#messages article.msg.tool');
    assert.equal(await results.count(), n_calls);
    assert.equal(await results.first().locator('.msg-role').textContent(), 'Tool result · get_weather');
    assert.equal(await results.first().locator('.msg-body').textContent(), result);

    // What was sent back: the calls with their server ids, content null when
    // the reply had no text, each result with its call's id, tool_choice auto.
    assert.equal(bodies.length, 2);
    const sent = bodies[1];
    assert.equal(sent.tool_choice, 'auto');
    const call_ids = await card.evaluateAll((els) => els.map((e) => e.dataset.callId));
    const assistant_turn = sent.messages[1];
    assert.equal(assistant_turn.role, 'assistant');
    assert.deepEqual(assistant_turn.tool_calls.map((c) => c.id), call_ids);
    assert.ok(call_ids.every((id) => id.startsWith('call_')), `server call ids ${call_ids}`);
    if ((await reply.locator('.msg-body').textContent()) === '') assert.equal(assistant_turn.content, null);
    assert.deepEqual(
      sent.messages.slice(2).map((m) => [m.role, m.tool_call_id, m.content]),
      call_ids.map((id) => ['tool', id, result]),
    );

    // The reply to the results: text (under "auto" the random-weight model
    // writes no <tool_call> envelope), no calls and no result forms.
    const answer = assistant_messages(page).last();
    assert.equal(await page.locator('#messages article.msg').count(), 3 + n_calls);
    assert.ok((await answer.locator('.msg-body').innerText()).trim().length > 0, 'the answer has text');
    assert.equal(await answer.locator('.tool-call').count(), 0);
    assert.equal(await page.locator('.tool-result-form').count(), 0);
    assert.match(await answer.locator('.stats').textContent(), /tokens/);
    await page.screenshot({ path: path.join(ARTIFACTS, 'tool-round-trip.png') });

    // Reloading shows the same conversation with its cards.
    const before_reload = await page.locator('#messages').innerText();
    await page.reload();
    await page.locator('#messages article.msg').first().waitFor();
    assert.equal(await page.locator('#messages').innerText(), before_reload);
    assert.equal(await page.locator('#messages .tool-call .tool-name').first().textContent(), 'get_weather');
    assert.equal(await page.locator('#messages article.msg.tool').count(), n_calls);
    assert_clean(problems);
    await page.close();
  });
});
