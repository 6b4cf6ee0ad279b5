// HTTP client for moe-server's public API: /health, /v1/models, /v1/experts
// and streaming /v1/chat/completions (server-sent events). Knows nothing about
// the DOM; every failure becomes an ApiError with a message fit to show a user.

export class ApiError extends Error {
  // status: HTTP status, or 0 when the server could not be reached.
  constructor(message, status = 0, code = null) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
  }
}

function auth_headers(api_key) {
  return api_key ? { Authorization: `Bearer ${api_key}` } : {};
}

// Turns a non-2xx response into an ApiError carrying the server's own message
// ({"error":{"message",...}}) when the body has one.
async function error_from_response(res) {
  let message = '';
  let code = null;
  try {
    const text = await res.text();
    try {
      const body = JSON.parse(text);
      message = body?.error?.message ?? body?.message ?? '';
      code = body?.error?.code ?? body?.error?.type ?? null;
    } catch {
      message = text.trim().slice(0, 300);
    }
  } catch {
    // The body could not be read; the status line is all we have.
  }
  const status_text = `HTTP ${res.status}${res.statusText ? ' ' + res.statusText : ''}`;
  return new ApiError(message ? `${status_text}: ${message}` : status_text, res.status, code);
}

function unreachable(err) {
  return new ApiError(`Server unreachable (${location.host}): ${err?.message || 'connection failed'}`, 0, 'unreachable');
}

async function get_json(path, api_key, signal) {
  let res;
  try {
    res = await fetch(path, { headers: auth_headers(api_key), cache: 'no-store', signal });
  } catch (err) {
    if (err?.name === 'AbortError') throw err;
    throw unreachable(err);
  }
  if (!res.ok) throw await error_from_response(res);
  return res.json();
}

// 'ok' | 'loading' | 'unreachable' | 'error'
export async function api_health() {
  try {
    const res = await fetch('/health', { cache: 'no-store' });
    // 401/403: the server is up but wants a key; /v1/models will say so.
    if (res.ok || res.status === 401 || res.status === 403) return 'ok';
    return res.status === 503 ? 'loading' : 'error';
  } catch {
    return 'unreachable';
  }
}

// The served models: [{id, meta}] (meta: n_ctx, chat_template, ... once loaded).
export async function api_models(api_key) {
  const body = await get_json('/v1/models', api_key);
  return Array.isArray(body?.data) ? body.data.map((m) => ({ id: m.id, meta: m.meta ?? null })) : [];
}

export function api_experts(api_key) {
  return get_json('/v1/experts', api_key);
}

// Yields each parsed `data:` payload of an SSE stream until `[DONE]`.
// Events may arrive split across chunks or several per chunk.
async function* sse_events(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let data = [];
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let nl;
      while ((nl = buffer.search(/\r\n|\n|\r/)) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + (buffer.startsWith('\r\n', nl) ? 2 : 1));
        if (line === '') {
          if (data.length) {
            const payload = data.join('\n');
            data = [];
            if (payload === '[DONE]') return;
            yield payload;
          }
        } else if (line.startsWith('data:')) {
          data.push(line.slice(line.startsWith('data: ') ? 6 : 5));
        }
        // Comments (":") and other fields (event:, id:, retry:) carry nothing we use.
      }
    }
    if (data.length && data.join('\n') !== '[DONE]') yield data.join('\n');
  } finally {
    reader.releaseLock();
  }
}

const MAX_TOOL_CALLS = 64; // per reply; more is a malformed stream

// Folds one chunk's delta.tool_calls into `calls` the way OpenAI clients do:
// per index, the id and name are taken when present and the arguments
// fragments are concatenated; `by_index` maps the stream's indices to calls,
// which keep the order they first appeared in. A call starts with a made-up
// id that the server's replaces, so that its result can refer to it either way.
function accumulate_tool_calls(calls, by_index, deltas) {
  if (!Array.isArray(deltas)) throw new ApiError('Malformed tool call from the server: delta.tool_calls is not a list');
  for (const d of deltas) {
    const index = d?.index ?? 0;
    if (d == null || typeof d !== 'object' || !Number.isInteger(index) || index < 0) {
      throw new ApiError(`Malformed tool call from the server: ${String(JSON.stringify(d)).slice(0, 120)}`);
    }
    let call = by_index.get(index);
    if (!call) {
      if (calls.length >= MAX_TOOL_CALLS) throw new ApiError(`The server sent more than ${MAX_TOOL_CALLS} tool calls in one reply`);
      call = { id: `call_web_${Date.now().toString(36)}_${calls.length}`, type: 'function', function: { name: '', arguments: '' } };
      by_index.set(index, call);
      calls.push(call);
    }
    if (typeof d.id === 'string' && d.id) call.id = d.id;
    if (typeof d.function?.name === 'string' && d.function.name) call.function.name = d.function.name;
    if (typeof d.function?.arguments === 'string') call.function.arguments += d.function.arguments;
  }
}

// Streams one chat completion. Calls on_delta(text) for each content piece and
// on_tool_calls(calls) whenever the reply's tool calls grow (calls: the list so
// far, [{id, type, function: {name, arguments}}], the same array each time,
// updated in place), and resolves to {finish_reason, usage, timings,
// tool_calls}. Aborting `signal` closes the connection, which makes the server
// cancel the generation; it then rejects with an AbortError.
export async function api_chat_stream({ model, messages, params, api_key, signal, on_delta, on_tool_calls }) {
  const body = {
    model,
    messages,
    stream: true,
    stream_options: { include_usage: true },
    ...params,
  };
  let res;
  try {
    res = await fetch('/v1/chat/completions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream', ...auth_headers(api_key) },
      body: JSON.stringify(body),
      signal,
    });
  } catch (err) {
    if (err?.name === 'AbortError') throw err;
    throw unreachable(err);
  }
  if (!res.ok) throw await error_from_response(res);
  if (!res.body) throw new ApiError('The server sent no response body');

  const result = { finish_reason: null, usage: null, timings: null, tool_calls: [] };
  const calls_by_index = new Map();
  try {
    for await (const payload of sse_events(res.body)) {
      let chunk;
      try {
        chunk = JSON.parse(payload);
      } catch {
        throw new ApiError(`Malformed event from the server: ${payload.slice(0, 120)}`);
      }
      if (chunk.error) throw new ApiError(chunk.error.message || 'The server reported an error', 0, chunk.error.code ?? null);
      if (chunk.usage) result.usage = chunk.usage;
      if (chunk.timings) result.timings = chunk.timings;
      for (const choice of chunk.choices ?? []) {
        const text = choice?.delta?.content;
        if (text) on_delta(text);
        if (choice?.delta?.tool_calls != null) {
          accumulate_tool_calls(result.tool_calls, calls_by_index, choice.delta.tool_calls);
          on_tool_calls?.(result.tool_calls);
        }
        if (choice?.finish_reason) result.finish_reason = choice.finish_reason;
      }
    }
  } catch (err) {
    if (err?.name === 'AbortError' || err instanceof ApiError) throw err;
    if (signal?.aborted) throw new DOMException('Aborted', 'AbortError');
    throw new ApiError(`The connection to the server broke during the reply: ${err?.message || err}`, 0, 'unreachable');
  }
  return result;
}
