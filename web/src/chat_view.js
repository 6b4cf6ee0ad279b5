// Renders a conversation's messages into the chat column: user text as plain
// text, assistant text as sanitised Markdown, per-reply statistics, error
// rows and the per-message action buttons (handled by the caller through
// data-action attributes). Holds no state of its own.
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

const FINISH_LABELS = { stopped: 'stopped', length: 'max tokens reached' };

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

function render_meta(meta, msg) {
  meta.replaceChildren();
  if (msg.stats) {
    meta.append(el('span', 'stats', stats_text(msg.stats)));
    const label = FINISH_LABELS[msg.stats.finish];
    if (label) meta.append(el('span', `badge finish-${msg.stats.finish}`, label));
  }
}

// Builds the element for message `index`. `ctx`: {busy, last_assistant, streaming_index}
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

  article.append(el('div', 'msg-role', msg.role === 'user' ? 'You' : 'Model'));
  const body = el('div', 'msg-body');
  if (msg.role === 'user') {
    body.textContent = msg.content;
  } else {
    render_assistant_body(body, msg.content);
  }
  article.append(body);

  if (msg.role === 'assistant') {
    const meta = el('div', 'msg-meta');
    render_meta(meta, msg);
    article.append(meta);
    if (index === ctx.streaming_index) article.classList.add('streaming');
  }

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
