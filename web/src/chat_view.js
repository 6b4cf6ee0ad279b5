// Renders a conversation's messages into the chat column: user text as plain
// text, assistant text as sanitised Markdown, the reply's tool calls as cards
// (with a result form while a call waits for its result), tool results as
// plain-text cards, per-reply statistics, error rows and the per-message
// action buttons (handled by the caller through data-action attributes and
// the result forms' submit events). Model and tool text only ever reaches the
// page as textContent or through the Markdown sanitiser. Holds no state of
// its own.
import { markdown_to_html } from './markdown.js';

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text != null) node.textContent = text;
  return node;
}

function action_button(action, label, index, aria_label) {
  const b = el('button', 'btn small ghost', label);
  b.type = 'button';
  b.dataset.action = action;
  b.dataset.index = index;
  if (aria_label) b.setAttribute('aria-label', aria_label);
  return b;
}

function fmt_ms(ms) {
  return ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${Math.round(ms)} ms`;
}

// stats: {completion_tokens, prompt_tokens, ttft_ms, tokens_per_second, finish}
export function stats_text(stats) {
  const parts = [];
  if (Number.isFinite(stats.completion_tokens)) parts.push(`${stats.completion_tokens} tokens`);
  if (Number.isFinite(stats.ttft_ms)) parts.push(`TTFT ${fmt_ms(stats.ttft_ms)}`);
  if (Number.isFinite(stats.tokens_per_second)) parts.push(`${stats.tokens_per_second.toFixed(1)} tok/s`);
  return parts.join(' · ');
}

const FINISH_LABELS = { stopped: 'stopped', length: 'max tokens reached', tool_calls: 'tool calls' };

function add_code_copy_buttons(body) {
  for (const pre of body.querySelectorAll('pre')) {
    const b = el('button', 'btn small ghost code-copy', 'Copy');
    b.type = 'button';
    b.dataset.action = 'copy-code';
    b.setAttribute('aria-label', 'Copy code');
    pre.prepend(b);
  }
}

export function render_assistant_body(body, content) {
  body.innerHTML = markdown_to_html(content);
  add_code_copy_buttons(body);
}

// A call's arguments, pretty-printed when they are JSON, else as sent.
function format_arguments(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

// The form under a call that waits for its result: "Result" and "Send result".
function tool_result_form(call, index, draft) {
  const form = el('form', 'tool-result-form');
  form.dataset.index = index;
  form.dataset.callId = call.id;
  const id = `tool-result-${index}-${call.id}`;
  const label = el('label', null, 'Result');
  label.htmlFor = id;
  const area = el('textarea');
  area.id = id;
  area.rows = 3;
  area.value = draft ?? '';
  area.placeholder = `What ${call.function.name || 'the tool'} returned`;
  const buttons = el('div', 'edit-buttons');
  const send = el('button', 'btn primary small', 'Send result');
  send.type = 'submit';
  buttons.append(send);
  form.append(label, area, buttons);
  return form;
}

// One card per call: the function's name and its arguments; `pending` (a Set
// of call ids) says which get a result form, `drafts` (id -> text) refills them.
function render_tool_calls(container, msg, index, pending, drafts) {
  const cards = (msg.tool_calls ?? []).map((call) => {
    const card = el('div', 'tool-call');
    card.dataset.callId = call.id;
    card.setAttribute('role', 'group');
    card.setAttribute('aria-label', `Tool call: ${call.function.name}`);
    const head = el('div', 'tool-head');
    head.append(el('span', 'tool-kind', 'Tool call'), el('span', 'tool-name', call.function.name));
    card.append(head, el('pre', 'tool-args', format_arguments(call.function.arguments)));
    if (pending?.has(call.id)) card.append(tool_result_form(call, index, drafts?.get(call.id)));
    return card;
  });
  container.replaceChildren(...cards);
  container.hidden = cards.length === 0;
}

// Updates a streaming reply's text and tool-call cards in place.
export function render_streaming_reply(article, msg) {
  render_assistant_body(article.querySelector('.msg-body'), msg.content);
  const calls = article.querySelector('.tool-calls');
  if (calls) render_tool_calls(calls, msg, Number(article.dataset.index), null, null);
}

function render_meta(meta, msg) {
  meta.replaceChildren();
  if (msg.stats) {
    meta.append(el('span', 'stats', stats_text(msg.stats)));
    const label = FINISH_LABELS[msg.stats.finish];
    if (label) meta.append(el('span', `badge finish-${msg.stats.finish}`, label));
  }
}

function role_label(msg) {
  if (msg.role === 'user') return 'You';
  if (msg.role === 'tool') return `Tool result · ${msg.name || msg.tool_call_id}`;
  return 'Model';
}

// Builds the element for message `index`. `ctx`: {busy, last_index,
// streaming_index, pending: Set of call ids waiting for a result form,
// drafts: Map call id -> text typed into its form}
export function message_element(msg, index, ctx) {
  const article = el('article', `msg ${msg.role}`);
  article.dataset.index = index;
  article.dataset.role = msg.role;

  if (msg.error) {
    article.classList.add('error');
    const box = el('div', 'msg-error', msg.error);
    box.setAttribute('role', 'alert');
    article.append(box);
    if (!ctx.busy && index === ctx.last_index) {
      const actions = el('div', 'msg-actions');
      actions.append(action_button('regenerate', 'Retry', index, 'Retry the request'));
      article.append(actions);
    }
    return article;
  }

  article.append(el('div', 'msg-role', role_label(msg)));
  const body = el('div', 'msg-body');
  if (msg.role === 'assistant') {
    render_assistant_body(body, msg.content);
  } else {
    body.textContent = msg.content;
  }
  article.append(body);

  if (msg.role === 'assistant') {
    const calls = el('div', 'tool-calls');
    render_tool_calls(calls, msg, index, ctx.pending, ctx.drafts);
    article.append(calls);
    if (msg.tool_calls?.length) article.classList.add('has-calls');
    const meta = el('div', 'msg-meta');
    render_meta(meta, msg);
    article.append(meta);
    if (index === ctx.streaming_index) article.classList.add('streaming');
  }

  if (msg.role === 'tool') return article;
  const actions = el('div', 'msg-actions');
  if (!ctx.busy) {
    if (msg.role === 'user') actions.append(action_button('edit', 'Edit', index, 'Edit and resend this message'));
    if (msg.role === 'assistant') {
      actions.append(action_button('copy', 'Copy', index, 'Copy this reply'));
      if (index === ctx.last_index) actions.append(action_button('regenerate', 'Regenerate', index, 'Regenerate this reply'));
    }
  }
  article.append(actions);
  return article;
}

export function update_message_meta(article, msg) {
  const meta = article.querySelector('.msg-meta');
  if (meta) render_meta(meta, msg);
}

// Inline editor for a user message: a labelled textarea and Send / Cancel.
export function edit_element(msg, index) {
  const form = el('form', 'edit-form');
  form.dataset.index = index;
  const id = `edit-${index}`;
  const label = el('label', 'visually-hidden', 'Edit message');
  label.htmlFor = id;
  const area = el('textarea');
  area.id = id;
  area.value = msg.content;
  area.rows = Math.min(12, Math.max(2, msg.content.split('\n').length));
  const buttons = el('div', 'edit-buttons');
  const send = el('button', 'btn primary small', 'Send');
  send.type = 'submit';
  const cancel = el('button', 'btn small', 'Cancel');
  cancel.type = 'button';
  cancel.dataset.action = 'edit-cancel';
  buttons.append(cancel, send);
  form.append(label, area, buttons);
  return form;
}
