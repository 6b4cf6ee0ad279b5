// The experts panel: a layers x experts heat map of routing counts from
// GET /v1/experts (since server start or for the last reply), the experts
// resident on the GPU marked (pinned apart from those in a cache slot), the
// CPU/GPU share of expert work and the cache's hits, evictions and prefetches.
// Pure rendering from the endpoint's JSON; fetching is the caller's job.

function matrix_max(rows) {
  let max = 0;
  for (const row of rows) for (const v of row) if (v > max) max = v;
  return max;
}

function matrix_sum(rows) {
  let sum = 0;
  for (const row of rows) for (const v of row) sum += v;
  return sum;
}

function matrix_true(rows) {
  return rows ? rows.reduce((n, row) => n + row.filter(Boolean).length, 0) : 0;
}

function percent(x) {
  return `${(100 * x).toFixed(x > 0 && x < 0.01 ? 1 : 0)}%`;
}

// Square root so that rarely used experts still show against a hot one.
function cell_alpha(count, max) {
  return count > 0 && max > 0 ? 0.12 + 0.88 * Math.sqrt(count / max) : 0;
}

// Experts per layer above which the heat map switches to its dense form.
const DENSE_FROM = 32;

// The layers that route nothing (a dense MLP among MoE layers), as a Set.
function dense_set(list, layers) {
  return new Set(Array.isArray(list) ? list.filter((l) => Number.isInteger(l) && l >= 0 && l < layers) : []);
}

function valid_matrix(m, layers, experts) {
  return Array.isArray(m) && m.length === layers && m.every((row) => Array.isArray(row) && row.length === experts);
}

// The dynamic cache of the placement: null for a static plan (no cache
// slots) or an older server that reports none.
function cache_info(d, n_cached) {
  const p = d.placement ?? {};
  const slots = Number.isInteger(p.cache_slots) && p.cache_slots > 0 ? p.cache_slots : n_cached;
  if (slots <= 0) return null;
  return { slots, n_cached, policy: typeof p.cache_policy === 'string' ? p.cache_policy : 'cache', prefetch: p.prefetch === true };
}

// " Cache: 12 hits, 3 evictions; prefetch 5 of 8 useful (63%)." from the
// execution counts of the chosen scope; the parts the server sends.
function cache_text(exec) {
  const n = (k) => (Number.isFinite(exec?.[k]) && exec[k] >= 0 ? exec[k] : null);
  const parts = [];
  const counted = (k, word) => `${n(k).toLocaleString()} ${word}${n(k) === 1 ? '' : 's'}`;
  if (n('cache_hits') !== null) parts.push(counted('cache_hits', 'hit'));
  if (n('cache_evictions') !== null) parts.push(counted('cache_evictions', 'eviction'));
  let text = parts.length ? ` Cache: ${parts.join(', ')}` : '';
  const copies = n('prefetch_copies'), useful = n('prefetch_useful');
  if (copies !== null && useful !== null && copies > 0) {
    text += `${text ? '; p' : ' P'}refetch ${useful.toLocaleString()} of ${copies.toLocaleString()} useful (${percent(useful / copies)})`;
  }
  return text ? `${text}.` : '';
}

export class ExpertsPanel {
  constructor(els) {
    this.els = els; // {summary, heatmap, legend, legend_max, share, share_gpu, share_cpu, share_text, layer_times, layer_times_body}
    this.data = null;
    this.view = 'total';
  }

  set_view(view) {
    this.view = view === 'last' ? 'last' : 'total';
    this.render();
  }

  show_message(text) {
    this.data = null;
    this.els.summary.textContent = text;
    this.els.heatmap.replaceChildren();
    this.els.heatmap.setAttribute('aria-label', 'Expert routing heat map (no data)');
    this.els.legend.hidden = true;
    this.els.share.hidden = true;
    if (this.els.layer_times) this.els.layer_times.hidden = true;
  }

  update(data) {
    const layers = data?.layers;
    const experts = data?.experts;
    if (!Number.isInteger(layers) || !Number.isInteger(experts) || !valid_matrix(data.counts_total, layers, experts)) {
      this.show_message('The server sent expert statistics this page does not understand.');
      return;
    }
    this.data = data;
    this.render();
  }

