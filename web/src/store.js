// Persistence in localStorage: the settings and the saved conversations.
// Plain data only; rendering and the network live elsewhere. A corrupt or
// missing entry falls back to defaults instead of breaking the page.

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
});

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
  }
  return s;
}

export function settings_load() {
  return settings_normalise(read_json(SETTINGS_KEY, null));
}

export function settings_save(settings) {
  write_json(SETTINGS_KEY, settings_normalise(settings));
}

// A conversation: {id, title, created, updated, messages: [{role, content, stats?, error?}]}
export function conversations_load() {
  const list = read_json(CONVERSATIONS_KEY, []);
  if (!Array.isArray(list)) return [];
  return list.filter((c) => c && typeof c.id === 'string' && Array.isArray(c.messages));
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
