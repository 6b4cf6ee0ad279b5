// The chat app: wires the page's elements to the API client, the stored
// conversations and settings, the message view and the experts panel.
// Everything the page shows comes from the public HTTP API of the server that
// served it (same origin); it never loads anything else.
import { ApiError, api_chat_stream, api_experts, api_health, api_models } from './api.js';
import {
  DEFAULT_SETTINGS,
  conversation_new,
  conversation_title,
  conversations_load,
  conversations_save,
  current_id_load,
  current_id_save,
  settings_load,
  settings_normalise,
  settings_save,
  tools_parse,
} from './store.js';
import { edit_element, message_element, render_streaming_reply, update_message_meta } from './chat_view.js';
import { ExpertsPanel } from './experts.js';

const HEALTH_POLL_OK_MS = 10000;
const HEALTH_POLL_WAIT_MS = 1500;
const RENDER_INTERVAL_MS = 50;
const EXPERTS_LIVE_MS = 1000; // heat map refresh while a reply streams

const $ = (id) => document.getElementById(id);

// The API wants alternating turns: drop error rows and empty replies, and
// merge consecutive messages of one role (e.g. a question resent after an
// error). Tool turns go as OpenAI has them: the assistant message with its
// tool_calls (content null when it has no text), then one {role: 'tool',
// tool_call_id, content} per result; these are never merged with neighbours.
// Only answered calls are sent (a call the user left unanswered before asking
// something else would make the request invalid), and only results of calls
// in the conversation.
function api_messages(conv, system_prompt) {
  const call_ids = new Set();
  const answered = new Set();
  for (const m of conv.messages) {
    if (m.error) continue;
    for (const c of m.tool_calls ?? []) call_ids.add(c.id);
    if (m.role === 'tool' && call_ids.has(m.tool_call_id)) answered.add(m.tool_call_id);
  }
  const out = [];
  if (system_prompt.trim()) out.push({ role: 'system', content: system_prompt });
  for (const m of conv.messages) {
    if (m.error) continue;
    if (m.role === 'tool') {
      if (answered.has(m.tool_call_id)) out.push({ role: 'tool', tool_call_id: m.tool_call_id, content: m.content });
      continue;
    }
    const calls = m.role === 'assistant' ? (m.tool_calls ?? []).filter((c) => answered.has(c.id)) : [];
    if (calls.length) {
      out.push({
        role: 'assistant',
        content: m.content || null,
        tool_calls: calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.function.name, arguments: c.function.arguments } })),
      });
      continue;
    }
    if (m.role === 'assistant' && !m.content) continue;
    const last = out[out.length - 1];
    if (last && last.role === m.role && m.role !== 'system' && !last.tool_calls) last.content += `\n\n${m.content}`;
    else out.push({ role: m.role, content: m.content });
  }
  return out;
}

// Sampling settings, and the tools when there are any. The reply to tool
// results is asked for with tool_choice "auto" when the setting is
// "required": forcing a call there too would never let the model answer.
function request_params(s, after_tool_results) {
  const p = { temperature: s.temperature, top_p: s.top_p, max_tokens: s.max_tokens };
  if (s.seed != null) p.seed = s.seed;
  if (s.tools.length) {
    p.tools = s.tools;
    p.tool_choice = after_tool_results && s.tool_choice === 'required' ? 'auto' : s.tool_choice;
  }
  return p;
}

// The index of the reply whose tool calls still wait for results: the last
// message that is not a tool result, when it is a finished assistant reply
// with calls. -1 when there is none.
function waiting_reply(conv) {
  let i = conv.messages.length - 1;
  while (i >= 0 && conv.messages[i].role === 'tool') i--;
  const m = conv.messages[i];
  return m && m.role === 'assistant' && !m.error && m.tool_calls?.length ? i : -1;
}

// The ids of that reply's calls that have no result yet.
function unanswered_calls(conv, index) {
  const done = new Set(conv.messages.slice(index + 1).map((m) => m.tool_call_id));
  return conv.messages[index].tool_calls.filter((c) => !done.has(c.id)).map((c) => c.id);
}