  render() {
    const d = this.data;
    if (!d) return;
    const { layers, experts } = d;
    const counts = this.view === 'last' && valid_matrix(d.counts_last, layers, experts) ? d.counts_last : d.counts_total;
    const resident = valid_matrix(d.resident, layers, experts) ? d.resident : null;
    // Of the resident experts, those in a cache slot (an older server sends no
    // `cached`: all of them pinned).
    const cached = resident && valid_matrix(d.cached, layers, experts) ? d.cached : null;
    const on_gpu = d.device && d.device !== 'none';
    const max = matrix_max(counts);
    const routed = matrix_sum(counts);
    const n_resident = matrix_true(resident);
    const cache = cache_info(d, matrix_true(cached));
    const exec = this.view === 'last' ? d.execution_last : d.execution_total;
    const dense_rows = dense_set(d.dense_layers, layers);

    const scope = this.view === 'last' ? 'in the last reply' : 'since the server started';
    const top_k = Number.isInteger(d.top_k) ? `, top-${d.top_k}` : '';
    const dense_text = dense_rows.size ? ` (${dense_rows.size} dense, without experts)` : '';
    this.els.summary.textContent = `${layers} layers${dense_text} × ${experts} experts${top_k}. ${routed.toLocaleString()} expert assignments ${scope}.`;

    // Dense layers hold no experts: they count neither as resident nor in the total.
    this.render_share(d, on_gpu, n_resident, (layers - dense_rows.size) * experts, cache, exec);
    this.render_grid(counts, resident, max, layers, experts, dense_rows, cached);
    this.render_layer_times(exec, layers, on_gpu);

    this.els.legend.hidden = false;
    this.els.legend_max.textContent = max.toLocaleString();
    this.els.legend.querySelector('.legend-resident').hidden = !on_gpu;
    const legend_cached = this.els.legend.querySelector('.legend-cached');
    if (legend_cached) legend_cached.hidden = !(on_gpu && cache);
    this.els.heatmap.setAttribute(
      'aria-label',
      `Expert routing heat map, ${layers} layers by ${experts} experts, ${routed} assignments ${scope}, busiest expert ${max}.`,
    );
  }

  render_share(d, on_gpu, n_resident, n_total, cache, exec) {
    const { share, share_gpu, share_cpu, share_text } = this.els;
    share.hidden = false;
    if (!on_gpu) {
      share_gpu.style.width = '0%';
      share_cpu.style.width = '100%';
      share_text.textContent = d.device_name ? `No GPU (${d.device_name}): all on CPU.` : 'No GPU: all on CPU.';
      share.dataset.device = 'none';
      return;
    }
    const gpu = Math.min(1, Math.max(0, Number(d.work_share?.gpu) || 0));
    const cpu = Math.min(1, Math.max(0, Number(d.work_share?.cpu ?? 1 - gpu) || 0));
    share_gpu.style.width = `${100 * gpu}%`;
    share_cpu.style.width = `${100 * cpu}%`;
    const hit = typeof d.hit_rate === 'number' ? ` GPU hit rate ${percent(d.hit_rate)}.` : '';
    const device =
      d.device === 'emulated'
        ? 'Emulated GPU (dry run of placement; it computes on the CPU)'
        : d.device === 'cuda' && d.device_name
          ? `GPU ${d.device_name}`
          : d.device;
    const in_cache = cache
      ? ` (${cache.n_cached} in ${cache.slots} cache slot${cache.slots === 1 ? '' : 's'}, ${cache.policy}, prefetch ${cache.prefetch ? 'on' : 'off'})`
      : '';
    share_text.textContent = `${device}: ${n_resident} of ${n_total} experts resident${in_cache}. Expert work: GPU ${percent(gpu)}, CPU ${percent(cpu)}.${hit}${cache ? cache_text(exec) : ''}`;
    share.dataset.device = 'gpu';
  }

