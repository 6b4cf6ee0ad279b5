// Persistence in localStorage: the settings and the saved conversations, and
// the checks that keep them safe to use (the tools list, stored messages'
// tool fields). Plain data only; rendering and the network live elsewhere. A
// corrupt or missing entry falls back to defaults instead of breaking the page.

const SETTINGS_KEY = 'moe-server.settings.v1';
const CONVERSATIONS_KEY = 'moe-server.conversations.v1';
const CURRENT_KEY = 'moe-server.current.v1';

export const DEFAULT_SETTINGS = Object.freeze({
  system_prompt: '',
  temperature: 0.7,
  top_p: 0.95,
  max_tokens: 512,
  seed: null, // null: the server picks a random seed
  api_key: '',
  tools: Object.freeze([]), // OpenAI function tools sent with every request; [] sends none
  tool_choice: 'auto',
});

export const TOOL_CHOICES = Object.freeze(['auto', 'required', 'none']);
const MAX_TOOL_CALLS = 64; // per reply, more than any client sends

function read_json(key, fallback) {
  try {
    const text = localStorage.getItem(key);
    return text == null ? fallback : JSON.parse(text);
  } catch {
    return fallback;
  }
}

function write_json(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
    return true;
  } catch {
    return false; // quota exceeded or storage disabled: keep working in memory
  }
}

function finite_or(value, fallback) {
  const n = Number(value);
  return value !== '' && value != null && Number.isFinite(n) ? n : fallback;
}

// Coerces untrusted input (storage, form fields) into a valid settings object.
export function settings_normalise(raw) {
  const s = { ...DEFAULT_SETTINGS };
  if (raw && typeof raw === 'object') {
    if (typeof raw.system_prompt === 'string') s.system_prompt = raw.system_prompt;
    s.temperature = Math.min(2, Math.max(0, finite_or(raw.temperature, s.temperature)));
    s.top_p = Math.min(1, Math.max(0, finite_or(raw.top_p, s.top_p)));
    s.max_tokens = Math.max(1, Math.round(finite_or(raw.max_tokens, s.max_tokens)));
    const seed = finite_or(raw.seed, null);
    s.seed = seed == null ? null : Math.round(seed);
    if (typeof raw.api_key === 'string') s.api_key = raw.api_key.trim();
    if (Array.isArray(raw.tools) && tools_problem(raw.tools) == null) s.tools = raw.tools;
    if (TOOL_CHOICES.includes(raw.tool_choice)) s.tool_choice = raw.tool_choice;
  }
  return s;
}

const is_object = (v) => v != null && typeof v === 'object' && !Array.isArray(v);

// Why `tools` is not a usable list of OpenAI function tools, or null when it
// is. Names follow OpenAI's rule (letters, digits, '_' and '-', at most 64)
// and are unique, as the server checks too.
export function tools_problem(tools) {
  if (!Array.isArray(tools)) return 'Tools must be a JSON array of tool definitions.';
  const names = new Set();
  for (let i = 0; i < tools.length; i++) {
    const t = tools[i];
    if (!is_object(t) || t.type !== 'function') return `Tool ${i + 1}: "type" must be "function".`;
    const name = is_object(t.function) ? t.function.name : undefined;
    if (typeof name !== 'string' || !name) return `Tool ${i + 1}: "function.name" is missing.`;
    if (!/^[a-zA-Z0-9_-]{1,64}$/.test(name)) {
      return `Tool ${i + 1}: the name "${name.slice(0, 80)}" may only have letters, digits, '_' and '-' (at most 64).`;
    }
    if (names.has(name)) return `Tool ${i + 1}: the name "${name}" is used twice.`;
    names.add(name);
    if (t.function.parameters !== undefined && !is_object(t.function.parameters)) {
      return `Tool ${i + 1} (${name}): "function.parameters" must be an object.`;
    }
  }
  return null;
}

// The Tools field's text -> {tools} or {error} (a message naming the problem).
// Empty text is no tools.
export function tools_parse(text) {
  if (!text.trim()) return { tools: [] };
  let tools;
  try {
    tools = JSON.parse(text);
  } catch (err) {
    return { error: `Tools is not valid JSON: ${err.message}` };
  }
  const error = tools_problem(tools);
  return error ? { error } : { tools };
}

const as_string = (v) => (typeof v === 'string' ? v : '');

// A stored message with its tool fields made safe to render and send: content
// a string, tool_calls a bounded list of {id, type, function: {name, arguments}}
// with string fields. Other fields (stats, error) are kept as they are.
function message_normalise(m) {
  const out = { ...m, content: as_string(m.content) };
  if (m.tool_calls !== undefined) {
    const calls = Array.isArray(m.tool_calls) ? m.tool_calls.filter(is_object).slice(0, MAX_TOOL_CALLS) : [];
    out.tool_calls = calls.map((c) => ({
      id: as_string(c.id),
      type: 'function',
      function: { name: as_string(c.function?.name), arguments: as_string(c.function?.arguments) },
    }));
  }
  if (m.role === 'tool') {
    out.tool_call_id = as_string(m.tool_call_id);
    out.name = as_string(m.name);
  }
  return out;
}

export function settings_load() {
  return settings_normalise(read_json(SETTINGS_KEY, null));
}

export function settings_save(settings) {
  write_json(SETTINGS_KEY, settings_normalise(settings));
}

// A conversation: {id, title, created, updated, messages: [...]}; a message is
// {role: 'user' | 'assistant', content, stats?, error?}, an assistant message
// may carry tool_calls: [{id, type: 'function', function: {name, arguments}}],
// and each result is {role: 'tool', tool_call_id, name, content}.
export function conversations_load() {
  const list = read_json(CONVERSATIONS_KEY, []);
  if (!Array.isArray(list)) return [];
  return list
    .filter((c) => c && typeof c.id === 'string' && Array.isArray(c.messages))
    .map((c) => ({
      ...c,
      messages: c.messages
        .filter((m) => is_object(m) && ['user', 'assistant', 'tool'].includes(m.role))
        .map(message_normalise),
    }));
}

export function conversations_save(list) {
  write_json(CONVERSATIONS_KEY, list);
}

export function current_id_load() {
  return read_json(CURRENT_KEY, null);
}

export function current_id_save(id) {
  write_json(CURRENT_KEY, id);
}

export function conversation_new() {
  const now = Date.now();
  const id = `c${now.toString(36)}${Math.random().toString(36).slice(2, 8)}`;
  return { id, title: 'New chat', created: now, updated: now, messages: [] };
}

export function conversation_title(text) {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length > 48 ? `${line.slice(0, 47)}…` : line || 'New chat';
}