class App {
  constructor() {
    this.settings = settings_load();
    this.conversations = conversations_load();
    this.current = this.conversations.find((c) => c.id === current_id_load()) ?? null;
    this.model = null;
    this.model_meta = null; // /v1/models' meta of this.model (n_ctx, chat_template, ...)
    this.health = 'checking';
    this.auth_problem = null; // message while /v1/models answers 401/403
    this.gen = null; // {conv, index, controller, stopped}
    this.editing = null; // index of the user message being edited
    this.tool_drafts = new Map(); // call id -> text typed into its result form
    this.health_timer = 0;
    this.health_seq = 0;
    this.render_timer = 0;
    this.experts_timer = 0;

    this.els = {
      app: $('app'),
      messages: $('messages'),
      welcome: $('welcome'),
      prompt: $('prompt'),
      send: $('send'),
      stop: $('stop'),
      composer: $('composer'),
      conv_list: $('conv-list'),
      conv_empty: $('conv-empty'),
      status: $('status'),
      status_text: $('status-text'),
      banner: $('banner'),
      model_name: $('model-name'),
      experts_panel: $('experts-panel'),
      toggle_experts: $('toggle-experts'),
      toggle_sidebar: $('toggle-sidebar'),
      dialog: $('settings-dialog'),
    };
    this.experts = new ExpertsPanel({
      summary: $('experts-summary'),
      heatmap: $('heatmap'),
      legend: $('experts-legend'),
      legend_max: $('legend-max'),
      share: $('work-share'),
      share_gpu: $('share-gpu'),
      share_cpu: $('share-cpu'),
      share_text: $('share-text'),
      layer_times: $('layer-times'),
      layer_times_body: $('layer-times-body'),
    });
    this.experts.show_message('No statistics loaded yet.');
  }

  start() {
    this.bind();
    this.render_sidebar();
    this.render_chat();
    this.update_composer();
    this.poll_health();
    this.els.prompt.focus();
  }

  // ---- events -------------------------------------------------------------