  // Per MoE layer: the latency model's predicted time of each side against
  // the measured one (ms, summed over the layer's runs in the chosen scope).
  render_layer_times(exec, layers, on_gpu) {
    const { layer_times, layer_times_body } = this.els;
    if (!layer_times) return;
    const per = exec?.per_layer;
    const keys = ['predicted_cpu_ms', 'measured_cpu_ms', 'predicted_device_ms', 'measured_device_ms'];
    // A CPU-only server plans and times nothing (every expert runs on the CPU).
    if (!on_gpu || !per || !keys.every((k) => Array.isArray(per[k]) && per[k].length === layers)) {
      layer_times.hidden = true;
      return;
    }
    const frag = document.createDocumentFragment();
    for (let l = 0; l < layers; l++) {
      const row = document.createElement('tr');
      const head = document.createElement('th');
      head.scope = 'row';
      head.textContent = `L${l}`;
      row.append(head);
      for (const k of keys) {
        const cell = document.createElement('td');
        const v = Number(per[k][l]);
        cell.textContent = `${Number.isFinite(v) ? v.toFixed(1) : '?'} ms`;
        cell.dataset.key = k;
        row.append(cell);
      }
      frag.append(row);
    }
    layer_times_body.replaceChildren(frag);
    layer_times.hidden = false;
  }

  // Up to DENSE_FROM experts: square cells with borders, solid for a pinned
  // expert and dashed for one in a cache slot. Beyond (64 or 128 experts,
  // top-8): the panel widens, cells become narrow bars that fill its width
  // without borders, a pinned expert is a green stripe on top and a cached
  // one a blue stripe at the bottom, and axis labels thin out (experts every
  // 16, layers every 4 past 24). A dense layer's row is greyed out, its cells
  // saying it has no experts.
  render_grid(counts, resident, max, layers, experts, dense_rows = new Set(), cached = null) {
    const grid = this.els.heatmap;
    const dense = experts > DENSE_FROM;
    grid.classList.toggle('dense', dense);
    grid.closest('.experts')?.toggleAttribute('data-wide', dense);
    grid.style.gridTemplateColumns = dense
      ? `2.5em repeat(${experts}, minmax(3px, 1fr))`
      : `2.5em repeat(${experts}, minmax(0, 2rem))`;
    const frag = document.createDocumentFragment();
    const label_every = experts <= 16 ? 1 : experts <= 64 ? 8 : 16;
    const row_label_every = layers <= 24 ? 1 : 4;

    const corner = document.createElement('span');
    corner.className = 'axis';
    frag.append(corner);
    for (let e = 0; e < experts; e++) {
      const h = document.createElement('span');
      h.className = 'axis col';
      h.textContent = e % label_every === 0 ? String(e) : '';
      frag.append(h);
    }
    for (let l = 0; l < layers; l++) {
      const label = document.createElement('span');
      label.className = 'axis row';
      label.textContent = l % row_label_every === 0 || l === layers - 1 ? `L${l}` : '';
      frag.append(label);
      if (dense_rows.has(l)) label.title = `layer ${l}: dense, no experts`;
      for (let e = 0; e < experts; e++) {
        if (dense_rows.has(l)) {
          const cell = document.createElement('span');
          cell.className = 'cell no-experts';
          cell.dataset.layer = l;
          cell.title = `layer ${l}: a dense layer, no experts`;
          frag.append(cell);
          continue;
        }
        const count = counts[l][e];
        const on_gpu = resident ? Boolean(resident[l][e]) : false;
        const in_cache = on_gpu && cached ? Boolean(cached[l][e]) : false;
        const cell = document.createElement('span');
        cell.className = in_cache ? 'cell resident cached' : on_gpu ? 'cell resident' : 'cell';
        cell.dataset.layer = l;
        cell.dataset.expert = e;
        cell.dataset.count = count;
        const alpha = cell_alpha(count, max);
        if (alpha > 0) cell.style.backgroundColor = `rgba(234, 88, 12, ${alpha.toFixed(3)})`;
        const where = in_cache ? ' (in a cache slot)' : on_gpu ? ' (pinned on GPU)' : '';
        cell.title = `layer ${l}, expert ${e}: ${count.toLocaleString()} tokens${where}`;
        frag.append(cell);
      }
    }
    grid.replaceChildren(frag);
  }
}