  bind() {
    const { prompt, composer, messages } = this.els;
    composer.addEventListener('submit', (e) => {
      e.preventDefault();
      this.send_prompt();
    });
    prompt.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing && !e.altKey && !e.ctrlKey && !e.metaKey) {
        e.preventDefault();
        this.send_prompt();
      }
    });
    prompt.addEventListener('input', () => {
      this.autosize(prompt);
      this.update_composer();
    });
    this.els.stop.addEventListener('click', () => this.stop());
    $('new-chat').addEventListener('click', () => this.new_chat());
    this.els.conv_list.addEventListener('click', (e) => this.on_sidebar_click(e));
    messages.addEventListener('click', (e) => this.on_message_click(e));
    messages.addEventListener('submit', (e) => {
      if (e.target.closest('.tool-result-form')) this.on_tool_result_submit(e);
      else this.on_edit_submit(e);
    });
    messages.addEventListener('input', (e) => {
      const form = e.target.closest('.tool-result-form');
      if (form) this.tool_drafts.set(form.dataset.callId, e.target.value);
    });
    messages.addEventListener('keydown', (e) => {
      if (e.target.closest('.edit-form') && e.key === 'Escape') this.cancel_edit();
    });

    this.els.toggle_sidebar.addEventListener('click', () => this.set_sidebar(!this.els.app.classList.contains('sidebar-open')));
    this.els.toggle_experts.addEventListener('click', () => this.set_experts_open(this.els.experts_panel.hidden));
    $('experts-close').addEventListener('click', () => this.set_experts_open(false));
    $('experts-refresh').addEventListener('click', () => this.refresh_experts());
    $('experts-view').addEventListener('change', (e) => this.experts.set_view(e.target.value));

    $('open-settings').addEventListener('click', () => this.open_settings());
    $('settings-cancel').addEventListener('click', () => this.els.dialog.close());
    $('settings-reset').addEventListener('click', () => this.fill_settings_form(DEFAULT_SETTINGS));
    $('settings-form').addEventListener('submit', (e) => {
      e.preventDefault();
      this.save_settings();
    });

    document.addEventListener('keydown', (e) => {
      if (e.key === 'Escape' && this.els.app.classList.contains('sidebar-open')) this.set_sidebar(false);
    });
  }

  autosize(area) {
    area.style.height = 'auto';
    area.style.height = `${Math.min(area.scrollHeight, 240)}px`;
  }

  set_sidebar(open) {
    this.els.app.classList.toggle('sidebar-open', open);
    this.els.toggle_sidebar.setAttribute('aria-expanded', String(open));
  }

  // ---- server status ------------------------------------------------------

  // Any call restarts the polling loop; an older call still in flight drops its result.
  async poll_health() {
    clearTimeout(this.health_timer);
    const seq = ++this.health_seq;
    const state = await api_health();
    if (state === 'ok' && (!this.model || this.auth_problem)) await this.load_models();
    if (seq !== this.health_seq) return;
    this.set_health(state);
    this.health_timer = setTimeout(() => this.poll_health(), state === 'ok' ? HEALTH_POLL_OK_MS : HEALTH_POLL_WAIT_MS);
  }

  async load_models() {
    try {
      const models = await api_models(this.settings.api_key);
      this.model = models[0]?.id ?? null;
      this.model_meta = models[0]?.meta ?? null;
      this.auth_problem = null;
    } catch (err) {
      this.auth_problem = err instanceof ApiError && (err.status === 401 || err.status === 403) ? err.message : null;
    }
    this.els.model_name.textContent = this.model ?? '';
  }

  set_health(state) {
    this.health = state;
    const texts = {
      ok: this.auth_problem ? 'API key needed' : 'Ready',
      loading: 'Loading model…',
      unreachable: 'Server unreachable',
      error: 'Server error',
      checking: 'Connecting…',
    };
    const shown = state === 'ok' && this.auth_problem ? 'auth' : state;
    if (this.els.status.dataset.state !== shown) {
      this.els.status.dataset.state = shown;
      this.els.status_text.textContent = texts[state];
    }
    let banner = '';
    if (state === 'loading') banner = 'The server is loading the model. You can send messages once it is ready.';
    else if (state === 'unreachable') banner = 'The server cannot be reached. Is moe-server still running? Retrying…';
    else if (state === 'error') banner = 'The server reports a problem (/health did not answer 200).';
    else if (this.auth_problem) banner = `${this.auth_problem} Set the API key in Settings.`;
    this.show_banner(banner);
    this.update_composer();
  }

  show_banner(text) {
    const b = this.els.banner;
    if (b.textContent !== text) b.textContent = text;
    b.hidden = !text;
  }

  // ---- composer -----------------------------------------------------------

  update_composer() {
    const busy = Boolean(this.gen);
    const empty = this.els.prompt.value.trim() === '';
    this.els.send.disabled = empty || busy || this.health === 'loading';
    this.els.send.hidden = busy;
    this.els.stop.hidden = !busy;
    this.els.messages.setAttribute('aria-busy', String(busy));
  }

  send_prompt() {
    const text = this.els.prompt.value;
    if (!text.trim() || this.gen || this.health === 'loading') return;
    let conv = this.current;
    if (!conv) {
      conv = conversation_new();
      this.conversations.unshift(conv);
      this.select(conv);
    }
    // An unanswered error row is replaced by the new question.
    while (conv.messages.length && conv.messages[conv.messages.length - 1].error) conv.messages.pop();
    conv.messages.push({ role: 'user', content: text });
    if (conv.title === 'New chat') conv.title = conversation_title(text);
    this.els.prompt.value = '';
    this.autosize(this.els.prompt);
    this.generate(conv);
  }

  // ---- generation ---------------------------------------------------------

  async generate(conv) {
    const settings = this.settings;
    const history = api_messages(conv, settings.system_prompt);
    const after_tool_results = conv.messages[conv.messages.length - 1]?.role === 'tool';
    const msg = { role: 'assistant', content: '' };
    conv.messages.push(msg);
    conv.updated = Date.now();
    const index = conv.messages.length - 1;
    const controller = new AbortController();
    const gen = { conv, msg, index, controller, stopped: false };
    this.gen = gen;
    this.editing = null;
    this.persist();
    this.render_sidebar();
    this.render_chat();
    this.update_composer();

    const t_start = performance.now();
    let t_first = null;
    let pieces = 0;
    try {
      const result = await api_chat_stream({
        model: this.model ?? undefined,
        messages: history,
        params: request_params(settings, after_tool_results),
        api_key: settings.api_key,
        signal: controller.signal,
        on_delta: (text) => {
          if (t_first == null) t_first = performance.now();
          pieces++;
          msg.content += text;
          this.schedule_stream_render();
        },
        on_tool_calls: (calls) => {
          if (t_first == null) t_first = performance.now();
          msg.tool_calls = calls;
          this.schedule_stream_render();
        },
      });
      msg.stats = this.reply_stats(result, t_start, t_first, performance.now(), pieces);
    } catch (err) {
      if (err?.name === 'AbortError') {
        msg.stats = { ...this.reply_stats({}, t_start, t_first, performance.now(), pieces), finish: 'stopped' };
      } else {
        const text = err instanceof ApiError ? err.message : `Unexpected error: ${err?.message || err}`;
        const hint = err?.status === 401 || err?.status === 403 ? ' Set the API key in Settings.' : '';
        const row = { role: 'assistant', content: '', error: text + hint };
        if (msg.content || msg.tool_calls?.length) {
          msg.stats = { ...this.reply_stats({}, t_start, t_first, performance.now(), pieces), finish: 'error' };
          conv.messages.push(row);
        } else {
          conv.messages[index] = row;
        }
        if (err?.status === 0) this.poll_health();
      }
    }
    clearTimeout(this.render_timer);
    this.render_timer = 0;
    this.gen = null;
    conv.updated = Date.now();
    this.persist();
    this.render_sidebar();
    this.render_chat();
    this.update_composer();
    if (!this.els.experts_panel.hidden) this.refresh_experts();
    // The focus goes where the user types next: the first Result field when
    // calls wait for results (unless a new message is being typed), else the prompt.
    const idle = document.activeElement === document.body || document.activeElement === this.els.stop;
    const result_area = this.els.messages.querySelector('.tool-result-form textarea');
    if (result_area && (idle || (document.activeElement === this.els.prompt && !this.els.prompt.value))) result_area.focus();
    else if (idle) this.els.prompt.focus();
  }

  // Server timings when present; otherwise measured here (TTFT from request
  // start to the first piece, rate over the pieces after the first).
  reply_stats(result, t_start, t_first, t_end, pieces) {
    const timings = result.timings ?? {};
    const usage = result.usage ?? {};
    const completion_tokens = Number.isFinite(usage.completion_tokens) ? usage.completion_tokens : pieces;
    let ttft_ms = Number.isFinite(timings.ttft_ms) ? timings.ttft_ms : t_first != null ? t_first - t_start : undefined;
    let tokens_per_second = Number.isFinite(timings.predicted_per_second) ? timings.predicted_per_second : undefined;
    if (tokens_per_second === undefined && t_first != null && completion_tokens > 1 && t_end > t_first) {
      tokens_per_second = (completion_tokens - 1) / ((t_end - t_first) / 1000);
    }
    if (ttft_ms !== undefined && ttft_ms < 0) ttft_ms = undefined;
    return {
      completion_tokens,
      prompt_tokens: usage.prompt_tokens,
      ttft_ms,
      tokens_per_second,
      finish: result.finish_reason ?? null,
    };
  }

  stop() {
    if (!this.gen) return;
    this.gen.stopped = true;
    this.gen.controller.abort();
  }

  schedule_stream_render() {
    if (this.render_timer) return;
    this.render_timer = setTimeout(() => {
      this.render_timer = 0;
      this.render_stream();
    }, RENDER_INTERVAL_MS);
  }

  render_stream() {
    const gen = this.gen;
    if (!gen || gen.conv !== this.current) return;
    const article = this.els.messages.querySelector(`article[data-index="${gen.index}"]`);
    if (!article) return;
    const stick = this.near_bottom();
    render_streaming_reply(article, gen.msg);
    if (stick) this.scroll_to_bottom();
  }

  near_bottom() {
    const m = this.els.messages;
    return m.scrollHeight - m.scrollTop - m.clientHeight < 80;
  }

  scroll_to_bottom() {
    const m = this.els.messages;
    m.scrollTop = m.scrollHeight;
  }

  // ---- message actions ----------------------------------------------------

  on_message_click(e) {
    const button = e.target.closest('button[data-action]');
    if (!button) return;
    const index = Number(button.dataset.index);
    switch (button.dataset.action) {
      case 'edit':
        this.start_edit(index);
        break;
      case 'edit-cancel':
        this.cancel_edit();
        break;
      case 'regenerate':
        this.regenerate();
        break;
      case 'copy': {
        const msg = this.current?.messages[index];
        const calls = msg?.tool_calls?.length ? JSON.stringify(msg.tool_calls, null, 2) : '';
        this.copy(button, msg?.content || calls);
        break;
      }
      case 'copy-code':
        this.copy(button, button.closest('pre')?.querySelector('code')?.textContent ?? '');
        break;
    }
  }

  copy(button, text) {
    const done = (label) => {
      const old = button.textContent;
      button.textContent = label;
      setTimeout(() => (button.textContent = old), 1200);
    };
    if (!navigator.clipboard) return done('Copy unavailable');
    navigator.clipboard.writeText(text).then(
      () => done('Copied'),
      () => done('Copy failed'),
    );
  }

  // Asks again for the last reply: the one after the last question or the
  // last tool result.
  regenerate() {
    const conv = this.current;
    if (!conv || this.gen) return;
    let last_input = -1;
    conv.messages.forEach((m, i) => {
      if (m.role === 'user' || m.role === 'tool') last_input = i;
    });
    if (last_input < 0) return;
    conv.messages.length = last_input + 1;
    this.generate(conv);
  }

  // A tool result for one call of the waiting reply: kept in the calls' order
  // after it; once every call has its result, the next reply is generated.
  on_tool_result_submit(e) {
    e.preventDefault();
    const form = e.target.closest('.tool-result-form');
    const conv = this.current;
    const index = Number(form.dataset.index);
    const id = form.dataset.callId;
    if (!conv || this.gen || waiting_reply(conv) !== index || !unanswered_calls(conv, index).includes(id)) return;
    const calls = conv.messages[index].tool_calls;
    const call = calls.find((c) => c.id === id);
    const content = form.querySelector('textarea').value;
    const order = (m) => calls.findIndex((c) => c.id === m.tool_call_id);
    const results = [...conv.messages.slice(index + 1), { role: 'tool', tool_call_id: id, name: call.function.name, content }];
    results.sort((a, b) => order(a) - order(b));
    conv.messages.splice(index + 1, Infinity, ...results);
    this.tool_drafts.delete(id);
    conv.updated = Date.now();
    if (unanswered_calls(conv, index).length === 0) {
      this.generate(conv);
      return;
    }
    this.persist();
    this.render_sidebar();
    this.render_chat();
    this.els.messages.querySelector('.tool-result-form textarea')?.focus();
  }

  start_edit(index) {
    if (this.gen) return;
    this.editing = index;
    this.render_chat();
    const area = this.els.messages.querySelector('.edit-form textarea');
    if (area) {
      area.focus();
      area.setSelectionRange(area.value.length, area.value.length);
    }
  }

  cancel_edit() {
    this.editing = null;
    this.render_chat();
    this.els.prompt.focus();
  }

  on_edit_submit(e) {
    const form = e.target.closest('.edit-form');
    if (!form) return;
    e.preventDefault();
    const index = Number(form.dataset.index);
    const text = form.querySelector('textarea').value;
    const conv = this.current;
    if (!conv || this.gen || !text.trim() || conv.messages[index]?.role !== 'user') return;
    conv.messages[index] = { role: 'user', content: text };
    conv.messages.length = index + 1;
    if (index === 0) conv.title = conversation_title(text);
    this.generate(conv);
  }

  // ---- conversations ------------------------------------------------------

  persist() {
    this.conversations.sort((a, b) => b.updated - a.updated);
    conversations_save(this.conversations);
    current_id_save(this.current?.id ?? null);
  }

  select(conv) {
    this.current = conv;
    this.editing = null;
    current_id_save(conv?.id ?? null);
    this.render_sidebar();
    this.render_chat();
    this.set_sidebar(false);
  }

  new_chat() {
    this.select(null);
    this.els.prompt.focus();
  }

  delete_conversation(id) {
    const conv = this.conversations.find((c) => c.id === id);
    if (!conv) return;
    if (!window.confirm(`Delete the conversation "${conv.title}"?`)) return;
    if (this.gen?.conv === conv) this.stop();
    this.conversations = this.conversations.filter((c) => c !== conv);
    if (this.current === conv) this.current = null;
    this.persist();
    this.render_sidebar();
    this.render_chat();
  }

  on_sidebar_click(e) {
    const button = e.target.closest('button[data-conv]');
    if (!button) return;
    const id = button.dataset.conv;
    if (button.dataset.action === 'delete') this.delete_conversation(id);
    else this.select(this.conversations.find((c) => c.id === id) ?? null);
  }

  render_sidebar() {
    const list = this.els.conv_list;
    const items = this.conversations.map((c) => {
      const li = document.createElement('li');
      li.className = c === this.current ? 'conv active' : 'conv';
      const open = document.createElement('button');
      open.type = 'button';
      open.className = 'conv-open';
      open.dataset.conv = c.id;
      open.textContent = c.title;
      open.title = c.title;
      if (c === this.current) open.setAttribute('aria-current', 'page');
      const del = document.createElement('button');
      del.type = 'button';
      del.className = 'btn icon small ghost conv-delete';
      del.dataset.conv = c.id;
      del.dataset.action = 'delete';
      del.setAttribute('aria-label', `Delete conversation: ${c.title}`);
      del.textContent = '×';
      li.append(open, del);
      return li;
    });
    list.replaceChildren(...items);
    this.els.conv_empty.hidden = items.length > 0;
  }

  render_chat() {
    const conv = this.current;
    const m = this.els.messages;
    const nodes = [];
    if (!conv || conv.messages.length === 0) {
      nodes.push(this.els.welcome);
    } else {
      const waiting = this.gen ? -1 : waiting_reply(conv);
      const ctx = {
        busy: Boolean(this.gen),
        last_index: conv.messages.length - 1,
        streaming_index: this.gen?.conv === conv ? this.gen.index : -1,
        pending: new Set(waiting >= 0 ? unanswered_calls(conv, waiting) : []),
        drafts: this.tool_drafts,
      };
      conv.messages.forEach((msg, i) => {
        if (i === this.editing && msg.role === 'user') {
          const article = document.createElement('article');
          article.className = 'msg user editing';
          article.dataset.index = i;
          article.append(edit_element(msg, i));
          nodes.push(article);
        } else {
          nodes.push(message_element(msg, i, ctx));
        }
      });
    }
    m.replaceChildren(...nodes);
    if (this.editing == null) this.scroll_to_bottom();
    if (conv && this.gen?.conv === conv) {
      const article = m.querySelector(`article[data-index="${this.gen.index}"]`);
      if (article) update_message_meta(article, this.gen.msg);
    }
  }

  // ---- experts panel ------------------------------------------------------

  set_experts_open(open) {
    this.els.experts_panel.hidden = !open;
    this.els.toggle_experts.setAttribute('aria-expanded', String(open));
    this.els.app.classList.toggle('experts-open', open);
    clearInterval(this.experts_timer);
    this.experts_timer = 0;
    if (open) {
      this.refresh_experts();
      this.experts_timer = setInterval(() => {
        if (this.gen) this.refresh_experts();
      }, EXPERTS_LIVE_MS);
    }
  }

  async refresh_experts() {
    try {
      this.experts.update(await api_experts(this.settings.api_key));
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) this.experts.show_message('This server does not report expert statistics.');
      else this.experts.show_message(err instanceof ApiError ? err.message : `Could not load expert statistics: ${err?.message || err}`);
    }
  }

  // ---- settings -----------------------------------------------------------

  fill_settings_form(s) {
    $('set-system').value = s.system_prompt;
    $('set-temperature').value = s.temperature;
    $('set-top-p').value = s.top_p;
    $('set-max-tokens').value = s.max_tokens;
    $('set-seed').value = s.seed ?? '';
    $('set-api-key').value = s.api_key;
    $('set-tools').value = s.tools.length ? JSON.stringify(s.tools, null, 2) : '';
    $('set-tool-choice').value = s.tool_choice;
    this.show_tools_error('');
  }

  show_tools_error(text) {
    const box = $('set-tools-error');
    box.textContent = text;
    box.hidden = !text;
    $('set-tools').setAttribute('aria-invalid', String(Boolean(text)));
  }

  open_settings() {
    this.fill_settings_form(this.settings);
    // How the server renders chats for this model (its Jinja template or a built-in family).
    const template = this.model_meta?.chat_template;
    $('set-template').textContent = template ? `Chat template: ${template}` : '';
    this.els.dialog.showModal();
  }

  // Invalid tools keep the dialog open with the problem shown; nothing is saved.
  save_settings() {
    const tools = tools_parse($('set-tools').value);
    if (tools.error) {
      this.show_tools_error(tools.error);
      $('set-tools').focus();
      return;
    }
    const key_changed = $('set-api-key').value.trim() !== this.settings.api_key;
    this.settings = settings_normalise({
      system_prompt: $('set-system').value,
      temperature: $('set-temperature').value,
      top_p: $('set-top-p').value,
      max_tokens: $('set-max-tokens').value,
      seed: $('set-seed').value,
      api_key: $('set-api-key').value,
      tools: tools.tools,
      tool_choice: $('set-tool-choice').value,
    });
    settings_save(this.settings);
    this.els.dialog.close();
    if (key_changed) this.poll_health();
  }
}

new App().start();
